//go:build !k8s134

package peers

import (
	"context"
	"time"

	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// runPluginManager starts the manager as kubelet.go does (Kubernetes 1.35 and later: with a context).
func runPluginManager(pm pluginmanager.PluginManager, stop chan struct{}) {
	go pm.Run(context.Background(), config.NewSourcesReady(nil), stop)
}

// kubeletRetriesFailedRegistrations: since kubernetes#133335 (1.36), a
// RegisterPlugin or a NotifyRegistrationStatus that fails makes the kubelet
// deregister the plugin and register it again, with back-off.
const kubeletRetriesFailedRegistrations = true

// RegisterPlugin runs the kubelet's handler, then afterRegister if it succeeded.
func (h hookedHandler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.PluginHandler.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	if err == nil {
		h.afterRegister()
	}
	return err
}

// DeRegisterPlugin runs the kubelet's handler, then onDeregister.
func (h hookedHandler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	h.PluginHandler.DeRegisterPlugin(ctx, name, endpoint)
	h.onDeregister()
}

var _ cache.PluginHandler = hookedHandler{}
