// Package ignorerefusals keeps serving after a refusal the kubelet retries by
// itself (kubelet 1.36 and later), and defers every other refusal. The Go port
// of plugins/examples/ignore-refusals; the same cases.toml checks both.
package ignorerefusals

import (
	"errors"
	"slices"
	"strings"

	policy "github.com/csi-registrar/policy-go"
)

// Settings is the plugin's TOML settings table; every key has a default.
type Settings struct {
	// Substrings of the kubelet's error; empty: every refusal.
	Matching []string `json:"matching"`
	// Defer from this refusal in a row on; 0: never.
	MaxAttempts uint32 `json:"max_attempts"`
}

// IgnoreRefusals is the plugin.
type IgnoreRefusals struct{}

// Name is the plugin's name in the registrar's logs.
func (IgnoreRefusals) Name() string { return "ignore-refusals" }

// Version is the plugin's version.
func (IgnoreRefusals) Version() string { return "0.1.0" }

// DefaultSettings are the values of the keys the table leaves out.
func (IgnoreRefusals) DefaultSettings() Settings { return Settings{} }

// Validate refuses an empty pattern, which would match every error.
func (IgnoreRefusals) Validate(s Settings) error {
	if slices.Contains(s.Matching, "") {
		return errors.New("matching holds an empty string, which would match every error: leave matching empty for that")
	}
	return nil
}

// OnRegistrationFailure ignores the refusals that match, until max_attempts.
func (IgnoreRefusals) OnRegistrationFailure(ctx *policy.Context[Settings], f policy.RegistrationFailure) (policy.FailureAction, error) {
	s := ctx.Settings
	if s.MaxAttempts > 0 && f.Attempt >= s.MaxAttempts {
		policy.Logf(policy.Warn, "refusal %d in a row: no longer ignored", f.Attempt)
		return policy.Defer(), nil
	}
	matches := len(s.Matching) == 0 || slices.ContainsFunc(s.Matching, func(m string) bool {
		return strings.Contains(f.Error, m)
	})
	if !matches {
		return policy.Defer(), nil
	}
	policy.Logf(policy.Info, "refusal %d ignored; the kubelet retries it: %s", f.Attempt, f.Error)
	return policy.Ignore(), nil
}

func init() { policy.Export[Settings](IgnoreRefusals{}) }
