package peers

// The failure policies next to the kubelet's own retries. The kubelet's CSI
// handler refuses the first registration (the driver's NodeGetInfo has no node
// ID yet: "driverNodeID must not be empty"), then accepts. Under each policy the
// driver must end up registered, or the registrar exit as configured; never
// loop, never leave two registrations.
//
// | policy | kubelet 1.34 (no retries) | kubelet 1.37 (kubernetes#133335: retries by itself) |
// |---|---|---|
// | exit (built-in) | exit 1, socket removed; the restarted container registers | the same |
// | retry (retry-backoff) | socket re-created after the delay: registered | the same; the kubelet's own retry finds no socket |
// | ignore (ignore-refusals) | stays refused: nothing retries a failed RegisterPlugin | the kubelet's retry registers it |

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// examplePolicy writes a policy file running the example plugin in $env.
func examplePolicy(t *testing.T, dir, env, id, header, settings string) string {
	t.Helper()
	wasm := os.Getenv(env)
	if wasm == "" {
		t.Fatalf("%s is not set: build plugins/examples/%s for wasm32-wasip2 and point %s at it, or run scripts/test", env, id, env)
	}
	bytes, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bytes)
	toml := fmt.Sprintf("%s\n[[plugin]]\nid = %q\npath = %q\nsha256 = %q\n[plugin.settings]\n%s\n",
		header, id, wasm, hex.EncodeToString(sum[:]), settings)
	path := filepath.Join(dir, id+".toml")
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sockets lists the registration sockets in the kubelet's registry.
func (w *world) sockets() []string {
	entries, err := os.ReadDir(w.registry)
	if err != nil {
		w.t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// refusedOnce starts a kubelet and a driver whose first NodeGetInfo the
// kubelet's CSI handler refuses.
func refusedOnce(t *testing.T, driver string) *world {
	w := startKubelet(t)
	d := startCSIDriver(t, w.csiSock, driver, "v1.0.0", nodeName)
	d.refusals.Store(1)
	return w
}

// registeredOnce checks the end state: the driver registered, by one socket.
func registeredOnce(t *testing.T, w *world, driver string) {
	t.Helper()
	w.waitRegistered(driver)
	if s := w.sockets(); len(s) != 1 || s[0] != driver+"-reg.sock" {
		t.Fatalf("registry holds %v, want only %s-reg.sock", s, driver)
	}
}

func TestARefusalThenSuccessUnderTheBuiltInExitPolicy(t *testing.T) {
	const driver = "exit.csi.example.com"
	w := refusedOnce(t, driver)
	r := startRegistrar(t, w.args()...)
	r.waitLog(0, "Registration process failed with error", "driverNodeID must not be empty")
	if code := r.wait(); code != 1 {
		t.Fatalf("exit code after the refusal = %d, want 1", code)
	}
	if s := w.sockets(); len(s) != 0 {
		t.Fatalf("registry holds %v after the exit, want nothing", s)
	}
	// The kubelet restarts the container; the driver is ready by now.
	r2 := startRegistrar(t, w.args()...)
	r2.waitLog(0, "PluginRegistered:true")
	registeredOnce(t, w, driver)
	w.stopRegistered(r2, driver)
}

func TestARefusalThenSuccessUnderTheRetryBackoffExample(t *testing.T) {
	const driver = "retry.csi.example.com"
	w := refusedOnce(t, driver)
	policy := examplePolicy(t, w.dir, "RETRY_BACKOFF_WASM", "retry-backoff",
		"[policy]\nmin_retry_ms = 100", "initial_delay_ms = 200\nmax_attempts = 3")
	r := startRegistrar(t, w.args("--policy-config="+policy)...)
	i := r.waitLog(0, "Registration refused; re-creating the registration socket after a delay")
	r.waitLog(i, "PluginRegistered:true")
	registeredOnce(t, w, driver)
	if n := len(r.findAll("Registration refused")); n != 1 {
		t.Fatalf("%d refusals, want 1:\n%s", n, r.text())
	}
	w.stopRegistered(r, driver)
}

func TestARefusalThenSuccessUnderTheIgnoreRefusalsExample(t *testing.T) {
	const driver = "ignore.csi.example.com"
	w := refusedOnce(t, driver)
	policy := examplePolicy(t, w.dir, "IGNORE_REFUSALS_WASM", "ignore-refusals",
		"", "matching = [\"driverNodeID must not be empty\"]\nmax_attempts = 3")
	r := startRegistrar(t, w.args("--policy-config="+policy)...)
	i := r.waitLog(0, "Registration refused; the failure policy ignores it")
	if !kubeletRetriesFailedRegistrations {
		// Kubernetes 1.34 keeps the plugin whose RegisterPlugin failed in its
		// actual state and retries nothing until the socket changes: the
		// registrar serves on, refused (ignore-refusals' README says to use
		// retry-backoff there).
		if d := w.csiNodeDriver(driver); d != nil {
			t.Fatalf("a refused driver is in CSINode: %+v", d)
		}
		if code := r.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("exit code on SIGTERM = %d, want 0", code)
		}
		return
	}
	// The kubelet deregistered the refused plugin and registers it again by itself.
	r.waitLog(i, "PluginRegistered:true")
	registeredOnce(t, w, driver)
	w.stopRegistered(r, driver)
}
