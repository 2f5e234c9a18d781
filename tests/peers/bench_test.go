package peers

// GetInfo latency and the registrar's memory through grpc-go, for the README's
// figures on the :authority layer (go test -run '^$' -bench GetInfo).
// REGISTRAR_BIN picks the binary, so two builds can be measured side by side.
// The kubelet's own dial sends the percent-encoded path, which the layer
// rewrites; a dial with WithAuthority("localhost") sends an authority h2 takes
// as it is, so it also works against a build without the layer.

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func BenchmarkGetInfo(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"kubelet-authority", nil},
		{"localhost-authority", []grpc.DialOption{grpc.WithAuthority("localhost")}},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir, err := os.MkdirTemp("", "bench")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			csiSock, registry := filepath.Join(dir, "csi.sock"), filepath.Join(dir, "registry")
			if err := os.Mkdir(registry, 0o750); err != nil {
				b.Fatal(err)
			}
			const driver = "bench.csi.example.com"
			startCSIDriver(b, csiSock, driver, "v1.0.0", nodeName)
			r := startRegistrar(b, "--csi-address="+csiSock, "--kubelet-registration-path="+csiSock, "--plugin-registration-path="+registry)
			defer r.stop(syscall.SIGTERM)
			// Any build's socket, whatever it logs: wait for the file.
			socket := filepath.Join(registry, driver+"-reg.sock")
			for deadline := time.Now().Add(patience); ; {
				if _, err := os.Stat(socket); err == nil {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("no registration socket within %v:\n%s", patience, r.text())
				}
				time.Sleep(5 * time.Millisecond)
			}
			conn, err := grpc.NewClient("passthrough:///"+socket, append(kubeletDialOptions(), c.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := registerapi.NewRegistrationClient(conn)
			ctx := context.Background()
			if _, err := client.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
				b.Fatalf("GetInfo: %v", err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := client.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
					b.Fatalf("GetInfo: %v", err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(vmRSSKiB(b, r.cmd.Process.Pid)), "RSS-KiB")
		})
	}
}

func vmRSSKiB(b *testing.B, pid int) int {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
