package peers

// A policy plugin shipped through a real OCI registry (the CNCF distribution
// registry, Debian's docker-registry, on loopback): pushed with our
// `plugin push`, pulled by the registrar at start-up, and registered through
// the kubelet's own plugin manager; then, with the registry gone, a restart
// registers again from the cache.
//
// $OCI_PLUGIN_WASM names the plugin (a pool-suffix build in any language:
// plugins/test-languages.sh runs this with the Python one, which is too
// large for a ConfigMap); it defaults to $POOL_SUFFIX_WASM.

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type ociRegistry struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// startOCIRegistry starts docker-registry on a loopback port with storage in
// a temporary directory, and waits until it says it listens.
func startOCIRegistry(t *testing.T) *ociRegistry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("docker-registry is not installed; .ci/run installs it (apt-get install docker-registry)")
		}
		t.Skip("docker-registry is not installed (apt-get install docker-registry)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yml")
	yaml := fmt.Sprintf("version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", config)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &ociRegistry{addr: addr, cmd: cmd, done: make(chan struct{})}
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), "listening on") {
				said = true
				close(listening)
			}
		}
		_ = cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(r.stop)
	select {
	case <-listening:
	case <-r.done:
		t.Fatal("docker-registry exited before listening")
	case <-time.After(patience):
		t.Fatalf("docker-registry did not listen within %v", patience)
	}
	return r
}

func (r *ociRegistry) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
}

func TestKubeletRegistersAPluginPulledFromARegistryAndAgainFromTheCacheWithoutIt(t *testing.T) {
	wasm := os.Getenv("OCI_PLUGIN_WASM")
	if wasm == "" {
		wasm = os.Getenv("POOL_SUFFIX_WASM")
	}
	if wasm == "" {
		t.Fatal("neither OCI_PLUGIN_WASM nor POOL_SUFFIX_WASM is set: point one at a pool-suffix component, or run scripts/test")
	}
	reg := startOCIRegistry(t)
	out, err := exec.Command(registrarBin(t), "plugin", "push", wasm, reg.addr+"/policies/pool-suffix:v1",
		"--insecure-registry", reg.addr).Output()
	if err != nil {
		t.Fatalf("plugin push: %v\n%s", err, stderrOf(err))
	}
	line := strings.TrimSpace(string(out))
	if !strings.HasPrefix(line, "oci = \""+reg.addr+"/policies/pool-suffix:v1@sha256:") {
		t.Fatalf("plugin push printed %q", line)
	}

	w := startKubelet(t)
	const driver = "oci.csi.example.com"
	startCSIDriver(t, w.csiSock, driver, "v1.0.0", nodeName)
	policy := filepath.Join(w.dir, "policy.toml")
	key := filepath.Join(w.dir, "cache.key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef-peers\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf("[policy]\ncache_dir = %q\ncache_key_file = %q\ninsecure_registries = [%q]\n\n[[plugin]]\nid = \"pool-suffix\"\n%s\n[plugin.settings]\nsuffix = \"-pool-a\"\n",
		filepath.Join(w.dir, "cache"), key, reg.addr, line)
	if err := os.WriteFile(policy, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}

	r := startRegistrar(t, w.args("--policy-config="+policy)...)
	r.waitLog(0, "Policy plugin pulled")
	// Compiling a Python or JavaScript component takes tens of seconds.
	w.waitForWithin(driver+"-pool-a in CSINode", 10*patience, func() bool { return w.csiNodeDriver(driver+"-pool-a") != nil })
	if code := r.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code on SIGTERM = %d, want 0", code)
	}
	w.waitDeregistered(driver + "-pool-a")

	// The registry is gone; the node restarts the registrar.
	reg.stop()
	r = startRegistrar(t, w.args("--policy-config="+policy)...)
	r.waitLog(0, "Policy plugin found in the cache; the registry was not contacted")
	w.waitRegistered(driver + "-pool-a") // compiled code from the keyed cache: no compile
	if code := r.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code on SIGTERM = %d, want 0", code)
	}
}

// stderrOf is what a command run with Output wrote to its standard error.
func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(exit.Stderr)
	}
	return ""
}
