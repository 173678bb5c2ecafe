"""Machines holding different routes of one tunnel (docs/mesh.md "Route checks", "Forwarding in
relayd"): three machines on one MariaDB database, 127.0.0.24 (A), .25 (B) and .26 (C), every mesh
link through a fault proxy (mesh_cluster.py), all passing here. One tunnel; a bridge on A claims
its route `web`, a bridge on B its route `api`. A visitor at any machine for web.<id> reaches A's
bridge and for api.<id> B's (curl verified against the local CA); nobody serves the bare name. A
third attach claiming `web` on B is refused route_conflict while A's bridge lives (B asks A), and
accepted once A's bridge has detached, after which web.<id> reaches B's new bridge everywhere.
"""
import time

import pytest

import bridge_client as bc
import mesh_cluster as mc

ADDRESSES = {"machine-a": "127.0.0.24", "machine-b": "127.0.0.25", "machine-c": "127.0.0.26"}


@pytest.fixture
def machines(tmp_path, mysql_database):
    with mc.cluster(tmp_path, mysql_database, ADDRESSES) as linked:
        yield linked


def value(metrics, name, **labels):
    try:
        return metrics.get(name, **labels)
    except KeyError:
        return 0


def wait_copy(machine, routes, what):
    """Until the machine's relayd holds `routes` (tunnel, route) holders of other machines."""
    machine.stack.relayd.wait_metric(
        lambda m: m.get("opentunnel_mesh_table_routes") == routes, timeout=20,
        what=f"{machine.name}: {what}")


def visitors(machine, outcome):
    return value(machine.stack.relayd.metrics(), "opentunnel_visitor_connections_total",
                 outcome=outcome)


def route_checks(machine, side, result):
    return value(machine.controld_metrics(), "opentunnel_mesh_route_checks_total", side=side,
                 result=result)


def assert_reached(machine, hostname, ca_file, name):
    result = mc.visit(machine, hostname, ca_file)
    assert result.returncode == 0, f"{machine.name} {hostname}: {result.stderr}"
    assert result.stdout == f"hello from {name}\n", (machine.name, hostname, result.stdout)


def test_two_routes_of_one_tunnel_on_two_machines(machines, tmp_path):
    a, b, c = machines
    ca_file = a.stack.ca_file
    tunnel = bc.create_ready_tunnel(a.stack.relayd, tmp_path)
    web = mc.ServingBridge(a, tunnel, ["web"], "web-on-a")
    api = mc.ServingBridge(b, tunnel, ["api"], "api-on-b")
    bridges = [web, api]
    try:
        assert web.attached and api.attached, (web.answer, api.answer)
        # Each relayd's copy names the other machines' holders: C both, A B's api, B A's web.
        wait_copy(c, 2, "web on A and api on B")
        wait_copy(a, 1, "api on B")
        wait_copy(b, 1, "web on A")

        host = tunnel["hostname"]
        for machine in (a, b, c):
            assert_reached(machine, f"web.{host}", ca_file, "web-on-a")
            assert_reached(machine, f"api.{host}", ca_file, "api-on-b")
        assert web.served == ["web"] * 3 and api.served == ["api"] * 3
        # Each route served at its holder and forwarded there from the two other machines.
        assert (visitors(a, "served_local"), visitors(a, "forwarded_in"),
                visitors(a, "forwarded_out")) == (1, 2, 1)
        assert (visitors(b, "served_local"), visitors(b, "forwarded_in"),
                visitors(b, "forwarded_out")) == (1, 2, 1)
        assert (visitors(c, "forwarded_out"), visitors(c, "served_local")) == (2, 0)
        # No machine's bridge claims the bare name: refused at once, not forwarded.
        started = time.monotonic()
        result = mc.visit(c, host, ca_file, max_time="10")
        assert result.returncode not in (0, 28), result  # 28: curl's own timeout
        assert time.monotonic() - started < 5.0
        assert visitors(c, "forwarded_out") == 2

        # `web` on B too: B's controld asks A, whose live bridge claims it.
        third = mc.ServingBridge(b, tunnel, ["web"], "web-on-b")
        bridges.append(third)
        assert (third.answer["type"], third.answer.get("code")) == (
            "attach_error", "route_conflict"), third.answer
        assert "machine-a" in third.answer["message"], third.answer
        assert route_checks(b, "asked", "conflict") == 1
        assert route_checks(a, "answered", "ok") == 1

        # A's bridge goes; once B's table has no holder of `web`, B takes the route.
        web.close()
        b.wait_controld(
            lambda m: value(m, "opentunnel_mesh_table_bridges", machine="machine-a") == 0,
            "machine-a's bridge gone from its table")
        moved = mc.ServingBridge(b, tunnel, ["web"], "web-on-b")
        bridges.append(moved)
        assert moved.attached, moved.answer
        wait_copy(a, 2, "web and api on B")
        wait_copy(c, 2, "web and api on B")
        for machine in (a, b, c):
            assert_reached(machine, f"web.{host}", ca_file, "web-on-b")
            assert_reached(machine, f"api.{host}", ca_file, "api-on-b")
        assert moved.served == ["web"] * 3
        assert web.served == ["web"] * 3  # nothing more reached the detached bridge
    finally:
        for bridge in bridges:
            bridge.close()
