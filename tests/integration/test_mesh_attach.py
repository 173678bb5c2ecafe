"""Forwarding right after an attach (docs/mesh.md "Announcing this machine's bridges"): a visitor
that reaches machine B the moment a bridge on machine A is told `attached` is forwarded to it,
not refused because B's relayd has not heard of the bridge yet. The visitor here is not curl (a
process start would hide the race) but a TLS handshake from this process, begun as soon as the
bridge reads `attached`. Two machines (127.0.0.27, .28) on one MariaDB, every link through a
fault proxy as in test_mesh_routes.py.
"""
import socket
import ssl
import time

import pytest

import bridge_client as bc
import mesh_cluster as mc

ADDRESSES = {"machine-a": "127.0.0.27", "machine-b": "127.0.0.28"}
ROUNDS = 20


@pytest.fixture
def machines(tmp_path, mysql_database):
    with mc.cluster(tmp_path, mysql_database, ADDRESSES) as linked:
        yield linked


def visit_now(machine, hostname, ca_file):
    """GET /hello through the machine's public port; the answer's body, or the error."""
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        with socket.create_connection(("127.0.0.1", machine.stack.relayd.tls_port),
                                      timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname=hostname) as tls:
                tls.sendall(f"GET /hello HTTP/1.1\r\nHost: {hostname}\r\n"
                            "Connection: close\r\n\r\n".encode())
                answer = b""
                while chunk := tls.recv(4096):
                    answer += chunk
        return answer.decode(errors="replace").split("\r\n\r\n", 1)[-1]
    except (OSError, ssl.SSLError) as error:
        return f"error: {error!r}"


def routes_in_copy(machine):
    return machine.stack.relayd.metrics().get("opentunnel_mesh_table_routes")


def test_a_visitor_at_b_right_after_the_attach_on_a_is_forwarded(machines, tmp_path):
    a, b = machines
    tunnel = bc.create_ready_tunnel(a.stack.relayd, tmp_path)
    host = f"web.{tunnel['hostname']}"
    answers = []
    for round_ in range(ROUNDS):
        bridge = mc.ServingBridge(a, tunnel, ["web"], f"bridge-{round_}")
        try:
            assert bridge.attached, bridge.answer
            answers.append(visit_now(b, host, a.stack.ca_file))
        finally:
            bridge.close()
        # The detach reaches B's copy before the next round's attach.
        deadline = time.monotonic() + 20
        while routes_in_copy(b) != 0:
            assert time.monotonic() < deadline, "B's copy still holds the detached bridge"
            time.sleep(0.01)
    expected = [f"hello from bridge-{round_}\n" for round_ in range(ROUNDS)]
    assert answers == expected, answers
