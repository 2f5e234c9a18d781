//go:build k8s134

package peers

import (
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

// runPluginManager starts the manager as kubelet.go does (Kubernetes 1.34: no context).
func runPluginManager(pm pluginmanager.PluginManager, stop chan struct{}) {
	go pm.Run(config.NewSourcesReady(nil), stop)
}
