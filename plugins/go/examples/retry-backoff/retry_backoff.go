// Package retrybackoff answers refusals with retries at exponentially growing
// delays, and exits after max_attempts refusals in a row. The Go port of
// plugins/examples/retry-backoff; the same cases.toml checks both.
package retrybackoff

import (
	"errors"
	"time"

	policy "github.com/csi-registrar/policy-go"
)

// Settings is the plugin's TOML settings table; every key has a default.
type Settings struct {
	InitialDelayMs uint32 `json:"initial_delay_ms"`
	Factor         uint32 `json:"factor"`
	MaxDelayMs     uint32 `json:"max_delay_ms"`
	// 0: never give up.
	MaxAttempts uint32 `json:"max_attempts"`
	ExitCode    uint8  `json:"exit_code"`
}

// RetryBackoff is the plugin.
type RetryBackoff struct{}

// Name is the plugin's name in the registrar's logs.
func (RetryBackoff) Name() string { return "retry-backoff" }

// Version is the plugin's version.
func (RetryBackoff) Version() string { return "0.1.0" }

// DefaultSettings are the values of the keys the table leaves out.
func (RetryBackoff) DefaultSettings() Settings {
	return Settings{InitialDelayMs: 500, Factor: 2, MaxDelayMs: 60_000, MaxAttempts: 5, ExitCode: 1}
}

// Validate refuses settings that would never back off or would exit 0.
func (RetryBackoff) Validate(s Settings) error {
	if s.Factor == 0 || s.InitialDelayMs == 0 {
		return errors.New("factor and initial_delay_ms must be at least 1")
	}
	if s.ExitCode == 0 {
		return errors.New("exit_code must be 1-255: giving up is a failure")
	}
	return nil
}

// OnRegistrationFailure retries after initial_delay_ms × factor^(attempt-1),
// at most max_delay_ms, until max_attempts.
func (RetryBackoff) OnRegistrationFailure(ctx *policy.Context[Settings], f policy.RegistrationFailure) (policy.FailureAction, error) {
	s := ctx.Settings
	if s.MaxAttempts > 0 && f.Attempt >= s.MaxAttempts {
		policy.Logf(policy.Warn, "giving up after %d refusals: %s", f.Attempt, f.Error)
		return policy.Exit(s.ExitCode), nil
	}
	delay := uint64(s.InitialDelayMs)
	for i := uint32(1); i < f.Attempt && delay < uint64(s.MaxDelayMs); i++ {
		delay *= uint64(s.Factor)
	}
	delay = min(delay, uint64(s.MaxDelayMs))
	policy.Logf(policy.Info, "refusal %d: retrying in %d ms", f.Attempt, delay)
	return policy.Retry(time.Duration(delay) * time.Millisecond), nil
}

func init() { policy.Export[Settings](RetryBackoff{}) }
