// Package abi is the seam between the policy package, which plugin authors
// use, and the glue that build-plugin generates around the WIT bindings.
// Plugin code never imports it.
//
// Everything here is in plain Go types, so a plugin builds and tests with the
// ordinary Go toolchain on any platform; only the glue is WebAssembly-specific.
package abi

import (
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"time"
)

// Context is what the host passes to every hook: the WIT record
// registration-context, with the field names and order of the generated Go
// type, so the glue converts one into the other.
type Context struct {
	NodeName                string
	DriverName              string
	DriverVersion           string
	CsiAddress              string
	KubeletRegistrationPath string
	PluginRegistrationPath  string
	SettingsJson            string
}

// Failure is the input of the failure hook.
type Failure struct {
	// KubeletRejected is the only source the WIT defines today.
	Error   string
	Attempt uint32
	Elapsed time.Duration
}

// Action is what the failure hook decided.
type Action struct {
	Kind     ActionKind
	ExitCode uint8
	Delay    time.Duration
}

// ActionKind names the failure-action variant.
type ActionKind uint8

// The failure-action variants, in the WIT's order.
const (
	Exit ActionKind = iota
	Retry
	Ignore
	Defer
)

// Exports is one plugin, with its types erased: what the glue calls.
// A nil hook is not implemented.
type Exports struct {
	Name, Version string
	Validate      func(settingsJSON string) error
	// Replacement decisions return (value, true) to change it, ("", false) to keep it.
	DriverName func(ctx Context, current string) (string, bool, error)
	Versions   func(ctx Context, current []string) ([]string, error)
	Failure    func(ctx Context, f Failure) (Action, error)
	Endpoint   func(ctx Context, current string) (string, bool, error)
}

var (
	mu       sync.Mutex
	exported *Exports
	logger   = func(level uint8, message string) {
		fmt.Fprintf(os.Stderr, "[%d] %s\n", level, message)
	}
)

// Register records the plugin. A second call is a programming error.
func Register(e *Exports) {
	mu.Lock()
	defer mu.Unlock()
	if exported != nil {
		panic(fmt.Sprintf("policy.Export called twice (%q, then %q): a component is one plugin", exported.Name, e.Name))
	}
	exported = e
}

// Plugin is what Register recorded; it panics if no package called
// policy.Export, which the glue reports as a trap naming the fix.
func Plugin() *Exports {
	mu.Lock()
	defer mu.Unlock()
	if exported == nil {
		panic("no plugin: call policy.Export(yourPlugin) in an init function of the package build-plugin builds")
	}
	return exported
}

// Hooks lists, by their WIT names, the hooks the registered plugin implements.
// build-plugin runs this natively to choose the world it builds.
func Hooks() []string {
	e := Plugin()
	var hooks []string
	for name, present := range map[string]bool{
		"driver-name": e.DriverName != nil,
		"versions":    e.Versions != nil,
		"failure":     e.Failure != nil,
		"endpoint":    e.Endpoint != nil,
	} {
		if present {
			hooks = append(hooks, name)
		}
	}
	sort.Strings(hooks)
	return hooks
}

// pluginType answers policy.RegistrarPluginType; natively, 0 (CSI).
var pluginType = func() uint8 { return 0 }

// SetPluginType sets what policy.RegistrarPluginType asks; the glue points it
// at the host's registrar-info import.
func SetPluginType(f func() uint8) {
	mu.Lock()
	defer mu.Unlock()
	pluginType = f
}

// PluginType asks the host which kubelet plugin type is registered: 0 CSI, 1 DRA.
func PluginType() uint8 {
	mu.Lock()
	f := pluginType
	mu.Unlock()
	return f()
}

// SetLogger sets where policy.Log writes; the glue points it at the host's
// log import. Natively it writes to stderr.
func SetLogger(f func(level uint8, message string)) {
	mu.Lock()
	defer mu.Unlock()
	logger = f
}

// Log writes one line through the logger.
func Log(level uint8, message string) {
	mu.Lock()
	f := logger
	mu.Unlock()
	f(level, message)
}

// Reset forgets the registered plugin; for the SDK's own tests.
func Reset() {
	mu.Lock()
	defer mu.Unlock()
	exported = nil
}

// Millis is a duration as the WIT carries it: whole milliseconds, within
// 0..2^32-1.
func Millis(d time.Duration) uint32 {
	ms := d.Milliseconds()
	switch {
	case ms < 0:
		return 0
	case ms > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(ms)
}
