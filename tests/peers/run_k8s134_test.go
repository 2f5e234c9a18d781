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

// RegisterPlugin runs the kubelet's handler, then afterRegister if it succeeded.
func (h hookedHandler) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.PluginHandler.RegisterPlugin(name, endpoint, versions, timeout)
	if err == nil {
		h.afterRegister()
	}
	return err
}

// DeRegisterPlugin runs the kubelet's handler, then onDeregister.
func (h hookedHandler) DeRegisterPlugin(name, endpoint string) {
	h.PluginHandler.DeRegisterPlugin(name, endpoint)
	h.onDeregister()
}

var _ cache.PluginHandler = hookedHandler{}
