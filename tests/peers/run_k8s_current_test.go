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

// ValidatePlugin runs the kubelet's handler.
func (h hookedHandler) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	err := h.PluginHandler.ValidatePlugin(ctx, name, endpoint, versions)
	h.recordCall("ValidatePlugin(%s, %s, %v) = %v", name, endpoint, versions, err)
	return err
}

// RegisterPlugin runs the kubelet's handler, then afterRegister if it succeeded.
func (h hookedHandler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.PluginHandler.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	h.recordCall("RegisterPlugin(%s, %s, %v) = %v", name, endpoint, versions, err)
	if err == nil && h.afterRegister != nil {
		h.afterRegister()
	}
	return err
}

// DeRegisterPlugin runs the kubelet's handler, then onDeregister.
func (h hookedHandler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	h.PluginHandler.DeRegisterPlugin(ctx, name, endpoint)
	h.recordCall("DeRegisterPlugin(%s, %s)", name, endpoint)
	if h.onDeregister != nil {
		h.onDeregister()
	}
}

var _ cache.PluginHandler = hookedHandler{}
