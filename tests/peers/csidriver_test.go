package peers

// A CSI driver for the kubelet's CSI client to call, written from the hostpath
// driver's source (kubernetes-csi/csi-driver-host-path pkg/hostpath/
// identityserver.go: GetPluginInfo answers Unavailable without a name or a
// vendor version; nodeserver.go NodeGetInfo: the node ID, the volume limit and
// the topology segment topology.hostpath.csi/node=<node ID>). The hostpath
// module itself is not served by the Go module proxy reachable here, so this is
// the stand-in; it uses the CSI spec's own Go bindings and grpc-go.

import (
	"context"
	"net"
	"os"
	"sync/atomic"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const topologyKeyNode = "topology.hostpath.csi/node"

type csiDriver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer
	name, version, nodeID string
	server                *grpc.Server
	// refusals: how many NodeGetInfo calls still answer without a node ID,
	// which the kubelet's CSI handler refuses ("driverNodeID must not be empty").
	refusals atomic.Int32
}

// startCSIDriver serves Identity and Node on socket until the test ends or
// stop is called.
func startCSIDriver(t testing.TB, socket, name, version, nodeID string) *csiDriver {
	t.Helper()
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("CSI driver: listen on %s: %v", socket, err)
	}
	d := &csiDriver{name: name, version: version, nodeID: nodeID, server: grpc.NewServer()}
	csi.RegisterIdentityServer(d.server, d)
	csi.RegisterNodeServer(d.server, d)
	go func() { _ = d.server.Serve(l) }()
	t.Cleanup(d.stop)
	return d
}

func (d *csiDriver) stop() { d.server.Stop() }

func (d *csiDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	if d.name == "" {
		return nil, status.Error(codes.Unavailable, "Driver name not configured")
	}
	if d.version == "" {
		return nil, status.Error(codes.Unavailable, "Driver is missing version")
	}
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: d.version}, nil
}

func (d *csiDriver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (d *csiDriver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

func (d *csiDriver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	nodeID := d.nodeID
	if d.refusals.Add(-1) >= 0 {
		nodeID = ""
	}
	return &csi.NodeGetInfoResponse{
		NodeId:             nodeID,
		MaxVolumesPerNode:  0,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{topologyKeyNode: nodeID}},
	}, nil
}

func (d *csiDriver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}
