// Package export_csi_registrar_policy_driver_name implements the driver-name hook.
package export_csi_registrar_policy_driver_name

import (
	"github.com/csi-registrar/policy-go/abi"
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/csi_registrar_policy_driver_name"
	"wit_component/csi_registrar_policy_types"
)

type result = witTypes.Result[csi_registrar_policy_driver_name.NameDecision, csi_registrar_policy_types.PolicyError]

// RewriteDriverName calls the plugin's DriverNamer.
func RewriteDriverName(ctx csi_registrar_policy_types.RegistrationContext, current string) result {
	name, rename, err := abi.Plugin().DriverName(abi.Context(ctx), current)
	switch {
	case err != nil:
		return witTypes.Err[csi_registrar_policy_driver_name.NameDecision](csi_registrar_policy_types.PolicyError{Message: err.Error()})
	case rename:
		return witTypes.Ok[csi_registrar_policy_driver_name.NameDecision, csi_registrar_policy_types.PolicyError](csi_registrar_policy_driver_name.MakeNameDecisionRename(name))
	}
	return witTypes.Ok[csi_registrar_policy_driver_name.NameDecision, csi_registrar_policy_types.PolicyError](csi_registrar_policy_driver_name.MakeNameDecisionKeep())
}
