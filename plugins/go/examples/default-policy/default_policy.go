// Package defaultpolicy makes upstream's four decisions explicitly: the
// driver's own name, ["1.0.0"] (a DRA driver's services when the registrar
// registers one), exit 1 on a refusal, and
// --kubelet-registration-path as the endpoint. A template for full policies,
// and the one Go example that exports every hook. The Go port of
// plugins/examples/default-policy; the same cases.toml checks both.
package defaultpolicy

import policy "github.com/csi-registrar/policy-go"

// NoSettings refuses any key.
type NoSettings struct{}

// Upstream is the plugin.
type Upstream struct{}

// Name is the plugin's name in the registrar's logs.
func (Upstream) Name() string { return "default-policy" }

// Version is the plugin's version.
func (Upstream) Version() string { return "0.1.0" }

// Validate accepts the empty table.
func (Upstream) Validate(NoSettings) error { return nil }

// RewriteDriverName advertises the driver's own name, whatever came before.
func (Upstream) RewriteDriverName(ctx *policy.Context[NoSettings], _ string) (policy.NameDecision, error) {
	return policy.Rename(ctx.DriverName), nil
}

// SupportedVersions advertises 1.0.0 for a CSI driver; for a DRA driver, the
// services the kubelet can use, as the built-in policy does.
func (Upstream) SupportedVersions(*policy.Context[NoSettings], []string) ([]string, error) {
	if policy.RegistrarPluginType() == policy.DRAPlugin {
		return []string{"v1.DRAPlugin", "v1beta1.DRAPlugin"}, nil
	}
	return []string{"1.0.0"}, nil
}

// OnRegistrationFailure exits 1.
func (Upstream) OnRegistrationFailure(*policy.Context[NoSettings], policy.RegistrationFailure) (policy.FailureAction, error) {
	return policy.Exit(1), nil
}

// MapEndpoint advertises --kubelet-registration-path.
func (Upstream) MapEndpoint(ctx *policy.Context[NoSettings], _ string) (policy.EndpointDecision, error) {
	return policy.ReplaceEndpoint(ctx.KubeletRegistrationPath), nil
}

func init() { policy.Export[NoSettings](Upstream{}) }
