"""controld's gRPC relay session, driven by a test client playing relayd."""
import queue
import threading

import grpc

import harness


def test_session_snapshot_deltas_and_pushes(controld, workdir, control_pb2):
    pb, pb_grpc, health_pb2 = control_pb2
    c = controld()
    channel = grpc.insecure_channel(f"unix:{c.control_socket}")
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                                response_deserializer=health_pb2.HealthCheckResponse.FromString)
    health = check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING

    tunnel = c.request("POST", "/api/tunnel").json()
    stub = pb_grpc.RelayControlStub(channel)
    outgoing = queue.Queue()
    received = queue.Queue()

    def requests():
        while True:
            message = outgoing.get()
            if message is None:
                return
            yield message

    stream = stub.Session(requests())
    threading.Thread(target=lambda: [received.put(m) for m in stream], daemon=True).start()

    def next_of(kind, timeout=10):
        while True:
            message = received.get(timeout=timeout)
            if message.WhichOneof("kind") == kind:
                return message

    outgoing.put(pb.RelayMessage(hello=pb.Hello(machine_id="relay-test", epoch=42,
                                                started_at_unix_ms=1)))
    assert next_of("accepted")
    bridge = pb.Bridge(bridge_id="b1", tunnel_id=tunnel["id"], routes=[""], max_conns=8)
    outgoing.put(pb.RelayMessage(snapshot=pb.BridgeSnapshot(bridges=[bridge], last=True)))
    # The snapshot's tunnels get their records pushed.
    record = next_of("tunnel").tunnel
    assert record.tunnel_id == tunnel["id"]

    def bridges():
        return c.request("GET", f"/api/tunnel/{tunnel['id']}", token=tunnel["token"]).json()
    harness.wait_until(lambda: bridges()["state"] == "online", 10, "the tunnel to be online")
    assert bridges()["bridges"] == 1

    outgoing.put(pb.RelayMessage(attached=pb.BridgeAttached(bridge=pb.Bridge(
        bridge_id="b2", tunnel_id=tunnel["id"], routes=["api"], max_conns=8))))
    harness.wait_until(lambda: bridges()["bridges"] == 2, 10, "the attached delta")
    outgoing.put(pb.RelayMessage(detached=pb.BridgeDetached(
        bridge_id="b1", tunnel_id=tunnel["id"], reason=pb.DETACH_REASON_CLIENT_CLOSE)))
    harness.wait_until(lambda: bridges()["bridges"] == 1, 10, "the detached delta")

    # An API change is pushed to the relay: binding a CSR, then deleting the tunnel.
    csr, _ = harness.make_csr(workdir, [tunnel["hostname"]])
    assert c.request("PUT", f"/api/tunnel/{tunnel['id']}/certificate", body={"csr": csr},
                     token=tunnel["token"]).status == 202
    pushed = next_of("tunnel").tunnel
    assert pushed.tunnel_id == tunnel["id"] and pushed.revision > record.revision
    # The local CA may write the issued certificate between the bind and the delete: the delete
    # then loses the revision race and answers 503 "retry" (docs/api.md), as a client would see.
    def delete():
        response = c.request("DELETE", f"/api/tunnel/{tunnel['id']}", token=tunnel["token"])
        assert response.status in (200, 503), response
        return response.status == 200
    harness.wait_until(delete, 10, "the delete to succeed")
    deleted = next_of("tunnel_deleted").tunnel_deleted
    assert deleted.tunnel_id == tunnel["id"]

    # The relay goes away: its bridges are no longer live.
    other = c.request("POST", "/api/tunnel").json()
    outgoing.put(pb.RelayMessage(attached=pb.BridgeAttached(bridge=pb.Bridge(
        bridge_id="b3", tunnel_id=other["id"], routes=[""], max_conns=8))))
    state = lambda: c.request("GET", f"/api/tunnel/{other['id']}", token=other["token"]).json()
    harness.wait_until(lambda: state()["state"] == "online", 10, "the second tunnel online")
    outgoing.put(None)
    harness.wait_until(lambda: state()["state"] == "offline", 10, "the relay's bridges dropped")
    channel.close()


def test_attach_authorization(controld, control_pb2):
    pb, pb_grpc, _ = control_pb2
    c = controld()
    tunnel = c.request("POST", "/api/tunnel").json()
    stub = pb_grpc.RelayControlStub(grpc.insecure_channel(f"unix:{c.control_socket}"))

    def authorize(token, routes=("",)):
        return stub.AuthorizeAttach(pb.AuthorizeAttachRequest(
            tunnel_id=tunnel["id"], token=token, routes=list(routes)), timeout=10).result

    assert authorize("wrong") == pb.ATTACH_RESULT_BAD_TOKEN
    assert authorize(tunnel["token"]) == pb.ATTACH_RESULT_CERT_NOT_READY
    assert authorize("wrong", [f"r{i}" for i in range(129)]) == pb.ATTACH_RESULT_TOO_MANY_ROUTES
    assert authorize(tunnel["token"], ["Bad Route!"]) == pb.ATTACH_RESULT_INVALID_ROUTE
    fetched = stub.FetchTunnel(pb.FetchTunnelRequest(tunnel_id=tunnel["id"]), timeout=10)
    assert fetched.found and fetched.record.tunnel_id == tunnel["id"]
    assert not stub.FetchTunnel(pb.FetchTunnelRequest(tunnel_id="nope"), timeout=10).found


def test_a_second_controld_cannot_take_the_control_socket(controld, workdir):
    first = controld(name="first")
    second = harness.Controld(workdir / "second", name="second",
                              env={"CONTROL_SOCKET": first.control_socket,
                                   "DATABASE_URL": first.env["DATABASE_URL"]})
    second.start(wait=False)
    assert second.process.wait(30) == 1
    assert "another controld" in second.log_path.read_text()
    assert first.request("GET", "/health").status == 200
