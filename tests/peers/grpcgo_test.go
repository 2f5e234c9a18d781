package peers

// grpc-go calling the registration socket with the options the kubelet's
// operation executor dials with (pkg/kubelet/pluginmanager/operationexecutor/
// operation_generator.go, dial: grpc.DialContext(ctx, unixSocketPath,
// WithTransportCredentials(insecure), WithBlock(), WithContextDialer(unix))).
// With that passthrough target grpc-go sends the percent-encoded socket path
// as :authority.

import (
	"context"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// kubeletDialOptions are the operation executor's, but for WithBlock.
func kubeletDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}),
	}
}

func dialAsTheKubelet(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	//nolint:staticcheck // DialContext and WithBlock, as the kubelet dials.
	conn, err := grpc.DialContext(ctx, socket, append(kubeletDialOptions(), grpc.WithBlock())...)
	if err != nil {
		t.Fatalf("dialing %s: %v", socket, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestGrpcGoDialedAsTheKubeletCallsGetInfoAndNotify(t *testing.T) {
	dir := shortTempDir(t)
	registry := filepath.Join(dir, "registry")
	csiSock := filepath.Join(dir, "csi.sock")
	const driver = "grpcgo.csi.example.com"
	startCSIDriver(t, csiSock, driver, "v1.0.0", nodeName)
	mkdir(t, registry)
	r := startRegistrar(t, "--csi-address="+csiSock, "--kubelet-registration-path="+csiSock,
		"--plugin-registration-path="+registry)
	socket := filepath.Join(registry, driver+"-reg.sock")
	r.waitLog(0, "Registration Server started")

	client := registerapi.NewRegistrationClient(dialAsTheKubelet(t, socket))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // the kubelet's GetInfo budget
	defer cancel()
	info, err := client.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != driver || info.Endpoint != csiSock ||
		len(info.SupportedVersions) != 1 || info.SupportedVersions[0] != "1.0.0" {
		t.Fatalf("GetInfo = %+v", info)
	}
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	r.waitLog(0, "PluginRegistered:true")
	if code := r.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code on SIGTERM = %d, want 0", code)
	}
}
