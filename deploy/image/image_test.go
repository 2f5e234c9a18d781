package main

// Tests of an image scripts/image built: IMAGE_LAYOUT names its OCI layout
// (scripts/test-image sets it; without it these tests skip). What is checked
// is what a node runs: the index's platforms, each image's one layer (the
// binary and the licence, nothing else), the binary a static ELF for its
// machine, the labels; the amd64 rootfs run in a chroot with nothing else in
// it against the real hostpath driver; and the index pushed to Debian's
// docker-registry and each platform pulled back by oras.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

const patience = 60 * time.Second

var wantMachine = map[string]elf.Machine{
	"linux/amd64": elf.EM_X86_64,
	"linux/arm64": elf.EM_AARCH64,
}

// builtIndex is the index in $IMAGE_LAYOUT (the one entry of its index.json).
func builtIndex(t *testing.T) v1.ImageIndex {
	t.Helper()
	dir := os.Getenv("IMAGE_LAYOUT")
	if dir == "" {
		t.Skip("IMAGE_LAYOUT is not set: scripts/test-image builds the image and runs these tests")
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("index.json lists %d entries, want the image index alone", len(m.Manifests))
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// platforms maps "os/arch" to each platform's image.
func platforms(t *testing.T, idx v1.ImageIndex) map[string]v1.Image {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]v1.Image{}
	for _, d := range m.Manifests {
		if d.Platform == nil {
			t.Fatalf("index entry %s has no platform", d.Digest)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		out[d.Platform.OS+"/"+d.Platform.Architecture] = img
	}
	return out
}

// files reads an image's one layer: path -> header and content.
func files(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	headers, contents := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		headers[h.Name], contents[h.Name] = h, data
	}
	return headers, contents
}

func TestTheIndexHoldsAStaticBinaryPerPlatformAndNothingElse(t *testing.T) {
	idx := builtIndex(t)
	images := platforms(t, idx)
	var got []string
	for p := range images {
		got = append(got, p)
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "linux/amd64 linux/arm64" {
		t.Fatalf("platforms %v, want linux/amd64 and linux/arm64", got)
	}
	for p, img := range images {
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if e := strings.Join(cfg.Config.Entrypoint, " "); e != Entrypoint {
			t.Errorf("%s: entrypoint %q, want %q", p, e, Entrypoint)
		}
		labels := cfg.Config.Labels
		if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(labels["org.opencontainers.image.revision"]) ||
			labels["org.opencontainers.image.version"] == "" ||
			!strings.HasPrefix(labels["org.opencontainers.image.source"], "https://") {
			t.Errorf("%s: labels %v", p, labels)
		}
		headers, contents := files(t, img)
		var names []string
		for n, h := range headers {
			names = append(names, n)
			if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(cfg.Created.Time) {
				t.Errorf("%s: %s is owned by %d:%d, dated %v (the image is dated %v)", p, n, h.Uid, h.Gid, h.ModTime, cfg.Created.Time)
			}
		}
		sort.Strings(names)
		if strings.Join(names, " ") != "LICENSE csi-node-driver-registrar" {
			t.Fatalf("%s: files %v, want the binary and the licence only", p, names)
		}
		if headers["csi-node-driver-registrar"].Mode != 0o755 {
			t.Errorf("%s: the binary's mode is %o", p, headers["csi-node-driver-registrar"].Mode)
		}
		f, err := elf.NewFile(bytes.NewReader(contents["csi-node-driver-registrar"]))
		if err != nil {
			t.Fatalf("%s: the entrypoint is not an ELF file: %v", p, err)
		}
		if f.Machine != wantMachine[p] {
			t.Errorf("%s: ELF machine %v, want %v", p, f.Machine, wantMachine[p])
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s: the binary asks for a dynamic loader: not static", p)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s: the binary needs %v: not static", p, libs)
		}
	}
}

// startDriver runs the real hostpath driver v1.18.0 from ../shared/reference
// on sock; skips when it is not there.
func startDriver(t *testing.T, sock string) {
	t.Helper()
	dir := os.Getenv("REFERENCE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "reference")
	}
	bin, err := filepath.Abs(filepath.Join(dir, "hostpathplugin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("the reference hostpath driver is not at %s", bin)
	}
	cmd := exec.Command(bin, "--endpoint=unix://"+sock, "--nodeid=node-1", "--drivername=hostpath.csi.k8s.io",
		"--statedir="+t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, "the driver's socket", func() bool { return isSocket(sock) })
}

func isSocket(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Mode()&os.ModeSocket != 0
}

// waitFor polls cond every 20 ms until it holds, for at most patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	deadline := time.After(patience)
	for !cond() {
		select {
		case <-ticker.C:
		case <-deadline:
			t.Fatalf("%s: not within %v", what, patience)
		}
	}
}

func TestTheAmd64RootfsRunsInAChrootWithNothingElse(t *testing.T) {
	idx := builtIndex(t)
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	img := platforms(t, idx)["linux/amd64"]
	headers, contents := files(t, img)
	root := t.TempDir()
	for name, data := range contents {
		if err := os.WriteFile(filepath.Join(root, name), data, os.FileMode(headers[name].Mode)); err != nil {
			t.Fatal(err)
		}
	}
	// The directories a DaemonSet mounts: the driver's socket and the
	// kubelet's plugin registry.
	for _, d := range []string{"csi", "registration"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	chroot := func(args ...string) *exec.Cmd {
		cmd := exec.Command(Entrypoint, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir = "/"
		cmd.Env = []string{"KUBE_NODE_NAME=node-1"}
		return cmd
	}
	out, err := chroot("--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "csi-node-driver-registrar") {
		t.Fatalf("--version in the chroot: %v: %s", err, out)
	}

	startDriver(t, filepath.Join(root, "csi", "csi.sock"))
	port := freePort(t)
	cmd := chroot("--csi-address=/csi/csi.sock",
		"--kubelet-registration-path=/var/lib/kubelet/plugins/hostpath.csi.k8s.io/csi.sock",
		"--plugin-registration-path=/registration",
		fmt.Sprintf("--http-endpoint=127.0.0.1:%d", port))
	var log bytes.Buffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("registrar log:\n%s", log.String())
		}
	})
	sock := filepath.Join(root, "registration", "hostpath.csi.k8s.io-reg.sock")
	waitFor(t, "the registration socket", func() bool { return isSocket(sock) })
	// The HTTP server may start listening just after the socket appears.
	status := 0
	waitFor(t, "an answer from /healthz", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
		if err != nil {
			return false
		}
		resp.Body.Close()
		status = resp.StatusCode
		return true
	})
	if status != http.StatusOK {
		t.Errorf("/healthz answered %d", status)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit on SIGTERM: %v, want 0", err)
		}
	case <-time.After(patience):
		t.Fatal("no exit within patience of SIGTERM")
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the registration socket is left after SIGTERM: %v", err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRegistry starts Debian's docker-registry on a loopback port; skips
// when it is not installed (.ci/run installs it).
func startRegistry(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Skip("docker-registry is not installed (apt-get install docker-registry)")
	}
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	config := filepath.Join(dir, "config.yml")
	yml := fmt.Sprintf("version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", dir, addr)
	if err := os.WriteFile(config, []byte(yml), 0o600); err != nil {
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
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	listening := make(chan struct{})
	go func() {
		// Reads the log to its end, so the registry never blocks on a full pipe.
		said := false
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), "listening on") {
				close(listening)
				said = true
			}
		}
	}()
	select {
	case <-listening:
	case <-time.After(patience):
		t.Fatalf("docker-registry did not listen within %v", patience)
	}
	return addr
}

func TestPushedThenEachPlatformPulledBackByOras(t *testing.T) {
	idx := builtIndex(t)
	oras, err := exec.LookPath("oras")
	if err != nil {
		t.Skip("oras is not installed (go install oras.land/oras/cmd/oras@v1.3.6)")
	}
	ref := startRegistry(t) + "/csi-node-driver-registrar:test"
	if err := Push(ref, idx, true); err != nil {
		t.Fatal(err)
	}
	want, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	describe := func(args ...string) v1.Descriptor {
		out, err := exec.CommandContext(ctx, oras, append([]string{"manifest", "fetch", "--plain-http", "--descriptor"}, args...)...).Output()
		if err != nil {
			t.Fatalf("oras manifest fetch %v: %v", args, err)
		}
		var d v1.Descriptor
		if err := json.Unmarshal(out, &d); err != nil {
			t.Fatalf("oras printed %s: %v", out, err)
		}
		return d
	}
	if got := describe(ref).Digest; got != want {
		t.Fatalf("the registry holds index %s, want %s", got, want)
	}
	for p, img := range platforms(t, idx) {
		digest, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if got := describe("--platform", p, ref).Digest; got != digest {
			t.Errorf("%s pulled back as %s, want %s", p, got, digest)
		}
		// And the whole image, copied by oras into a layout of its own.
		out := t.TempDir()
		if b, err := exec.CommandContext(ctx, oras, "cp", "--from-plain-http", "--platform", p, ref,
			"--to-oci-layout", out+":copy").CombinedOutput(); err != nil {
			t.Fatalf("oras cp --platform %s: %v: %s", p, err, b)
		}
		copied, err := layout.ImageIndexFromPath(out)
		if err != nil {
			t.Fatal(err)
		}
		m, err := copied.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Manifests) != 1 || m.Manifests[0].Digest != digest {
			t.Errorf("oras copied %s as %+v, want the manifest %s", p, m.Manifests, digest)
		}
	}
}
