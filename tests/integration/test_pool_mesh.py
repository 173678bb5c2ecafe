"""Issue 16, the sticky origin across the mesh (docs/pools-mesh.md): two machines (controld +
relayd on 127.0.23.11 and .12, one MariaDB database), one tunnel whose origin "a" attaches only to
machine 1 and origin "b" only to machine 2 (raw bridges answering each visitor with their origin's
name). Visitors from 200 source addresses (127.23.N.M) are sent once to machine 1 and once to
machine 2: each address reaches the same origin through both machines, that origin is the
documented hash over {a, b} (computed here independently), and the machine a visitor lands on
forwards it only when its origin is on the other machine."""
import concurrent.futures

import pytest

import bridge_client as bc
from test_mesh_link import linked_mesh
from pool_harness import expected_origin
from test_pool_choice import OriginBridges, client_hello, visit

ADDRESSES = {"machine-1": "127.0.23.11", "machine-2": "127.0.23.12"}
HOLD = {"MESH_DEAD_MS": "1500", "MESH_HOLD_MS": "60000"}
VISITORS = 200


def source(i):
    """200 distinct visitor addresses, 127.23.N.M."""
    return f"127.23.{i // 100}.{i % 100 + 1}"


@pytest.fixture
def two_machines(tmp_path, mysql_database):
    with linked_mesh(tmp_path, ADDRESSES, {**HOLD, "DATABASE_URL": mysql_database}) as machines:
        for machine in machines:
            machine.stack.relayd.wait_log("mesh table snapshot applied")
        yield machines


def visit_all(port, hello):
    """Which origin answers each of the 200 addresses at this public port."""
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        return dict(pool.map(lambda i: (i, visit(port, source(i), hello)), range(VISITORS)))


def visitors(machine, outcome):
    return machine.stack.relayd.metrics().visitors(outcome)


def test_a_visitor_gets_the_same_origin_whichever_machine_it_lands_on(two_machines, tmp_path):
    one, two = two_machines
    tunnel = bc.create_ready_tunnel(one.stack.relayd, tmp_path)
    hello = client_hello(tunnel["hostname"])
    pools = [OriginBridges(one.stack.relayd, tunnel, "a"),
             OriginBridges(two.stack.relayd, tunnel, "b")]
    try:
        # Each relayd's copy of the mesh table names the other machine's origin.
        for machine in (one, two):
            machine.stack.relayd.wait_metric(
                lambda m: m.get("opentunnel_mesh_table_routes") == 1, timeout=20,
                what="the other machine's origin in its relayd copy")
        via_one = visit_all(one.stack.relayd.tls_port, hello)
        via_two = visit_all(two.stack.relayd.tls_port, hello)
        want = {i: expected_origin(source(i), ("a", "b")) for i in range(VISITORS)}
        assert via_one == want
        assert via_two == want
        on_a = sum(1 for origin in want.values() if origin == "a")
        assert 60 <= on_a <= 140, on_a  # both origins take a share
        # Machine 1 serves a's visitors and forwards b's; machine 2 the mirror.
        assert visitors(one, "served_local") == on_a
        assert visitors(two, "served_local") == VISITORS - on_a
        assert visitors(one, "forwarded_out") == VISITORS - on_a
        assert visitors(two, "forwarded_out") == on_a
        assert visitors(one, "forwarded_in") == on_a
        assert visitors(two, "forwarded_in") == VISITORS - on_a
        # The status API on either machine shows both origins: its own links, and the other
        # machine's from the mesh table, which carries each bridge's origin.
        links = len(pools[0].clients)
        for machine, here, there, peer in ((one, "a", "b", "machine-2"),
                                           (two, "b", "a", "machine-1")):
            answer = machine.stack.relayd.api("GET", f"/api/tunnel/{tunnel['id']}/status",
                                              token=tunnel["token"])
            assert answer.status == 200, answer
            status = answer.json()
            assert status["summary"] == f"healthy ({2 * links} links up)", status
            assert status["peerLinks"] == links, status
            origins = {o["name"]: o for o in status["origins"]}
            assert (origins[here]["links"], origins[here]["peerLinks"]) == (links, 0), status
            assert (origins[there]["links"], origins[there]["peerLinks"]) == (0, links), status
            assert origins[there]["peerMachines"] == [peer], status
    finally:
        for pool in pools:
            pool.kill()
