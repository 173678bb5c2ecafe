"""Two machines, each a controld + relayd pair on its own loopback address (127.0.0.11 and .12),
linked by the region mesh (docs/mesh.md): controld dials its peer's internal address, the peer's
relayd sorts the connection by its first line and hands it to its controld
(MESH_HANDOFF_SOCKET), the two controlds prove INTERNAL_TOKEN to each other and exchange their
bridges. A bridge attached on one machine shows in the other's table, and leaves it when it
closes.

Each machine has its own SQLite database here: links and the bridge table need no shared one
(the tests that forward visitors and share tunnels use one MariaDB).
"""
import contextlib
import http.client

import pytest

import harness
import relay_harness as rh

TOKEN = "a-mesh-secret-of-at-least-32-bytes-for-tests"
FAST = {"MESH_PING_MS": "100", "MESH_DEAD_MS": "500"}


class ControldMetrics:
    """controld's /metrics for a machine with `name` and `metrics_port` (METRICS_LISTEN)."""

    def controld_metrics(self):
        connection = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            assert response.status == 200
            return rh.Metrics(rh.parse_metrics(response.read().decode()))
        finally:
            connection.close()

    def wait_controld(self, predicate, what, timeout=20.0):
        def check():
            metrics = self.controld_metrics()
            return metrics if predicate(metrics) else None
        return harness.wait_until(check, timeout, f"{self.name}: {what}")


class Machine(ControldMetrics):
    def __init__(self, workdir, name, address, port, peer, token=TOKEN, controld_env=None,
                 relayd_env=None):
        self.name = name
        self.metrics_port = harness.free_port()
        internal = f"{address}:{port}"
        self.internal = (address, port)  # the internal listener, for raw requests
        common = {"INTERNAL_LISTEN": internal, "INTERNAL_TOKEN": token, "MACHINE_ID": name}
        self.stack = rh.Stack(
            workdir / name,
            controld_env={**common, **FAST, "MESH_PEERS": peer,
                          "METRICS_LISTEN": f"127.0.0.1:{self.metrics_port}",
                          **(controld_env or {})},
            relayd_env={**common, "SHUTDOWN_DRAIN_MS": "200", **(relayd_env or {})})



@contextlib.contextmanager
def pair(tmp_path, controld_env=None):
    """machine-a on 127.0.0.11 and machine-b on .12, each peering with the other; both closed
    on exit."""
    port_a = harness.free_port("127.0.0.11")
    port_b = harness.free_port("127.0.0.12")
    machines = []
    try:
        machines.append(Machine(tmp_path, "machine-a", "127.0.0.11", port_a,
                                f"127.0.0.12:{port_b}", controld_env=controld_env))
        machines.append(Machine(tmp_path, "machine-b", "127.0.0.12", port_b,
                                f"127.0.0.11:{port_a}", controld_env=controld_env))
        yield machines
    finally:
        for machine in machines:
            machine.stack.close()


@contextlib.contextmanager
def linked_mesh(tmp_path, addresses, controld_env=None, relayd_env=None):
    """Machines (name -> loopback address), each peering with all the others; yields them once
    every one has linked all its peers; all closed on exit."""
    ports = {name: harness.free_port(address) for name, address in addresses.items()}
    machines = []
    try:
        for name, address in addresses.items():
            peers = ",".join(f"{addresses[other]}:{ports[other]}" for other in addresses
                             if other != name)
            machines.append(Machine(tmp_path, name, address, ports[name], peers,
                                    controld_env=controld_env, relayd_env=relayd_env))
        for machine in machines:
            machine.wait_controld(lambda m: peers_up(m) == len(addresses) - 1,
                                  "every peer linked")
        yield machines
    finally:
        for machine in machines:
            machine.stack.close()


@pytest.fixture
def two_machines(tmp_path):
    with pair(tmp_path) as machines:
        yield machines


def peers_up(metrics):
    return metrics.get("opentunnel_mesh_peers", state="up")


def test_two_machines_link_through_their_relayds_and_share_their_bridges(two_machines):
    a, b = two_machines
    for machine in (a, b):
        machine.wait_controld(lambda m: peers_up(m) == 1, "its peer linked")
    # One link for the pair: inbound on one machine, so that machine's relayd handed it over.
    handed = sum(m.stack.relayd.metrics().get("opentunnel_mesh_internal_connections_total",
                                              kind="mesh") for m in (a, b))
    assert handed >= 1

    origin = b.stack.origin()
    tunnel = b.stack.tunnel(origin.port, links=2)
    a.wait_controld(lambda m: m.get("opentunnel_mesh_table_entries") == 2,
                    "machine-b's two bridges in its table")
    assert b.controld_metrics().get("opentunnel_mesh_local_bridges") == 2
    # Bridges per machine holding them, this machine included (the spec's gauge).
    a.wait_controld(lambda m: m.get("opentunnel_mesh_table_bridges", machine="machine-b") == 2,
                    "machine-b's two bridges by machine")
    assert a.controld_metrics().get("opentunnel_mesh_table_bridges", machine="machine-a") == 0
    # The per-machine gauges are refreshed on the mesh's own schedule (MeshNode::updateGauges),
    # not with opentunnel_mesh_local_bridges: wait for them as for the peer's view.
    b.wait_controld(lambda m: m.get("opentunnel_mesh_table_bridges", machine="machine-b") == 2,
                    "its own two bridges by machine")

    tunnel.process.terminate()
    tunnel.process.wait(timeout=10)
    a.wait_controld(lambda m: m.get("opentunnel_mesh_table_entries") == 0,
                    "machine-b's bridges gone from its table")


def test_a_machine_without_the_secret_never_links(tmp_path):
    port_a = harness.free_port("127.0.0.11")
    port_b = harness.free_port("127.0.0.12")
    a = Machine(tmp_path, "machine-a", "127.0.0.11", port_a, f"127.0.0.12:{port_b}")
    try:
        other = "another-secret-that-is-also-32-bytes-long!!"
        b = Machine(tmp_path, "machine-b", "127.0.0.12", port_b, f"127.0.0.11:{port_a}",
                    token=other)
        try:
            # Both keep dialing and both refuse: the handshake fails on each side.
            for machine in (a, b):
                machine.wait_controld(
                    lambda m: sum(v for (name, _), v in m.values.items()
                                  if name == "opentunnel_mesh_link_errors_total") >= 2,
                    "refused handshakes")
                assert peers_up(machine.controld_metrics()) == 0
            for machine in (a, b):
                text = (machine.stack.controld.log_path.read_text(errors="replace")
                        + machine.stack.relayd.log_text())
                assert TOKEN not in text and other not in text
        finally:
            b.stack.close()
    finally:
        a.stack.close()
