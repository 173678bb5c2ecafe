"""A visitor at one machine reaches a tunnel attached on the other (docs/mesh.md "The
control-session feed"): machine A's controld announces the bridge to B's controld over the mesh
link, B's controld feeds it to B's relayd over the control session (snapshot, then deltas), and
B's relayd forwards the visitor to A's relayd, which routes it to the bridge. The detach reaches
B's relayd the same way, and B's relayd keeps forwarding by its copy while B's controld is gone.

Two machines as in test_mesh_link.py (controld + relayd on 127.0.0.11 and .12, each its own
SQLite: B knows nothing of the tunnel but what the mesh tells it). Visitors are curl, resolving
the tunnel's name to B's relayd and verifying the certificate with A's local CA.
"""
import pytest

import relay_harness as rh
from test_mesh_link import pair, peers_up

# A held peer must answer the liveness question every MESH_DEAD_MS: 1.5 s, which a loaded 2-core
# box does not miss (500 ms sometimes is).
HOLD = {"MESH_DEAD_MS": "1500", "MESH_HOLD_MS": "60000"}


@pytest.fixture
def two_machines(tmp_path):
    with pair(tmp_path, HOLD) as machines:
        yield machines


def visit(machine, tunnel, ca_file):
    url = f"https://{tunnel.hostname}:{machine.stack.relayd.tls_port}/hello"
    return rh.curl_url(url, ca_file, "--max-time", "15", timeout=30)


def visitors(machine, outcome):
    return machine.stack.relayd.metrics().visitors(outcome)


def table_routes(machine):
    return machine.stack.relayd.metrics().get("opentunnel_mesh_table_routes")


def wait_routes(machine, count, what):
    machine.stack.relayd.wait_metric(
        lambda m: m.get("opentunnel_mesh_table_routes") == count, timeout=20, what=what)


def test_a_visitor_at_b_reaches_a_bridge_on_a_until_it_detaches_even_without_b_controld(
        two_machines):  # noqa: F811
    a, b = two_machines
    for machine in (a, b):
        machine.wait_controld(lambda m: peers_up(m) == 1, "its peer linked")
    # Each relayd got its controld's snapshot when its session started.
    for machine in (a, b):
        machine.stack.relayd.wait_log("mesh table snapshot applied")
    ca_file = a.stack.ca_file

    # A bridge on A: B's relayd learns the route through its controld, and forwards to A.
    origin = a.stack.origin("origin-a")
    first = a.stack.tunnel(origin.port)
    wait_routes(b, 1, "the tunnel's route in B's relayd copy")
    result = visit(b, first, ca_file)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello from origin-a\n"
    assert visitors(b, "forwarded_out") == 1
    assert visitors(a, "forwarded_in") == 1
    assert visitors(b, "served_local") == 0

    # The bridge leaves A: the detach reaches B's relayd, whose visitors are now unknown there.
    first.process.terminate()
    first.process.wait(timeout=10)
    wait_routes(b, 0, "the detach in B's relayd copy")
    result = visit(b, first, ca_file)
    assert result.returncode != 0
    assert visitors(b, "rejected_unknown_tunnel") == 1
    assert visitors(b, "forwarded_out") == 1

    # Another bridge on A, then B's controld is killed: B's relayd keeps its copy and forwards by
    # it. A's controld sees B's link end and holds B (B's relayd answers the signed liveness
    # question), so A's relayd goes on believing B's forwards (docs/mesh.md "A controld restart
    # drops no tunnel").
    second = a.stack.tunnel(origin.port)
    wait_routes(b, 1, "the second tunnel in B's relayd copy")
    b.stack.controld.process.kill()
    b.stack.controld.process.wait(timeout=10)
    b.stack.relayd.wait_log("control session down")
    a.wait_controld(lambda m: m.get("opentunnel_mesh_held_machines") == 1, "machine-b held")
    hits = b.stack.relayd.metrics().get("opentunnel_mesh_lookups_total", result="hit")
    for count in (2, 3):
        result = visit(b, second, ca_file)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "hello from origin-a\n"
        assert visitors(b, "forwarded_out") == count
        assert visitors(a, "forwarded_in") == count
    assert table_routes(b) == 1
    assert b.stack.relayd.metrics().get("opentunnel_mesh_lookups_total", result="hit") == hits + 2
    assert a.controld_metrics().get("opentunnel_mesh_held_machines") == 1

    # Deltas after the first snapshot: one snapshot per relayd session, and no gap.
    for machine in (a, b):
        metrics = machine.stack.relayd.metrics()
        sessions = machine.stack.relayd.log_text().count("control session up")
        assert metrics.get("opentunnel_mesh_table_updates_total", kind="snapshot") == sessions
        assert metrics.get("opentunnel_mesh_table_updates_total", kind="gap") == 0
    assert b.stack.relayd.metrics().get("opentunnel_mesh_table_updates_total", kind="delta") >= 2
