package peers

// Side by side with upstream: the same kubelet scenarios, run once with the Go
// registrar v2.17.0 and once with ours, compared by what the kubelet's code
// ends up with: the plugin handler calls it made, the CSINode entry, and the
// state after SIGTERM and after a refusal. The driver is the real CSI hostpath
// driver v1.18.0 where it can play the part. Both binaries come from
// ../shared/reference (its README says how they were built); without them (a
// user's clone) the tests say so and skip. REFERENCE_DIR overrides the place.

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"

	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// reference is upstream's binary name from ../shared/reference, or a skip.
func reference(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("REFERENCE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "reference")
	}
	path, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is absent (upstream's binaries are in ../shared/reference on the project's machines only): skipping the side-by-side test", path)
	}
	return path
}

// startHostpath runs the real hostpath driver on socket until the test ends.
func startHostpath(t *testing.T, socket, name, stateDir string) {
	t.Helper()
	cmd := exec.Command(reference(t, "hostpathplugin"),
		"--endpoint=unix://"+socket, "--nodeid="+nodeName, "--drivername="+name, "--statedir="+stateDir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting hostpathplugin: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// calls records what the kubelet's plugin manager asked of the CSI handler.
type calls struct {
	mu   sync.Mutex
	list []string
}

func (c *calls) wrap(h cache.PluginHandler) cache.PluginHandler {
	return hookedHandler{PluginHandler: h, record: func(call string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.list = append(c.list, call)
	}}
}

// seen returns the calls so far, with the run's driver name and paths made generic.
func (c *calls) seen(w *world, driver string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, call := range c.list {
		call = strings.ReplaceAll(call, driver, "DRIVER")
		call = strings.ReplaceAll(call, w.dir, "DIR")
		out = append(out, call)
	}
	return out
}

// outcome is what one scenario left in the kubelet's code.
type outcome struct {
	Calls       []string
	NodeID      string
	Topology    []string
	ExitCode    int
	SocketAfter bool
	InCSINode   bool
}

func socketThere(w *world, driver string) bool {
	_, err := os.Lstat(filepath.Join(w.registry, driver+"-reg.sock"))
	return err == nil
}

// registerThenSIGTERM: the hostpath driver registered through bin, then SIGTERM.
func registerThenSIGTERM(t *testing.T, bin, driver string) outcome {
	var c calls
	w := startKubeletWith(t, c.wrap)
	startHostpath(t, w.csiSock, driver, filepath.Join(w.dir, "state"))
	r := startRegistrarBin(t, bin, w.args()...)
	w.waitRegistered(driver)
	entry := w.csiNodeDriver(driver)
	o := outcome{NodeID: entry.NodeID, Topology: entry.TopologyKeys}
	o.ExitCode = r.stop(syscall.SIGTERM)
	w.waitFor("the socket's removal handled", func() bool {
		return !socketThere(w, driver) && len(c.seen(w, driver)) == 3
	})
	o.Calls = c.seen(w, driver)
	o.SocketAfter = socketThere(w, driver)
	o.InCSINode = w.csiNodeDriver(driver) != nil
	return o
}

// refused: a driver the kubelet's CSI handler refuses (no node ID), through bin.
func refused(t *testing.T, bin, driver string) outcome {
	var c calls
	w := startKubeletWith(t, c.wrap)
	startCSIDriver(t, w.csiSock, driver, "v1.0.0", "")
	r := startRegistrarBin(t, bin, w.args()...)
	o := outcome{ExitCode: r.wait()}
	o.Calls = c.seen(w, driver)
	o.SocketAfter = socketThere(w, driver)
	o.InCSINode = w.csiNodeDriver(driver) != nil
	return o
}

// sameCalls checks that both registrars led the kubelet to make the calls want.
func sameCalls(t *testing.T, want []string, goRun, rsRun outcome) {
	t.Helper()
	for who, o := range map[string]outcome{"Go registrar": goRun, "ours": rsRun} {
		if !reflect.DeepEqual(o.Calls, want) {
			t.Errorf("%s: the kubelet's handler calls were\n%q\nwant\n%q", who, o.Calls, want)
		}
	}
}

func TestSideBySideWithTheGoRegistrarAndTheHostpathDriver(t *testing.T) {
	upstream := reference(t, "csi-node-driver-registrar")
	reference(t, "hostpathplugin")
	ours := registrarBin(t)

	goRun := registerThenSIGTERM(t, upstream, "hostpath-go.csi.k8s.io")
	rsRun := registerThenSIGTERM(t, ours, "hostpath-rs.csi.k8s.io")
	want := []string{
		"ValidatePlugin(DRIVER, DIR/csi.sock, [1.0.0]) = <nil>",
		"RegisterPlugin(DRIVER, DIR/csi.sock, [1.0.0]) = <nil>",
		"DeRegisterPlugin(DRIVER, DIR/csi.sock)",
	}
	sameCalls(t, want, goRun, rsRun)
	if !reflect.DeepEqual(goRun, rsRun) {
		t.Fatalf("registration then SIGTERM differs:\nGo registrar: %+v\nours:         %+v", goRun, rsRun)
	}
	if goRun.NodeID != nodeName || goRun.ExitCode != 0 || goRun.SocketAfter || goRun.InCSINode {
		t.Fatalf("unexpected common outcome: %+v", goRun)
	}
	if !reflect.DeepEqual(goRun.Topology, []string{"topology.hostpath.csi/node"}) {
		t.Fatalf("topology keys %v: the real driver's segment did not reach CSINode", goRun.Topology)
	}
}

func TestSideBySideAfterARefusal(t *testing.T) {
	upstream := reference(t, "csi-node-driver-registrar")
	ours := registrarBin(t)

	goRun := refused(t, upstream, "refused-go.csi.example.com")
	rsRun := refused(t, ours, "refused-rs.csi.example.com")
	// The same for the kubelet: one validation, one failed registration, no
	// CSINode entry, and exit code 1.
	want := []string{
		"ValidatePlugin(DRIVER, DIR/csi.sock, [1.0.0]) = <nil>",
		"RegisterPlugin(DRIVER, DIR/csi.sock, [1.0.0]) = error adding CSI driver node info: driverNodeID must not be empty",
	}
	sameCalls(t, want, goRun, rsRun)
	for who, o := range map[string]outcome{"Go registrar": goRun, "ours": rsRun} {
		if o.ExitCode != 1 || o.InCSINode {
			t.Errorf("%s: exit code %d, in CSINode %v; want 1, false", who, o.ExitCode, o.InCSINode)
		}
	}
	// The difference, by design: upstream exits inside the handler and leaves
	// its socket, which the kubelet keeps dialing; ours replies, then removes it.
	if !goRun.SocketAfter {
		t.Error("the Go registrar removed its socket after a refusal: the documented difference is gone")
	}
	if rsRun.SocketAfter {
		t.Error("our registrar left its socket after a refusal")
	}
}
