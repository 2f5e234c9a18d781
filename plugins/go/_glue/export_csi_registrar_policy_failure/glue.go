// Package export_csi_registrar_policy_failure implements the failure hook.
package export_csi_registrar_policy_failure

import (
	"time"

	"github.com/csi-registrar/policy-go/abi"
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/csi_registrar_policy_failure"
	"wit_component/csi_registrar_policy_types"
)

type action = csi_registrar_policy_failure.FailureAction

// OnRegistrationFailure calls the plugin's FailureHandler.
func OnRegistrationFailure(ctx csi_registrar_policy_types.RegistrationContext, f csi_registrar_policy_failure.RegistrationFailure) witTypes.Result[action, csi_registrar_policy_types.PolicyError] {
	a, err := abi.Plugin().Failure(abi.Context(ctx), abi.Failure{
		Error:   f.Error,
		Attempt: f.Attempt,
		Elapsed: time.Duration(f.ElapsedMs) * time.Millisecond,
	})
	if err != nil {
		return witTypes.Err[action](csi_registrar_policy_types.PolicyError{Message: err.Error()})
	}
	var out action
	switch a.Kind {
	case abi.Exit:
		out = csi_registrar_policy_failure.MakeFailureActionExit(a.ExitCode)
	case abi.Retry:
		out = csi_registrar_policy_failure.MakeFailureActionRetry(csi_registrar_policy_failure.Backoff{DelayMs: abi.Millis(a.Delay)})
	case abi.Ignore:
		out = csi_registrar_policy_failure.MakeFailureActionIgnore()
	default:
		out = csi_registrar_policy_failure.MakeFailureActionDefer()
	}
	return witTypes.Ok[action, csi_registrar_policy_types.PolicyError](out)
}
