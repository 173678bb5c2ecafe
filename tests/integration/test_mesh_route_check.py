"""Route checks across the region mesh (docs/mesh.md "Route checks"): two machines on one MariaDB,
127.0.0.11 (A) and .12 (B). A bridge holds a tunnel's route on B; an attach for the same route on
A asks B over the internal port (GET /internal/tunnel/<id>/routes, signed) and is refused
route_conflict while B's bridge lives; a route nobody holds attaches without asking anyone; once
B's bridge is gone the same attach on A succeeds. Unsigned or forged checks are refused.
"""
import json
import socket
import time

import pytest

import bridge_client as bc
from test_mesh_link import pair, peers_up


def route_checks(machine, side, result):
    return machine.controld_metrics().get("opentunnel_mesh_route_checks_total", side=side,
                                          result=result)


@pytest.fixture
def two_machines(tmp_path, mysql_database):
    with pair(tmp_path, {"DATABASE_URL": mysql_database}) as machines:
        for machine in machines:
            machine.wait_controld(lambda m: peers_up(m) == 1, "its peer linked")
        yield machines


def attach(machine, tunnel, routes):
    client = bc.BridgeClient(machine.stack.relayd.tls_port, machine.stack.ca_file)
    assert client.upgrade(tunnel["id"]) == 101, client.body
    return client, client.attach(tunnel["token"], routes)


def internal_get(machine, head):
    """A raw request on the machine's internal port (relayd hands it to controld)."""
    with socket.create_connection(machine.internal, timeout=10) as sock:
        sock.sendall(head.encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, json.loads(data.split(b"\r\n\r\n", 1)[1])


def test_an_attach_is_refused_only_while_another_machine_serves_the_route(two_machines, tmp_path):
    a, b = two_machines
    tunnel = bc.create_ready_tunnel(b.stack.relayd, tmp_path)
    held, answer = attach(b, tunnel, ["", "api"])
    assert answer["type"] == "attached", answer
    a.wait_controld(lambda m: m.get("opentunnel_mesh_table_entries") == 1,
                    "machine-b's bridge in its table")

    # The same route on A: B is asked and answers that its live bridge claims it.
    client, answer = attach(a, tunnel, ["api"])
    assert (answer["type"], answer["code"]) == ("attach_error", "route_conflict"), answer
    assert "machine-b" in answer["message"]
    assert client.wait_close()[0] == 1008
    client.close()
    assert route_checks(a, "asked", "conflict") == 1
    assert route_checks(b, "answered", "ok") == 1

    # A route no machine holds: nobody is asked.
    other, answer = attach(a, tunnel, ["other"])
    assert answer["type"] == "attached", answer
    assert route_checks(b, "answered", "ok") == 1

    # B's bridge goes: once A's table has no holder, the route attaches on A.
    held.close()
    a.wait_controld(lambda m: m.get("opentunnel_mesh_table_entries") == 0,
                    "machine-b's bridge gone from its table")
    moved, answer = attach(a, tunnel, ["", "api"])
    assert answer["type"] == "attached", answer
    for client in (other, moved):
        client.close()


def test_unsigned_and_forged_route_checks_are_refused(two_machines):
    a, _ = two_machines
    path = "/internal/tunnel/some-tunnel/routes"
    status, body = internal_get(a, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (status, body["error"]) == (401, "missing x-opentunnel-auth")
    forged = f"OPENTUNNEL-AUTH/2 machine-b machine-a {int(time.time() * 1000)} {'00' * 16} {'ab' * 32}"
    status, body = internal_get(
        a, f"GET {path} HTTP/1.1\r\nx-opentunnel-auth: {forged}\r\n\r\n")
    assert status == 401 and body["error"] != "", body
    status, body = internal_get(a, "GET /internal/other HTTP/1.1\r\n\r\n")
    assert status == 404, body
    refused = route_checks(a, "answered", "refused")
    assert refused == 2, refused


def test_a_tunnel_deleted_on_one_machine_closes_its_bridges_on_the_other(two_machines, tmp_path):
    """Events (docs/mesh.md "Events"): the deletion made through A's API reaches B's controld as
    a tunnel-deleted event; B reads the tunnel again, finds it deleted, and its relayd closes the
    tunnel's bridge there."""
    a, b = two_machines
    tunnel = bc.create_ready_tunnel(a.stack.relayd, tmp_path)
    bridge, answer = attach(b, tunnel, [""])
    assert answer["type"] == "attached", answer
    deleted = a.stack.relayd.api("DELETE", f"/api/tunnel/{tunnel['id']}", token=tunnel["token"])
    assert deleted.status == 200, deleted
    code, _ = bridge.wait_close(timeout=15)
    assert code == 1000, code
    bridge.close()
