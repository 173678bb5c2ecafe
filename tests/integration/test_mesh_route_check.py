"""Route checks across the region mesh (docs/mesh.md "Route checks"): two machines on one MariaDB,
127.0.0.11 (A) and .12 (B). A bridge holds a tunnel's route on B; an attach for the same route on
A asks B over the internal port (GET /internal/tunnel/<id>/routes, signed) and is refused
route_conflict while B's bridge lives; a route nobody holds attaches without asking anyone; once
B's bridge is gone the same attach on A succeeds. Unsigned or forged checks are refused.
"""
import http.client
import json
import socket
import time

import pytest

import bridge_client as bc
import harness
import relay_harness as rh

TOKEN = "a-mesh-secret-of-at-least-32-bytes-for-tests"


class Machine:
    def __init__(self, workdir, name, address, port, peer, database_url):
        self.name = name
        self.address = address
        self.internal_port = port
        self.metrics_port = harness.free_port()
        common = {"INTERNAL_LISTEN": f"{address}:{port}", "INTERNAL_TOKEN": TOKEN,
                  "MACHINE_ID": name}
        self.stack = rh.Stack(
            workdir / name,
            controld_env={**common, "MESH_PEERS": peer, "MESH_PING_MS": "100",
                          "MESH_DEAD_MS": "500", "DATABASE_URL": database_url,
                          "METRICS_LISTEN": f"127.0.0.1:{self.metrics_port}"},
            relayd_env={**common, "SHUTDOWN_DRAIN_MS": "200"})

    def controld_metrics(self):
        connection = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            connection.request("GET", "/metrics")
            return rh.Metrics(rh.parse_metrics(connection.getresponse().read().decode()))
        finally:
            connection.close()

    def wait_controld(self, predicate, what, timeout=20.0):
        def check():
            metrics = self.controld_metrics()
            return metrics if predicate(metrics) else None
        return harness.wait_until(check, timeout, f"{self.name}: {what}")

    def route_checks(self, side, result):
        return self.controld_metrics().get("opentunnel_mesh_route_checks_total", side=side,
                                           result=result)


@pytest.fixture
def two_machines(tmp_path, mysql_database):
    port_a = harness.free_port("127.0.0.11")
    port_b = harness.free_port("127.0.0.12")
    machines = []
    try:
        machines.append(Machine(tmp_path, "machine-a", "127.0.0.11", port_a,
                                f"127.0.0.12:{port_b}", mysql_database))
        machines.append(Machine(tmp_path, "machine-b", "127.0.0.12", port_b,
                                f"127.0.0.11:{port_a}", mysql_database))
        for machine in machines:
            machine.wait_controld(lambda m: m.get("opentunnel_mesh_peers", state="up") == 1,
                                  "its peer linked")
        yield machines
    finally:
        for machine in machines:
            machine.stack.close()


def attach(machine, tunnel, routes):
    client = bc.BridgeClient(machine.stack.relayd.tls_port, machine.stack.ca_file)
    assert client.upgrade(tunnel["id"]) == 101, client.body
    return client, client.attach(tunnel["token"], routes)


def internal_get(machine, head):
    """A raw request on the machine's internal port (relayd hands it to controld)."""
    with socket.create_connection((machine.address, machine.internal_port), timeout=10) as sock:
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
    assert a.route_checks("asked", "conflict") == 1
    assert b.route_checks("answered", "ok") == 1

    # A route no machine holds: nobody is asked.
    other, answer = attach(a, tunnel, ["other"])
    assert answer["type"] == "attached", answer
    assert b.route_checks("answered", "ok") == 1

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
    refused = a.route_checks("answered", "refused")
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
