package peers

// The registrar under test: our binary ($REGISTRAR_BIN) as a child process,
// with its log read line by line so that tests wait on what it says.

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// patience bounds every wait; nothing takes this long unless it is broken.
const patience = 30 * time.Second

type registrar struct {
	t    testing.TB
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  []string
	news chan struct{} // closed and replaced on each new line
	done chan struct{} // closed when the process has exited
	err  error
}

func registrarBin(t testing.TB) string {
	bin := os.Getenv("REGISTRAR_BIN")
	if bin == "" {
		t.Fatal("REGISTRAR_BIN is not set: build the registrar (cargo build) and point REGISTRAR_BIN at it, or run scripts/test")
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func startRegistrar(t testing.TB, args ...string) *registrar {
	t.Helper()
	return startRegistrarBin(t, registrarBin(t), args...)
}

// startRegistrarBin runs bin (ours, or upstream's Go registrar) with args.
func startRegistrarBin(t testing.TB, bin string, args ...string) *registrar {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBE_NODE_NAME=node-1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &registrar{t: t, cmd: cmd, news: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the registrar: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			r.mu.Lock()
			r.log = append(r.log, sc.Text())
			close(r.news)
			r.news = make(chan struct{})
			r.mu.Unlock()
		}
		r.err = cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			t.Logf("registrar log:\n%s", r.text())
		}
	})
	return r
}

func (r *registrar) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.log, "\n")
}

// waitLog waits until a line after the first `from` lines contains every one
// of parts, and returns its index.
func (r *registrar) waitLog(from int, parts ...string) int {
	r.t.Helper()
	deadline := time.After(patience)
	for {
		r.mu.Lock()
		for i := from; i < len(r.log); i++ {
			if containsAll(r.log[i], parts) {
				r.mu.Unlock()
				return i
			}
		}
		news := r.news
		r.mu.Unlock()
		select {
		case <-news:
		case <-r.done:
			if i := r.find(from, parts); i >= 0 {
				return i
			}
			r.t.Fatalf("the registrar exited (%v) before logging %q", r.err, parts)
		case <-deadline:
			r.t.Fatalf("the registrar did not log %q within %v", parts, patience)
		}
	}
}

func (r *registrar) find(from int, parts []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := from; i < len(r.log); i++ {
		if containsAll(r.log[i], parts) {
			return i
		}
	}
	return -1
}

// findAll returns the indexes of the lines that contain every one of parts.
func (r *registrar) findAll(parts ...string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found []int
	for i, line := range r.log {
		if containsAll(line, parts) {
			found = append(found, i)
		}
	}
	return found
}

func containsAll(line string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(line, p) {
			return false
		}
	}
	return true
}

// signal sends sig and waits for the exit code.
func (r *registrar) stop(sig syscall.Signal) int {
	r.t.Helper()
	_ = r.cmd.Process.Signal(sig)
	return r.wait()
}

func (r *registrar) wait() int {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(patience):
		r.t.Fatalf("the registrar did not exit within %v", patience)
	}
	return r.cmd.ProcessState.ExitCode()
}
