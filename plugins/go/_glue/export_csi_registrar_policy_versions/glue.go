// Package export_csi_registrar_policy_versions implements the versions hook.
package export_csi_registrar_policy_versions

import (
	"github.com/csi-registrar/policy-go/abi"
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/csi_registrar_policy_types"
)

// SupportedVersions calls the plugin's VersionChooser.
func SupportedVersions(ctx csi_registrar_policy_types.RegistrationContext, current []string) witTypes.Result[[]string, csi_registrar_policy_types.PolicyError] {
	versions, err := abi.Plugin().Versions(abi.Context(ctx), current)
	if err != nil {
		return witTypes.Err[[]string](csi_registrar_policy_types.PolicyError{Message: err.Error()})
	}
	return witTypes.Ok[[]string, csi_registrar_policy_types.PolicyError](versions)
}
