// Package export_csi_registrar_policy_endpoint implements the endpoint hook.
package export_csi_registrar_policy_endpoint

import (
	"github.com/csi-registrar/policy-go/abi"
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/csi_registrar_policy_endpoint"
	"wit_component/csi_registrar_policy_types"
)

type decision = csi_registrar_policy_endpoint.EndpointDecision

// MapEndpoint calls the plugin's EndpointMapper.
func MapEndpoint(ctx csi_registrar_policy_types.RegistrationContext, current string) witTypes.Result[decision, csi_registrar_policy_types.PolicyError] {
	path, replace, err := abi.Plugin().Endpoint(abi.Context(ctx), current)
	switch {
	case err != nil:
		return witTypes.Err[decision](csi_registrar_policy_types.PolicyError{Message: err.Error()})
	case replace:
		return witTypes.Ok[decision, csi_registrar_policy_types.PolicyError](csi_registrar_policy_endpoint.MakeEndpointDecisionReplace(path))
	}
	return witTypes.Ok[decision, csi_registrar_policy_types.PolicyError](csi_registrar_policy_endpoint.MakeEndpointDecisionKeep())
}
