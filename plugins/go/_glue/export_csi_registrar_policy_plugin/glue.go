// Package export_csi_registrar_policy_plugin implements the `plugin`
// interface every component exports, and points the SDK's log and plugin
// type at the host.
package export_csi_registrar_policy_plugin

import (
	"github.com/csi-registrar/policy-go/abi"
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/csi_registrar_policy_host_log"
	"wit_component/csi_registrar_policy_plugin"
	"wit_component/csi_registrar_policy_registrar_info"
)

func init() {
	abi.SetLogger(csi_registrar_policy_host_log.Log)
	abi.SetPluginType(csi_registrar_policy_registrar_info.PluginType)
}

// Info is the plugin's name and version.
func Info() csi_registrar_policy_plugin.PluginInfo {
	p := abi.Plugin()
	return csi_registrar_policy_plugin.PluginInfo{Name: p.Name, Version: p.Version}
}

// ValidateSettings decodes and checks the plugin's settings.
func ValidateSettings(settingsJSON string) witTypes.Result[witTypes.Unit, string] {
	if err := abi.Plugin().Validate(settingsJSON); err != nil {
		return witTypes.Err[witTypes.Unit](err.Error())
	}
	return witTypes.Ok[witTypes.Unit, string](witTypes.Unit{})
}
