// Package policy is the Go SDK for csi-node-driver-registrar policy plugins.
//
// A plugin is a Go package whose init function calls Export with a value that
// implements Plugin and one or more of the hook interfaces: DriverNamer,
// VersionChooser, FailureHandler, EndpointMapper. build-plugin (beside this
// file) turns the package into a WebAssembly component that exports exactly
// those hooks:
//
//	type Settings struct {
//		Suffix string `json:"suffix"`
//	}
//
//	type PoolSuffix struct{}
//
//	func (PoolSuffix) Name() string    { return "pool-suffix" }
//	func (PoolSuffix) Version() string { return "0.1.0" }
//	func (PoolSuffix) Validate(s Settings) error {
//		if s.Suffix == "" {
//			return errors.New("suffix must be a non-empty string")
//		}
//		return nil
//	}
//
//	func (PoolSuffix) RewriteDriverName(ctx *policy.Context[Settings], current string) (policy.NameDecision, error) {
//		return policy.Rename(current + ctx.Settings.Suffix), nil
//	}
//
//	func init() { policy.Export[Settings](PoolSuffix{}) }
//
// Settings arrive from the plugin's TOML `settings` table as JSON and are
// decoded into S with encoding/json; unknown keys are refused. They are
// checked once at load: an error from decoding or from Validate stops the
// registrar with the plugin's message.
//
// The package has no WebAssembly-specific code: a plugin builds, vets and
// tests with the ordinary Go toolchain, and its methods can be unit-tested
// directly. The registrar checks every answer (the CSI naming rules, versions
// as the kubelet parses them, an absolute endpoint) before it uses it.
package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/csi-registrar/policy-go/abi"
)

// Plugin is what every plugin implements: its name and version (for the
// registrar's logs and `plugin inspect`) and a check of its settings.
type Plugin[S any] interface {
	Name() string
	Version() string
	// Validate checks the settings beyond their type, once at load. An error
	// stops the registrar with this message.
	Validate(settings S) error
}

// Context is what the registrar knows when it calls a hook, with the
// plugin's settings decoded.
type Context[S any] struct {
	// The node this registrar runs on (KUBE_NODE_NAME; empty if unset).
	NodeName string
	// The driver's name as Identity/GetPluginInfo returned it, before any rewriting.
	DriverName string
	// GetPluginInfo's vendor_version.
	DriverVersion string
	// --csi-address: the driver socket as the registrar sees it.
	CSIAddress string
	// --kubelet-registration-path: the driver socket as the kubelet sees it.
	KubeletRegistrationPath string
	// --plugin-registration-path: the kubelet's plugin registry directory.
	PluginRegistrationPath string
	// The plugin's settings table.
	Settings S
}

// DriverNamer decides the driver name advertised to the kubelet (and so the
// socket name <name>-reg.sock). current is the name after the plugins before
// this one in the chain.
type DriverNamer[S any] interface {
	RewriteDriverName(ctx *Context[S], current string) (NameDecision, error)
}

// VersionChooser decides PluginInfo.supported_versions. current is the list
// after the plugins before this one (by default ["1.0.0"]).
type VersionChooser[S any] interface {
	SupportedVersions(ctx *Context[S], current []string) ([]string, error)
}

// FailureHandler decides what to do when the kubelet refuses the registration.
type FailureHandler[S any] interface {
	OnRegistrationFailure(ctx *Context[S], failure RegistrationFailure) (FailureAction, error)
}

// EndpointMapper decides PluginInfo.endpoint, the driver socket the kubelet
// dials. current is the endpoint after the plugins before this one (by
// default --kubelet-registration-path).
type EndpointMapper[S any] interface {
	MapEndpoint(ctx *Context[S], current string) (EndpointDecision, error)
}

// NameDecision is a DriverNamer's answer: KeepName or Rename.
type NameDecision struct {
	name   string
	rename bool
}

// KeepName leaves the name as it is.
func KeepName() NameDecision { return NameDecision{} }

// Rename advertises name instead. It must follow the CSI naming rules: at
// most 63 characters, alphanumerics at both ends, alphanumerics, '-' and '.'
// between.
func Rename(name string) NameDecision { return NameDecision{name: name, rename: true} }

// EndpointDecision is an EndpointMapper's answer: KeepEndpoint or ReplaceEndpoint.
type EndpointDecision struct {
	path    string
	replace bool
}

// KeepEndpoint leaves the endpoint as it is.
func KeepEndpoint() EndpointDecision { return EndpointDecision{} }

// ReplaceEndpoint advertises path instead: an absolute path shorter than 108 bytes.
func ReplaceEndpoint(path string) EndpointDecision {
	return EndpointDecision{path: path, replace: true}
}

// RegistrationFailure is one refusal by the kubelet.
type RegistrationFailure struct {
	// The kubelet's error text.
	Error string
	// 1 for the first failure since the last successful registration.
	Attempt uint32
	// Time since the first failure of this streak (millisecond precision).
	Elapsed time.Duration
}

// FailureAction is a FailureHandler's answer: Exit, Retry, Ignore or Defer.
type FailureAction struct{ action abi.Action }

// Exit removes the registration socket and exits with code (upstream: 1).
func Exit(code uint8) FailureAction {
	return FailureAction{abi.Action{Kind: abi.Exit, ExitCode: code}}
}

// Retry re-creates the registration socket after delay, so the kubelet
// registers again. The registrar clamps delay to its configured
// [min_retry_ms, max_retry_ms].
func Retry(delay time.Duration) FailureAction {
	return FailureAction{abi.Action{Kind: abi.Retry, Delay: delay}}
}

// Ignore logs the refusal and keeps serving.
func Ignore() FailureAction { return FailureAction{abi.Action{Kind: abi.Ignore}} }

// Defer has no opinion: the next plugin decides, and when every plugin
// defers, the built-in default (upstream: exit 1) applies.
func Defer() FailureAction { return FailureAction{abi.Action{Kind: abi.Defer}} }

// Level is the level of a log line.
type Level uint8

// The levels of the host's log, in the WIT's order.
const (
	Trace Level = iota
	Debug
	Info
	Warn
	Error
)

// Log writes a line to the registrar's log, tagged with the plugin's id and
// the hook. It is the only thing a plugin can reach outside itself; the host
// bounds the line's length and the lines per call.
func Log(level Level, message string) { abi.Log(uint8(level), message) }

// Logf is Log with fmt.Sprintf.
func Logf(level Level, format string, args ...any) {
	Log(level, fmt.Sprintf(format, args...))
}

// PluginType is the kubelet plugin type being registered (the registrar's
// --plugin-type).
type PluginType uint8

const (
	// CSIPlugin: supported versions are semantic versions with a 1.x.
	CSIPlugin PluginType = iota
	// DRAPlugin: supported versions are gRPC service names (v1.DRAPlugin).
	DRAPlugin
)

// RegistrarPluginType asks the registrar which plugin type it registers
// (registrar-info, WIT 0.1.1). Natively (go test) it answers CSIPlugin.
func RegistrarPluginType() PluginType { return PluginType(abi.PluginType()) }

// Export makes p the plugin of this component. Call it once, from an init
// function. The hooks exported are those of DriverNamer, VersionChooser,
// FailureHandler and EndpointMapper that p implements.
func Export[S any](p Plugin[S]) {
	abi.Register(exports(p))
}

// SettingsDefaulter is implemented by a plugin whose settings have
// defaults: the keys the TOML table leaves out keep DefaultSettings' values.
type SettingsDefaulter[S any] interface {
	DefaultSettings() S
}

// Settings decodes settings as the registrar hands them to a plugin: JSON
// into S (starting from DefaultSettings, if the plugin has them), unknown
// keys refused.
func Settings[S any](p Plugin[S], settingsJSON string) (S, error) {
	var s S
	if d, ok := p.(SettingsDefaulter[S]); ok {
		s = d.DefaultSettings()
	}
	d := json.NewDecoder(bytes.NewReader([]byte(settingsJSON)))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		return s, fmt.Errorf("invalid settings for %s: %w", p.Name(), err)
	}
	return s, nil
}

func exports[S any](p Plugin[S]) *abi.Exports {
	context := func(c abi.Context) (*Context[S], error) {
		s, err := Settings(p, c.SettingsJson)
		if err != nil {
			return nil, err
		}
		return &Context[S]{
			NodeName:                c.NodeName,
			DriverName:              c.DriverName,
			DriverVersion:           c.DriverVersion,
			CSIAddress:              c.CsiAddress,
			KubeletRegistrationPath: c.KubeletRegistrationPath,
			PluginRegistrationPath:  c.PluginRegistrationPath,
			Settings:                s,
		}, nil
	}
	e := &abi.Exports{
		Name:    p.Name(),
		Version: p.Version(),
		Validate: func(settingsJSON string) error {
			s, err := Settings(p, settingsJSON)
			if err != nil {
				return err
			}
			return p.Validate(s)
		},
	}
	if h, ok := p.(DriverNamer[S]); ok {
		e.DriverName = func(c abi.Context, current string) (string, bool, error) {
			ctx, err := context(c)
			if err != nil {
				return "", false, err
			}
			d, err := h.RewriteDriverName(ctx, current)
			return d.name, d.rename, err
		}
	}
	if h, ok := p.(VersionChooser[S]); ok {
		e.Versions = func(c abi.Context, current []string) ([]string, error) {
			ctx, err := context(c)
			if err != nil {
				return nil, err
			}
			return h.SupportedVersions(ctx, current)
		}
	}
	if h, ok := p.(FailureHandler[S]); ok {
		e.Failure = func(c abi.Context, f abi.Failure) (abi.Action, error) {
			ctx, err := context(c)
			if err != nil {
				return abi.Action{}, err
			}
			a, err := h.OnRegistrationFailure(ctx, RegistrationFailure(f))
			return a.action, err
		}
	}
	if h, ok := p.(EndpointMapper[S]); ok {
		e.Endpoint = func(c abi.Context, current string) (string, bool, error) {
			ctx, err := context(c)
			if err != nil {
				return "", false, err
			}
			d, err := h.MapEndpoint(ctx, current)
			return d.path, d.replace, err
		}
	}
	return e
}
