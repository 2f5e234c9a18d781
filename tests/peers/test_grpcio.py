"""Python grpcio calling the registration socket, as a grpcio client dials a
unix socket: target ``unix:<path>``, for which grpcio (1.57 and later) sends the
percent-encoded path as ``:authority``. The CSI driver on the other side is
grpcio too. Stubs are generated from the repository's protos at test time.

Needs REGISTRAR_BIN (the registrar binary); scripts/test sets it.
"""

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_tools import protoc

REPO = Path(__file__).resolve().parents[2]
PATIENCE = 30  # seconds; nothing waits this long unless something is broken


@pytest.fixture(scope="module")
def stubs():
    out = tempfile.mkdtemp(prefix="stubs")
    protos = ["pluginregistration/api.proto", "csi/csi.proto"]
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    code = protoc.main(
        ["protoc", f"-I{REPO / 'proto'}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}"]
        + protos
    )
    assert code == 0, "protoc failed"
    sys.path.insert(0, out)
    from pluginregistration import api_pb2, api_pb2_grpc  # noqa: E402
    from csi import csi_pb2, csi_pb2_grpc  # noqa: E402

    return api_pb2, api_pb2_grpc, csi_pb2, csi_pb2_grpc


class Registrar:
    """Our binary as a child process; its log lines arrive on a queue."""

    def __init__(self, args):
        binary = os.environ.get("REGISTRAR_BIN")
        assert binary, "REGISTRAR_BIN is not set: run scripts/test, or build the registrar and point REGISTRAR_BIN at it"
        self.proc = subprocess.Popen(
            [binary, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.lines = queue.Queue()
        self.log = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, text):
        while True:
            line = self.lines.get(timeout=PATIENCE)
            assert line is not None, f"the registrar exited before logging {text!r}:\n" + "".join(self.log)
            self.log.append(line)
            if text in line:
                return line

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=PATIENCE)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_grpcio_calls_get_info_and_notify(stubs):
    api_pb2, api_pb2_grpc, csi_pb2, csi_pb2_grpc = stubs

    class Identity(csi_pb2_grpc.IdentityServicer):
        def GetPluginInfo(self, request, context):
            return csi_pb2.GetPluginInfoResponse(name="grpcio.csi.example.com", vendor_version="v1.0.0")

        def Probe(self, request, context):
            return csi_pb2.ProbeResponse()

    with tempfile.TemporaryDirectory(prefix="grpcio") as tmp:
        csi_sock = os.path.join(tmp, "csi.sock")
        registry = os.path.join(tmp, "registry")
        os.mkdir(registry)
        driver = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        csi_pb2_grpc.add_IdentityServicer_to_server(Identity(), driver)
        driver.add_insecure_port(f"unix:{csi_sock}")
        driver.start()
        registrar = Registrar(
            [f"--csi-address={csi_sock}", f"--kubelet-registration-path={csi_sock}", f"--plugin-registration-path={registry}"]
        )
        try:
            registrar.wait_for("Registration Server started")
            socket = os.path.join(registry, "grpcio.csi.example.com-reg.sock")
            with grpc.insecure_channel(f"unix:{socket}") as channel:
                client = api_pb2_grpc.RegistrationStub(channel)
                info = client.GetInfo(api_pb2.InfoRequest(), timeout=1)
                assert info.type == "CSIPlugin"
                assert info.name == "grpcio.csi.example.com"
                assert info.endpoint == csi_sock
                assert list(info.supported_versions) == ["1.0.0"]
                client.NotifyRegistrationStatus(api_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
            registrar.wait_for("PluginRegistered:true")
            assert registrar.stop() == 0
            assert not os.path.exists(socket), "the socket must be removed on SIGTERM"
        finally:
            registrar.kill()
            driver.stop(None)
