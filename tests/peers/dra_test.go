//go:build !k8s134

package peers

// DRA drivers registered by our binary, with the kubelet's own code: the
// plugin manager (its watcher, reconciler and operation executor) and the DRA
// plugin manager (pkg/kubelet/cm/dra/plugin, Kubernetes 1.37.2) as the
// kubelet's container manager hands it to the plugin manager for type
// DRAPlugin. The drivers are built with k8s.io/dynamic-resource-allocation's
// kubeletplugin helper (v0.37.2) with their own registration turned off
// (RegistrationService(false)), as a driver behind a registrar sidecar runs.

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

const draDriverName = "gpu.example.com"

// draDriver is one pod of a DRA driver: the helper serving its DRA service,
// counting the NodePrepareResources calls that reach it.
type draDriver struct {
	uid      string
	socket   string
	prepared atomic.Int64
	stopOnce sync.Once
	helper   *kubeletplugin.Helper
}

func (d *draDriver) PrepareResourceClaims(context.Context, []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.prepared.Add(1)
	return map[types.UID]kubeletplugin.PrepareResult{}, nil
}

func (d *draDriver) UnprepareResourceClaims(context.Context, []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	return map[types.UID]error{}, nil
}

func (d *draDriver) HandleError(context.Context, error, string) {}

func (d *draDriver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func (d *draDriver) stop() { d.stopOnce.Do(d.helper.Stop) }

// registrations records what the plugin manager registered with the DRA
// handler: the kubelet's view, endpoint by endpoint.
type registrations struct {
	cache.PluginHandler
	mu        sync.Mutex
	endpoints []string
}

func (r *registrations) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := r.PluginHandler.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	if err == nil {
		r.mu.Lock()
		r.endpoints = append(r.endpoints, endpoint)
		r.mu.Unlock()
	}
	return err
}

func (r *registrations) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	r.PluginHandler.DeRegisterPlugin(ctx, name, endpoint)
	r.mu.Lock()
	r.endpoints = slices.DeleteFunc(r.endpoints, func(e string) bool { return e == endpoint })
	r.mu.Unlock()
}

func (r *registrations) are(endpoints ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Equal(slices.Sorted(slices.Values(r.endpoints)), slices.Sorted(slices.Values(endpoints)))
}

type draWorld struct {
	*world
	api     *fake.Clientset
	dataDir string
	manager *draplugin.DRAPluginManager
	seen    *registrations
}

// startDRAKubelet runs the plugin manager with the DRA handler on a fresh registry.
func startDRAKubelet(t *testing.T) *draWorld {
	t.Helper()
	dir := shortTempDir(t)
	w := &draWorld{
		world:   &world{t: t, dir: dir, registry: filepath.Join(dir, "plugins_registry")},
		api:     fake.NewSimpleClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}),
		dataDir: filepath.Join(dir, "plugins", draDriverName),
	}
	mkdir(t, w.registry)
	mkdir(t, w.dataDir)
	ctx, cancel := context.WithCancel(context.Background())
	getNode := func(ctx context.Context) (*v1.Node, error) {
		return w.api.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	}
	w.manager = draplugin.NewDRAPluginManager(ctx, w.api, getNode, nil, time.Minute)
	w.seen = &registrations{PluginHandler: w.manager}
	pm := pluginmanager.NewPluginManager(w.registry, record.NewFakeRecorder(100))
	pm.AddHandler(registerapi.DRAPlugin, w.seen)
	stop := make(chan struct{})
	runPluginManager(pm, stop)
	t.Cleanup(func() {
		close(stop)
		w.manager.Stop()
		cancel()
	})
	return w
}

// startDRADriver starts one pod of the driver, with rolling updates on, as its
// DaemonSet would with the pod's UID from the downward API.
func (w *draWorld) startDRADriver(uid string) *draDriver {
	w.t.Helper()
	d := &draDriver{uid: uid, socket: filepath.Join(w.dataDir, "dra-"+uid+".sock")}
	helper, err := kubeletplugin.Start(context.Background(), d,
		kubeletplugin.DriverName(draDriverName),
		kubeletplugin.KubeClient(w.api),
		kubeletplugin.NodeName(nodeName),
		kubeletplugin.PluginDataDirectoryPath(w.dataDir),
		kubeletplugin.RegistrarDirectoryPath(w.registry),
		kubeletplugin.RollingUpdate(types.UID(uid)),
		kubeletplugin.RegistrationService(false),
	)
	if err != nil {
		w.t.Fatalf("starting the DRA driver: %v", err)
	}
	d.helper = helper
	w.t.Cleanup(d.stop)
	return d
}

// startDRARegistrar starts our binary next to the driver pod d.
func (w *draWorld) startDRARegistrar(d *draDriver, extra ...string) *registrar {
	w.t.Helper()
	return startRegistrar(w.t, append([]string{
		"--plugin-type=DRAPlugin",
		"--driver-name=" + draDriverName,
		"--kubelet-registration-path=" + d.socket,
		"--plugin-registration-path=" + w.registry,
		"--pod-uid=" + d.uid,
		"--v=5",
	}, extra...)...)
}

// prepare is the kubelet preparing a pod's claims: it picks a plugin of the
// driver (the newest connected one) and calls NodePrepareResources on it.
func (w *draWorld) prepare() error {
	p, err := w.manager.GetPlugin(draDriverName)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	_, err = p.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{})
	return err
}

const podA = "0b6f8c5e-3c1d-4d5e-9f7a-1a2b3c4d5e6f"

func TestKubeletRegistersADRADriverThroughUsAndReachesItsService(t *testing.T) {
	w := startDRAKubelet(t)
	d := w.startDRADriver(podA)
	r := w.startDRARegistrar(d)
	r.waitLog(0, "PluginRegistered:true")
	w.waitFor("the driver's endpoint registered", func() bool { return w.seen.are(d.socket) })

	// The socket is named as the Go helper names it for this pod.
	want := filepath.Join(w.registry, kubeletplugin.RollingUpdateRegistrarSocketFile(w.registry, draDriverName, types.UID(podA)))
	r.waitLog(0, "Registration Server started", want)

	// The kubelet reaches the driver at the endpoint we advertised.
	if err := w.prepare(); err != nil {
		t.Fatalf("NodePrepareResources through the kubelet: %v", err)
	}
	if n := d.prepared.Load(); n != 1 {
		t.Fatalf("the driver saw %d NodePrepareResources calls, want 1", n)
	}

	if code := r.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code on SIGTERM = %d, want 0", code)
	}
	w.waitFor("the driver deregistered", func() bool { return w.seen.are() })
	if _, err := w.manager.GetPlugin(draDriverName); err == nil || !strings.Contains(err.Error(), "is not registered") {
		t.Fatalf("GetPlugin after SIGTERM: %v, want \"not registered\"", err)
	}
}

// podUID is the n-th pod's UID.
func podUID(n int) string { return fmt.Sprintf("%08x-3c1d-4d5e-9f7a-1a2b3c4d5e6f", n) }

// rollingUpdates: the DaemonSet is updated this many times in a row, each a
// surge: the new pod registers beside the old one, then the old one stops.
const rollingUpdates = 5

func TestRollingUpdatesOfDRAPodsKeepTheDriverAvailable(t *testing.T) {
	w := startDRAKubelet(t)
	old := w.startDRADriver(podUID(0))
	oldReg := w.startDRARegistrar(old)
	w.waitFor("the first pod registered", func() bool { return w.seen.are(old.socket) })

	// Pods are being prepared all along: every call must succeed.
	var calls, failures atomic.Int64
	var firstFailure atomic.Value
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := w.prepare(); err != nil {
				failures.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
			}
			calls.Add(1)
		}
	}()
	var closeOnce sync.Once
	stop := func() {
		closeOnce.Do(func() { close(done) })
		<-stopped
	}
	t.Cleanup(stop)
	atLeast := func(what string, n int64, count *atomic.Int64) {
		t.Helper()
		target := count.Load() + n
		w.waitFor(what, func() bool { return count.Load() >= target })
	}
	atLeast("calls to the first pod", 20, &old.prepared)

	for i := 1; i <= rollingUpdates; i++ {
		// The new pod comes up beside the old one: both registered, and the
		// kubelet moves to the newer.
		fresh := w.startDRADriver(podUID(i))
		freshReg := w.startDRARegistrar(fresh)
		w.waitFor(fmt.Sprintf("update %d: both pods registered", i), func() bool { return w.seen.are(old.socket, fresh.socket) })
		atLeast(fmt.Sprintf("update %d: calls to the new pod", i), 20, &fresh.prepared)

		// The old pod goes: SIGTERM removes only its own socket.
		if code := oldReg.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("update %d: the old registrar's exit code on SIGTERM = %d, want 0", i, code)
		}
		w.waitFor(fmt.Sprintf("update %d: only the new pod registered", i), func() bool { return w.seen.are(fresh.socket) })
		old.stop()
		atLeast(fmt.Sprintf("update %d: calls after the old pod left", i), 20, &calls)
		old, oldReg = fresh, freshReg
	}

	stop()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d NodePrepareResources calls failed during %d rolling updates; the first: %v", n, calls.Load(), rollingUpdates, firstFailure.Load())
	}
	t.Logf("%d NodePrepareResources calls through %d rolling updates, none failed", calls.Load(), rollingUpdates)
	if code := oldReg.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("the last registrar's exit code on SIGTERM = %d, want 0", code)
	}
	w.waitFor("nothing registered", func() bool { return w.seen.are() })
	if _, err := w.manager.GetPlugin(draDriverName); err == nil {
		t.Fatal("the driver is still registered after every pod left")
	}
}

// The registration socket is named as RollingUpdateRegistrarSocketFile names
// it, whichever of its three forms the registry's path length calls for.
func TestOurPerPodSocketNamesAreTheGoHelpers(t *testing.T) {
	const long = "a-rather-long-driver-name.gpu.example.com"
	base := shortTempDir(t)
	forms := map[string]bool{}
	for _, c := range []struct {
		driver string
		n      int
	}{{draDriverName, 1}, {long, 15}, {long, 40}} {
		driver := c.driver
		registry := filepath.Join(base, strings.Repeat("d", c.n))
		mkdir(t, registry)
		name := kubeletplugin.RollingUpdateRegistrarSocketFile(registry, driver, types.UID(podA))
		switch {
		case strings.Contains(name, podA):
			forms["<driver>-<uid>"] = true
		case strings.HasPrefix(name, "dra-"):
			forms["dra-<hash>"] = true
		default:
			forms["<driver>-<uid hash>"] = true
		}
		r := startRegistrar(t,
			"--plugin-type=DRAPlugin",
			"--driver-name="+driver,
			"--kubelet-registration-path=/var/lib/kubelet/plugins/"+driver+"/dra.sock",
			"--plugin-registration-path="+registry,
			"--pod-uid="+podA,
		)
		r.waitLog(0, "Registration Server started", filepath.Join(registry, name))
		if code := r.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("exit code on SIGTERM = %d, want 0", code)
		}
	}
	if len(forms) != 3 {
		t.Fatalf("the registry paths exercised only %v of the three forms", forms)
	}
}
