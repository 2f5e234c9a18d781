//go:build k8s134

package peers

import (
	"time"

	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// runPluginManager starts the manager as kubelet.go does (Kubernetes 1.34: no context).
func runPluginManager(pm pluginmanager.PluginManager, stop chan struct{}) {
	go pm.Run(config.NewSourcesReady(nil), stop)
}

// kubeletRetriesFailedRegistrations: before kubernetes#133335, a
// RegisterPlugin or a NotifyRegistrationStatus that fails leaves the plugin in
// the kubelet's actual state, and nothing is retried until its socket changes.
const kubeletRetriesFailedRegistrations = false

// ValidatePlugin runs the kubelet's handler.
func (h hookedHandler) ValidatePlugin(name, endpoint string, versions []string) error {
	err := h.PluginHandler.ValidatePlugin(name, endpoint, versions)
	h.recordCall("ValidatePlugin(%s, %s, %v) = %v", name, endpoint, versions, err)
	return err
}

// RegisterPlugin runs the kubelet's handler, then afterRegister if it succeeded.
func (h hookedHandler) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.PluginHandler.RegisterPlugin(name, endpoint, versions, timeout)
	h.recordCall("RegisterPlugin(%s, %s, %v) = %v", name, endpoint, versions, err)
	if err == nil && h.afterRegister != nil {
		h.afterRegister()
	}
	return err
}

// DeRegisterPlugin runs the kubelet's handler, then onDeregister.
func (h hookedHandler) DeRegisterPlugin(name, endpoint string) {
	h.PluginHandler.DeRegisterPlugin(name, endpoint)
	h.recordCall("DeRegisterPlugin(%s, %s)", name, endpoint)
	if h.onDeregister != nil {
		h.onDeregister()
	}
}

var _ cache.PluginHandler = hookedHandler{}
