//go:build !k8s134

package peers

import (
	"context"

	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

// runPluginManager starts the manager as kubelet.go does (Kubernetes 1.35 and later: with a context).
func runPluginManager(pm pluginmanager.PluginManager, stop chan struct{}) {
	go pm.Run(context.Background(), config.NewSourcesReady(nil), stop)
}
