package peers

// A lost NotifyRegistrationStatus (kubernetes#138170), with the kubelet's own
// plugin manager and CSI handler. The kubelet dials the registration socket
// once and sends its verdict over that connection after RegisterPlugin, which
// for CSI can take a minute; if the plugin side drops the connection in
// between, the verdict never arrives. Here a relay stands between the
// kubelet's registry and our registrar's, and drops every connection, and
// refuses new ones, the moment the kubelet's RegisterPlugin succeeds.
//
// - Kubernetes 1.34 (no kubernetes#133335): the kubelet logs the failed
//   notification and keeps the driver registered; nothing retries. Our
//   registrar, with no verdict within --notify-timeout, creates its socket
//   again; the relay follows, so the kubelet sees a new socket and registers
//   anew.
// - Kubernetes 1.37: the kubelet deregisters the driver and retries on its
//   own (the relay lets it through once it deregistered); our registrar, at
//   its default --notify-timeout, must not get in the way.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// hookedHandler is a kubelet plugin handler that reports each call (record),
// and calls back after a successful RegisterPlugin and after DeRegisterPlugin;
// every callback is optional. Its methods, whose signatures changed in 1.35,
// are in run_k8s*_test.go.
type hookedHandler struct {
	cache.PluginHandler
	afterRegister func()
	onDeregister  func()
	record        func(call string)
}

func (h hookedHandler) recordCall(format string, args ...any) {
	if h.record != nil {
		h.record(fmt.Sprintf(format, args...))
	}
}

// relay serves <outer> and forwards each connection to <inner>.
type relay struct {
	t            *testing.T
	inner, outer string
	mu           sync.Mutex
	ln           net.Listener
	cut          bool
	conns        []net.Conn
}

func startRelay(t *testing.T, inner, outer string) *relay {
	r := &relay{t: t, inner: inner, outer: outer}
	r.listen()
	t.Cleanup(r.close)
	return r
}

// close removes the relay's socket and drops every connection.
func (r *relay) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.ln.Close()
	r.cut = true
	r.dropLocked()
}

func (r *relay) listen() {
	ln, err := net.Listen("unix", r.outer)
	if err != nil {
		r.t.Fatalf("relay: %v", err)
	}
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			var up net.Conn
			if !r.cut {
				up, err = net.Dial("unix", r.inner)
			}
			if r.cut || err != nil {
				r.mu.Unlock()
				_ = c.Close()
				continue
			}
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			go pipe(c, up)
			go pipe(up, c)
		}
	}()
}

func pipe(to, from net.Conn) {
	_, _ = io.Copy(to, from)
	_ = to.Close()
	_ = from.Close()
}

func (r *relay) dropLocked() {
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
}

// drop closes every connection and refuses new ones until restore or renew.
func (r *relay) drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
	r.dropLocked()
}

// restore lets connections through again.
func (r *relay) restore() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = false
}

// renew follows the registrar, which created its socket again: a new socket
// at <outer> (closing the listener removes the old file), connections through.
func (r *relay) renew() {
	r.mu.Lock()
	old := r.ln
	r.cut = false
	r.mu.Unlock()
	_ = old.Close()
	r.listen()
}

// freePort is a loopback port nobody listens on (for the registrar's HTTP server).
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func readyz(port int) (int, string) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestALostNotificationEndsWithTheDriverRegisteredAndReady(t *testing.T) {
	const driver = "lost.csi.example.com"
	var (
		once  sync.Once
		r     *relay
		ready = make(chan struct{})
	)
	w := startKubeletWith(t, func(h cache.PluginHandler) cache.PluginHandler {
		return hookedHandler{
			PluginHandler: h,
			// The first registration succeeds in the kubelet, then the
			// connection its verdict was to go over is gone.
			afterRegister: func() { <-ready; once.Do(func() { r.drop() }) },
			onDeregister:  func() { <-ready; r.restore() },
		}
	})
	startCSIDriver(t, w.csiSock, driver, "v1.0.0", nodeName)
	inner := filepath.Join(w.dir, "registrar-registry")
	mkdir(t, inner)
	r = startRelay(t, filepath.Join(inner, driver+"-reg.sock"), filepath.Join(w.registry, driver+"-reg.sock"))
	close(ready)

	port := freePort(t)
	args := []string{
		"--csi-address=" + w.csiSock,
		"--kubelet-registration-path=" + w.csiSock,
		"--plugin-registration-path=" + inner,
		fmt.Sprintf("--http-endpoint=127.0.0.1:%d", port),
		"--v=5",
	}
	if !kubeletRetriesFailedRegistrations {
		args = append(args, "--notify-timeout=1s")
	}
	reg := startRegistrar(t, args...)

	if kubeletRetriesFailedRegistrations {
		// The kubelet deregistered the driver after the failed notification
		// and registered it again by itself: a second GetInfo, then the verdict.
		i := reg.waitLog(0, "Received GetInfo call")
		j := reg.waitLog(i+1, "Received GetInfo call")
		reg.waitLog(j+1, "PluginRegistered:true")
		if strings.Contains(reg.text(), "sent no NotifyRegistrationStatus") {
			t.Fatal("the registrar re-created its socket although the kubelet retried by itself")
		}
	} else {
		// Only the registrar can end it: no verdict within --notify-timeout.
		i := reg.waitLog(0, "sent no NotifyRegistrationStatus; creating the registration socket again")
		if reg.find(0, []string{"PluginRegistered"}) >= 0 {
			t.Fatalf("a verdict reached the registrar before the timeout:\n%s", reg.text())
		}
		reg.waitLog(i, "Registration Server started", `reason="notify-timeout"`)
		r.renew()
		reg.waitLog(i, "PluginRegistered:true")
	}
	w.waitRegistered(driver)
	w.waitFor("/readyz 200", func() bool { code, _ := readyz(port); return code == 200 })

	if code := reg.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code on SIGTERM = %d, want 0", code)
	}
	if _, err := os.Lstat(filepath.Join(inner, driver+"-reg.sock")); !os.IsNotExist(err) {
		t.Fatalf("registration socket still there after SIGTERM: %v", err)
	}
	// The relay follows: its socket goes, and the kubelet deregisters the driver.
	r.close()
	w.waitDeregistered(driver)
}
