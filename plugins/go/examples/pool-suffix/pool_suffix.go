// Package poolsuffix appends a suffix to the driver name:
// hostpath.csi.k8s.io becomes hostpath.csi.k8s.io-pool-a, so a second
// instance of one driver (another node pool, another backend) registers under
// its own name. The Go port of plugins/examples/pool-suffix; the same
// cases.toml checks both.
package poolsuffix

import (
	"errors"
	"fmt"

	policy "github.com/csi-registrar/policy-go"
)

// Settings is the plugin's TOML settings table.
type Settings struct {
	// Appended to the driver's name, e.g. "-pool-a".
	Suffix string `json:"suffix"`
}

// PoolSuffix is the plugin.
type PoolSuffix struct{}

// Name is the plugin's name in the registrar's logs.
func (PoolSuffix) Name() string { return "pool-suffix" }

// Version is the plugin's version.
func (PoolSuffix) Version() string { return "0.1.0" }

// Validate refuses a suffix the CSI naming rules would refuse in a name.
func (PoolSuffix) Validate(s Settings) error {
	for _, c := range s.Suffix {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("suffix %q contains '%c'; use letters, digits, '-' and '.'", s.Suffix, c)
		}
	}
	if s.Suffix == "" {
		return errors.New("suffix must be a non-empty string")
	}
	return nil
}

// RewriteDriverName appends the suffix to the name the chain has so far.
func (PoolSuffix) RewriteDriverName(ctx *policy.Context[Settings], current string) (policy.NameDecision, error) {
	return policy.Rename(current + ctx.Settings.Suffix), nil
}

func init() { policy.Export[Settings](PoolSuffix{}) }
