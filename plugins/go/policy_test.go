package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/csi-registrar/policy-go/abi"
)

type settings struct {
	Suffix string `json:"suffix"`
}

// every implements Plugin and all four hooks; failing makes each hook fail.
type every struct{ failing bool }

func (every) Name() string    { return "every" }
func (every) Version() string { return "1.2.3" }
func (every) Validate(s settings) error {
	if s.Suffix == "bad" {
		return errors.New("suffix must not be bad")
	}
	return nil
}

func (e every) err() error {
	if e.failing {
		return errors.New("cannot decide")
	}
	return nil
}

func (e every) RewriteDriverName(ctx *Context[settings], current string) (NameDecision, error) {
	if ctx.Settings.Suffix == "" {
		return KeepName(), e.err()
	}
	return Rename(current + ctx.Settings.Suffix + "." + ctx.NodeName), e.err()
}

func (e every) SupportedVersions(ctx *Context[settings], current []string) ([]string, error) {
	return append(current, "1.9.0"), e.err()
}

func (e every) OnRegistrationFailure(ctx *Context[settings], f RegistrationFailure) (FailureAction, error) {
	switch {
	case f.Attempt > 3:
		return Exit(7), e.err()
	case strings.Contains(f.Error, "ignore"):
		return Ignore(), e.err()
	case f.Elapsed > time.Minute:
		return Defer(), e.err()
	}
	return Retry(f.Elapsed * 2), e.err()
}

func (e every) MapEndpoint(ctx *Context[settings], current string) (EndpointDecision, error) {
	if ctx.CSIAddress == "" {
		return KeepEndpoint(), e.err()
	}
	return ReplaceEndpoint("/plugins/" + ctx.DriverName + "/csi.sock"), e.err()
}

// nameOnly implements one hook.
type nameOnly struct{}

func (nameOnly) Name() string            { return "name-only" }
func (nameOnly) Version() string         { return "0.0.1" }
func (nameOnly) Validate(struct{}) error { return nil }
func (nameOnly) RewriteDriverName(*Context[struct{}], string) (NameDecision, error) {
	return KeepName(), nil
}

func exported(t *testing.T, p any) *abi.Exports {
	t.Helper()
	abi.Reset()
	t.Cleanup(abi.Reset)
	switch p := p.(type) {
	case every:
		Export[settings](p)
	case nameOnly:
		Export[struct{}](p)
	}
	return abi.Plugin()
}

func ctx(settingsJSON string) abi.Context {
	return abi.Context{
		NodeName:     "node-a1",
		DriverName:   "hostpath.csi.k8s.io",
		CsiAddress:   "/csi/csi.sock",
		SettingsJson: settingsJSON,
	}
}

func TestTheHooksExportedAreTheInterfacesImplemented(t *testing.T) {
	e := exported(t, every{})
	if got := abi.Hooks(); !reflect.DeepEqual(got, []string{"driver-name", "endpoint", "failure", "versions"}) {
		t.Fatalf("hooks of a plugin with all four: %v", got)
	}
	if e.Name != "every" || e.Version != "1.2.3" {
		t.Fatalf("info: %q %q", e.Name, e.Version)
	}
	exported(t, nameOnly{})
	if got := abi.Hooks(); !reflect.DeepEqual(got, []string{"driver-name"}) {
		t.Fatalf("hooks of a driver-name plugin: %v", got)
	}
}

func TestSettingsAreDecodedStrictlyAndValidated(t *testing.T) {
	e := exported(t, every{})
	if err := e.Validate(`{"suffix": "-a"}`); err != nil {
		t.Fatalf("good settings refused: %v", err)
	}
	for settingsJSON, want := range map[string]string{
		`{"suffix": "bad"}`: "suffix must not be bad",
		`{"sufix": "-a"}`:   `invalid settings for every: json: unknown field "sufix"`,
		`{"suffix": 3}`:     "invalid settings for every: json: cannot unmarshal number into Go struct field settings.suffix of type string",
		`not json`:          "invalid settings for every: invalid character 'o' in literal null (expecting 'u')",
	} {
		err := e.Validate(settingsJSON)
		if err == nil || err.Error() != want {
			t.Errorf("settings %s: got %v, want %q", settingsJSON, err, want)
		}
	}
	// A hook decodes them too: bad settings there are the hook's error.
	if _, _, err := e.DriverName(ctx(`{"x": 1}`), "d"); err == nil || !strings.Contains(err.Error(), `unknown field "x"`) {
		t.Fatalf("driver-name with bad settings: %v", err)
	}
}

func TestDecisionsReachTheGlueAsTheWITHasThem(t *testing.T) {
	e := exported(t, every{})
	name, rename, err := e.DriverName(ctx(`{"suffix": "-b"}`), "nfs")
	if name != "nfs-b.node-a1" || !rename || err != nil {
		t.Fatalf("rename: %q %v %v", name, rename, err)
	}
	if _, rename, _ := e.DriverName(ctx(`{}`), "nfs"); rename {
		t.Fatal("keep came out as a rename")
	}
	versions, err := e.Versions(ctx(`{}`), []string{"1.0.0"})
	if !reflect.DeepEqual(versions, []string{"1.0.0", "1.9.0"}) || err != nil {
		t.Fatalf("versions: %v %v", versions, err)
	}
	path, replace, _ := e.Endpoint(ctx(`{}`), "/old")
	if path != "/plugins/hostpath.csi.k8s.io/csi.sock" || !replace {
		t.Fatalf("endpoint: %q %v", path, replace)
	}
	for _, c := range []struct {
		f    abi.Failure
		want abi.Action
	}{
		{abi.Failure{Attempt: 4}, abi.Action{Kind: abi.Exit, ExitCode: 7}},
		{abi.Failure{Attempt: 1, Error: "please ignore"}, abi.Action{Kind: abi.Ignore}},
		{abi.Failure{Attempt: 1, Elapsed: time.Hour}, abi.Action{Kind: abi.Defer}},
		{abi.Failure{Attempt: 2, Elapsed: 1500 * time.Millisecond}, abi.Action{Kind: abi.Retry, Delay: 3 * time.Second}},
	} {
		got, err := e.Failure(ctx(`{}`), c.f)
		if got != c.want || err != nil {
			t.Errorf("failure %+v: got %+v %v, want %+v", c.f, got, err, c.want)
		}
	}
}

func TestAHooksErrorIsPassedOn(t *testing.T) {
	e := exported(t, every{failing: true})
	if _, _, err := e.DriverName(ctx(`{}`), "d"); err == nil || err.Error() != "cannot decide" {
		t.Fatalf("driver-name: %v", err)
	}
	if _, err := e.Failure(ctx(`{}`), abi.Failure{Attempt: 1}); err == nil || err.Error() != "cannot decide" {
		t.Fatalf("failure: %v", err)
	}
}

func TestASecondExportPanicsNamingBoth(t *testing.T) {
	exported(t, every{})
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `policy.Export called twice ("every", then "name-only")`) {
			t.Fatalf("recovered %v", r)
		}
	}()
	Export[struct{}](nameOnly{})
}

func TestWithoutExportTheGlueSaysWhatToDo(t *testing.T) {
	abi.Reset()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "call policy.Export(yourPlugin) in an init function") {
			t.Fatalf("recovered %v", r)
		}
	}()
	abi.Plugin()
}

func TestRetryDelaysAreWholeMillisecondsWithinU32(t *testing.T) {
	for d, want := range map[time.Duration]uint32{
		-time.Second:            0,
		1500 * time.Microsecond: 1,
		2 * time.Second:         2000,
		2000 * time.Hour:        4294967295,
	} {
		if got := abi.Millis(d); got != want {
			t.Errorf("Millis(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestLogGoesWhereTheGluePointsIt(t *testing.T) {
	var lines []string
	abi.SetLogger(func(level uint8, message string) {
		lines = append(lines, string(rune('0'+level))+" "+message)
	})
	Logf(Warn, "attempt %d", 3)
	Log(Trace, "x")
	if !reflect.DeepEqual(lines, []string{"3 attempt 3", "0 x"}) {
		t.Fatalf("lines: %q", lines)
	}
}

type defaulted struct{ nameOnly }

type withDefaults struct {
	A int    `json:"a"`
	B string `json:"b"`
}

func (defaulted) Validate(withDefaults) error { return nil }
func (defaulted) DefaultSettings() withDefaults {
	return withDefaults{A: 7, B: "seven"}
}

func TestKeysLeftOutKeepTheDefaults(t *testing.T) {
	got, err := Settings[withDefaults](defaulted{}, `{"b": "eight"}`)
	if err != nil || got != (withDefaults{A: 7, B: "eight"}) {
		t.Fatalf("got %+v %v", got, err)
	}
	got, _ = Settings[withDefaults](defaulted{}, `{}`)
	if got != (withDefaults{A: 7, B: "seven"}) {
		t.Fatalf("got %+v", got)
	}
}
