package peers

// The kubelet's own plugin registration code against our binary: the plugin
// manager (pkg/kubelet/pluginmanager: the fsnotify watcher, the reconciler and
// the operation executor that dials the registration socket with grpc-go) with
// the real CSI handler (pkg/volume/csi.PluginHandler: version validation,
// NodeGetInfo through the kubelet's CSI client, and the CSINode and Node
// updates, here on a fake API server from client-go). Only the kubelet's
// wiring is ours: kubelet.go hands the manager <root-dir>/plugins_registry and
// adds the CSI handler for type CSIPlugin, as startKubelet does.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/csi"
)

const nodeName = "node-1"

// volumeHost is what the CSI plugin's Init and its node-info manager use of
// the kubelet: the API client and the node name. It is deliberately not a
// KubeletVolumeHost, so Init skips the CSINode start-up sync (which waits for
// a real API server); any other method would panic, and none is called.
type volumeHost struct {
	volume.VolumeHost
	client kubernetes.Interface
}

func (h volumeHost) GetKubeClient() kubernetes.Interface { return h.client }
func (h volumeHost) GetNodeName() types.NodeName         { return nodeName }

var (
	csiOnce   sync.Once
	apiServer *fake.Clientset
)

// The CSI plugin keeps its registered drivers in package state, as in the
// kubelet: one per process. Tests use distinct driver names.
func csiPlugin(t *testing.T) *fake.Clientset {
	csiOnce.Do(func() {
		apiServer = fake.NewSimpleClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}})
		if err := csi.ProbeVolumePlugins()[0].Init(volumeHost{client: apiServer}); err != nil {
			t.Fatalf("initialising the kubelet's CSI plugin: %v", err)
		}
	})
	return apiServer
}

type world struct {
	t        *testing.T
	dir      string
	registry string
	csiSock  string
	api      *fake.Clientset
}

// startKubelet runs the plugin manager on a fresh registry directory with the CSI handler.
func startKubelet(t *testing.T) *world {
	t.Helper()
	return startKubeletWith(t, func(h cache.PluginHandler) cache.PluginHandler { return h })
}

// startKubeletWith is startKubelet with the CSI handler wrapped by wrap.
func startKubeletWith(t *testing.T, wrap func(cache.PluginHandler) cache.PluginHandler) *world {
	t.Helper()
	api := csiPlugin(t)
	dir := shortTempDir(t)
	w := &world{t: t, dir: dir, registry: filepath.Join(dir, "plugins_registry"), csiSock: filepath.Join(dir, "csi.sock"), api: api}
	if err := os.Mkdir(w.registry, 0o750); err != nil {
		t.Fatal(err)
	}
	pm := pluginmanager.NewPluginManager(w.registry, record.NewFakeRecorder(100))
	pm.AddHandler(registerapi.CSIPlugin, wrap(csi.PluginHandler))
	stop := make(chan struct{})
	runPluginManager(pm, stop)
	t.Cleanup(func() { close(stop) })
	return w
}

func (w *world) args(extra ...string) []string {
	return append([]string{
		"--csi-address=" + w.csiSock,
		"--kubelet-registration-path=" + w.csiSock,
		"--plugin-registration-path=" + w.registry,
		"--v=5",
	}, extra...)
}

// csiNodeDriver returns the CSINode entry the kubelet wrote for driver, if any.
func (w *world) csiNodeDriver(driver string) *storagev1.CSINodeDriver {
	n, err := w.api.StorageV1().CSINodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	for i := range n.Spec.Drivers {
		if n.Spec.Drivers[i].Name == driver {
			return &n.Spec.Drivers[i]
		}
	}
	return nil
}

// waitFor polls the fake API server (it has no push to wait on) until cond holds.
func (w *world) waitFor(what string, cond func() bool) {
	w.t.Helper()
	w.waitForWithin(what, patience, cond)
}

func (w *world) waitForWithin(what string, within time.Duration, cond func() bool) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, within, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		w.t.Fatalf("the kubelet did not reach %q within %v", what, within)
	}
}

func (w *world) waitRegistered(driver string) {
	w.t.Helper()
	w.waitFor(driver+" in CSINode", func() bool {
		d := w.csiNodeDriver(driver)
		return d != nil && d.NodeID == nodeName
	})
}

func (w *world) waitDeregistered(driver string) {
	w.t.Helper()
	w.waitFor(driver+" gone from CSINode", func() bool { return w.csiNodeDriver(driver) == nil })
}

// stopRegistered sends r SIGTERM, expects exit code 0, and waits for the
// kubelet to deregister driver.
func (w *world) stopRegistered(r *registrar, driver string) {
	w.t.Helper()
	if code := r.stop(syscall.SIGTERM); code != 0 {
		w.t.Fatalf("exit code on SIGTERM = %d, want 0", code)
	}
	w.waitDeregistered(driver)
}

func TestKubeletRegistersOurDriverAndDeregistersItOnSIGTERM(t *testing.T) {
	w := startKubelet(t)
	const driver = "hostpath.csi.k8s.io"
	startCSIDriver(t, w.csiSock, driver, "v1.17.0", nodeName)

	r := startRegistrar(t, w.args()...)
	w.waitRegistered(driver)
	r.waitLog(0, "PluginRegistered:true")
	// The topology segment reached the CSINode as the kubelet reads it.
	if keys := w.csiNodeDriver(driver).TopologyKeys; len(keys) != 1 || keys[0] != topologyKeyNode {
		t.Fatalf("topology keys = %v, want [%s]", keys, topologyKeyNode)
	}

	if code := r.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code on SIGTERM = %d, want 0", code)
	}
	w.waitDeregistered(driver)
	if _, err := os.Lstat(filepath.Join(w.registry, driver+"-reg.sock")); !os.IsNotExist(err) {
		t.Fatalf("registration socket still there after SIGTERM: %v", err)
	}

	// Restarted, it registers again.
	r2 := startRegistrar(t, w.args()...)
	w.waitRegistered(driver)
	r2.waitLog(0, "PluginRegistered:true")
	if code := r2.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code on SIGTERM = %d, want 0", code)
	}
	w.waitDeregistered(driver)
}

func TestKubeletRegistersAgainAfterACrashLeftAStaleSocket(t *testing.T) {
	w := startKubelet(t)
	const driver = "crash.csi.example.com"
	startCSIDriver(t, w.csiSock, driver, "v1.0.0", nodeName)

	r := startRegistrar(t, w.args()...)
	w.waitRegistered(driver)
	r.waitLog(0, "PluginRegistered:true")
	r.stop(syscall.SIGKILL) // the socket stays behind, as after a node crash

	r2 := startRegistrar(t, w.args()...)
	// The new instance took the path over and the kubelet registered it anew:
	// GetInfo and NotifyRegistrationStatus reached the new process.
	r2.waitLog(0, "PluginRegistered:true")
	w.waitRegistered(driver)
	if code := r2.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code on SIGTERM = %d, want 0", code)
	}
	w.waitDeregistered(driver)
}

func TestKubeletRefusalReachesUsAsNotifyRegistrationStatusFalse(t *testing.T) {
	w := startKubelet(t)
	const driver = "nonode.csi.example.com"
	// A driver with no node ID: the kubelet's CSI handler refuses it in
	// RegisterPlugin (nodeinfomanager: driverNodeID must not be empty).
	startCSIDriver(t, w.csiSock, driver, "v1.0.0", "")

	r := startRegistrar(t, w.args()...)
	r.waitLog(0, "Registration process failed with error", "driverNodeID must not be empty")
	// The built-in policy is upstream's: exit 1, and our socket goes with us.
	if code := r.wait(); code != 1 {
		t.Fatalf("exit code after the refusal = %d, want 1", code)
	}
	if _, err := os.Lstat(filepath.Join(w.registry, driver+"-reg.sock")); !os.IsNotExist(err) {
		t.Fatalf("registration socket left behind after the refusal: %v", err)
	}
	if d := w.csiNodeDriver(driver); d != nil {
		t.Fatalf("a refused driver is in CSINode: %+v", d)
	}
}

func TestKubeletRegistersTheNameARenamingPluginChose(t *testing.T) {
	wasm := os.Getenv("POOL_SUFFIX_WASM")
	if wasm == "" {
		t.Fatal("POOL_SUFFIX_WASM is not set: build plugins/examples/pool-suffix for wasm32-wasip2 and point POOL_SUFFIX_WASM at it, or run scripts/test")
	}
	bytes, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bytes)
	w := startKubelet(t)
	const driver = "rename.csi.example.com"
	startCSIDriver(t, w.csiSock, driver, "v1.0.0", nodeName)
	policy := filepath.Join(w.dir, "policy.toml")
	toml := fmt.Sprintf("[[plugin]]\nid = \"pool-suffix\"\npath = %q\nsha256 = %q\n[plugin.settings]\nsuffix = \"-pool-a\"\n",
		wasm, hex.EncodeToString(sum[:]))
	if err := os.WriteFile(policy, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}

	r := startRegistrar(t, w.args("--policy-config="+policy)...)
	w.waitRegistered(driver + "-pool-a")
	r.waitLog(0, "PluginRegistered:true")
	if d := w.csiNodeDriver(driver); d != nil {
		t.Fatalf("the driver's own name was registered too: %+v", d)
	}
	if code := r.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code on SIGTERM = %d, want 0", code)
	}
	w.waitDeregistered(driver + "-pool-a")
}

func TestKubeletFollowsADriverThatRestartsUnderAnotherName(t *testing.T) {
	w := startKubelet(t)
	d := startCSIDriver(t, w.csiSock, "before.csi.example.com", "v1.0.0", nodeName)
	// An hour between probes: the registrar notices the restart by its events
	// (the connection's end, the new socket file), not by probing.
	r := startRegistrar(t, w.args("--driver-probe-interval=1h")...)
	w.waitRegistered("before.csi.example.com")

	// The driver restarts as another driver on the same socket: the registrar
	// notices at once and registers the new name; the old socket goes, so the
	// kubelet deregisters the old name.
	d.stop()
	startCSIDriver(t, w.csiSock, "after.csi.example.com", "v2.0.0", nodeName)
	w.waitRegistered("after.csi.example.com")
	w.waitDeregistered("before.csi.example.com")
	r.waitLog(0, "CSI driver changed; registering anew")
	if code := r.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code on SIGTERM = %d, want 0", code)
	}
	w.waitDeregistered("after.csi.example.com")
}
