"""POST /api/admin/stats on two linked machines (docs/api.md "Admin", docs/mesh.md "The cluster
view"), and the mesh's metrics against the reference's list (docs/mesh.md "Metrics").

- Each machine answers with the database's counts, its own bridges and its view of the mesh, and
  both views name the same machines with the same bridge counts. Without ADMIN_TOKEN the route
  does not exist; a missing or wrong token is refused.
- Each machine's stats carry its relayd's figures (sent with Counters on the control session): a
  visitor at B for a tunnel attached on A counts forwarded_out and a mesh lookup hit on B and
  forwarded_in on A, and a visitor held open shows as open on both.
- Every opentunnel_mesh_* and opentunnel_cluster_* metric of the reference's list is exported by
  the daemon that owns it, with its label names and values; no label names a tunnel; both
  daemons' expositions pass `promtool check metrics`; every mesh metric is named in docs/.

Machines on 127.0.0.51 and .52 (this file's addresses), each with its own SQLite database: the
tunnel's certificate is from A's local CA, which the visitors at B verify.
"""
import contextlib
import json

import pytest

import harness
import relay_harness as rh
from test_mesh_link import Machine, peers_up
from test_tunnel_metrics import documented_names, families, promtool_problems, scrape

ADMIN = "an-operator-token-for-the-admin-stats"
ADDRESS_A = "127.0.0.51"
ADDRESS_B = "127.0.0.52"


@contextlib.contextmanager
def linked(tmp_path, admin_b=ADMIN):
    """machine-a (region ams, ADMIN_TOKEN) and machine-b (region fra, `admin_b`), peering."""
    port_a = harness.free_port(ADDRESS_A)
    port_b = harness.free_port(ADDRESS_B)
    machines = []
    try:
        machines.append(Machine(tmp_path, "machine-a", ADDRESS_A, port_a, f"{ADDRESS_B}:{port_b}",
                                controld_env={"REGION": "ams", "ADMIN_TOKEN": ADMIN}))
        env_b = {"REGION": "fra", **({"ADMIN_TOKEN": admin_b} if admin_b else {})}
        machines.append(Machine(tmp_path, "machine-b", ADDRESS_B, port_b, f"{ADDRESS_A}:{port_a}",
                                controld_env=env_b))
        for machine in machines:
            machine.wait_controld(lambda m: peers_up(m) == 1, "its peer linked")
        yield machines
    finally:
        for machine in machines:
            machine.stack.close()


def stats(machine, token=ADMIN):
    response = machine.stack.relayd.api("POST", "/api/admin/stats", token=token)
    return response.status, (json.loads(response.body) if response.body else None)


def wait_relayd(machine, check, what, timeout=15):
    """The machine's stats once its relayd's figures satisfy `check`."""
    def figures():
        status, body = stats(machine)
        assert status == 200, body
        relayd = body["relayd"]
        return relayd if relayd is not None and check(relayd) else None
    return harness.wait_until(figures, timeout, f"{machine.name}: {what}")


def wait_routes(machine, count, what):
    machine.stack.relayd.wait_metric(
        lambda m: m.get("opentunnel_mesh_table_routes") == count, timeout=20, what=what)


def test_admin_stats_show_the_cluster_as_the_answering_machine_sees_it(tmp_path):
    with linked(tmp_path, admin_b=None) as (a, b):
        origin = b.stack.origin()
        b.stack.tunnel(origin.port, links=2)

        def cluster_settled():
            status, body = stats(a)
            assert status == 200, body
            cluster = body["cluster"]
            rows = {row["machine"]: row for row in cluster["machines"]}
            if cluster["complete"] and rows.get("machine-b", {}).get("bridges") == 2:
                return body
            return None

        body = harness.wait_until(cluster_settled, 30, "machine-a's view of machine-b's bridges")
        cluster = body["cluster"]
        assert [row["machine"] for row in cluster["machines"]] == ["machine-a", "machine-b"]
        own, peer = cluster["machines"]
        assert own["self"] is True and own["region"] == "ams" and own["bridges"] == 0
        assert peer["self"] is False and peer["region"] == "fra"
        assert (peer["bridges"], peer["tunnels"], peer["routes"]) == (2, 1, 1)
        assert peer["address"].startswith(ADDRESS_B + ":")
        assert cluster["bridges"] == 2
        assert cluster["bridges_by_region"] == {"ams": 0, "fra": 2}
        assert cluster["peers_up"] == 1 and cluster["peers"][0]["machine"] == "machine-b"
        # The top-level counts are this machine's: its own database (no tunnel), no bridge here.
        assert (body["tunnels"], body["bridges"], body["relays"]) == (0, 0, 1)
        assert body["machine"]["id"] == "machine-a" and body["machine"]["region"] == "ams"
        assert body["machine"]["fds"] > 0 and body["machine"]["threads"] > 0

        # No token, a wrong one: 401 with the API's error shape. B has no ADMIN_TOKEN: no route.
        for token in (None, "not-the-admin-token"):
            status, error = stats(a, token)
            assert status == 401 and error["_tag"] == "UnauthorizedError"
        status, error = stats(b)
        assert status == 404 and error["_tag"] == "NotFoundError"


def test_admin_stats_carry_relayd_forwarding_figures_and_open_visitors(tmp_path):
    with linked(tmp_path) as (a, b):
        # relayd reports its figures as soon as its session is up, before any visitor.
        idle = wait_relayd(b, lambda r: True, "relayd's first figures")
        assert idle["visitor_connections"]["forwarded_out"] == 0
        assert idle["forward_failures"] == {"refused": 0, "connect": 0, "timeout": 0, "io": 0}
        assert idle["visitor_connections_open"] == 0

        origin = a.stack.origin("origin-a")
        tunnel = a.stack.tunnel(origin.port, links=1)
        wait_routes(b, 1, "the tunnel's route in B's relayd copy")
        url = f"https://{tunnel.hostname}:{b.stack.relayd.tls_port}/hello"
        result = rh.curl_url(url, a.stack.ca_file, "--max-time", "15", timeout=30)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "hello from origin-a\n"

        at_b = wait_relayd(b, lambda r: r["visitor_connections"]["forwarded_out"] >= 1,
                           "forwarded_out counted")
        assert at_b["mesh_lookups"]["hit"] >= 1
        assert at_b["visitor_connections"]["served_local"] == 0
        assert at_b["bridges_attached"] == 0
        at_a = wait_relayd(a, lambda r: r["visitor_connections"]["forwarded_in"] >= 1,
                           "forwarded_in counted")
        assert at_a["bridges_attached"] == 1
        assert at_a["visitor_connections"]["forwarded_out"] == 0
        # The figures are relayd's own counters: /metrics agrees.
        assert b.stack.relayd.metrics().visitors("forwarded_out") == \
            at_b["visitor_connections"]["forwarded_out"]

        # A visitor held open through B: open on B (the forward) and on A (the bridge's stream).
        held = rh.tls_connect(b.stack.relayd.tls_port, tunnel.hostname, a.stack.ca_file)
        try:
            for machine in (a, b):
                wait_relayd(machine, lambda r: r["visitor_connections_open"] == 1,
                            "the held visitor open")
        finally:
            held.close()
        for machine in (a, b):
            wait_relayd(machine, lambda r: r["visitor_connections_open"] == 0,
                        "the visitor closed")


# The reference's mesh and forwarding metrics: name -> (daemon, type, {label: values}).
MESH_SPEC = {
    "opentunnel_cluster_forward_failures_total": (
        "relayd", "counter", {"reason": {"refused", "connect", "timeout", "io"}}),
    "opentunnel_mesh_lookups_total": ("relayd", "counter", {"result": {"hit", "miss"}}),
    "opentunnel_mesh_peers": ("controld", "gauge",
                              {"state": {"up", "connecting", "unreachable"}}),
    "opentunnel_mesh_links_total": ("controld", "counter", {"event": {"up", "down"}}),
    "opentunnel_mesh_table_bridges": ("controld", "gauge",
                                      {"machine": {"machine-a", "machine-b"}}),
    "opentunnel_mesh_propagation_seconds": (
        "controld", "histogram", {"kind": {"attached", "detached", "event"}}),
    "opentunnel_mesh_snapshot_bridges": ("controld", "histogram", {}),
    "opentunnel_mesh_snapshot_duration_seconds": ("controld", "histogram", {}),
}
# Label names a mesh metric may carry: fixed sets, or the machine (never a tunnel).
MESH_LABELS = {"reason", "result", "state", "event", "machine", "kind", "direction", "type",
               "side"}


def test_mesh_metrics_match_the_reference_list_and_pass_promtool(tmp_path):
    with linked(tmp_path) as (a, b):
        origin = a.stack.origin("origin-a")
        tunnel = a.stack.tunnel(origin.port, links=1)
        # B applied A's attach: a propagation observed; both took a snapshot when linking.
        b.wait_controld(lambda m: m.get("opentunnel_mesh_table_bridges", machine="machine-a") == 1,
                        "A's bridge in B's table")
        texts = {}
        for machine in (a, b):
            texts[(machine.name, "controld")] = scrape(machine.metrics_port)
            texts[(machine.name, "relayd")] = scrape(machine.stack.relayd.metrics_port)

        problems = []
        for (name, daemon), text in texts.items():
            exported = families(text)
            for metric, (owner, kind, labels) in MESH_SPEC.items():
                if owner != daemon:
                    continue
                if metric not in exported:
                    problems.append(f"{name} {daemon}: {metric} is missing")
                    continue
                got_kind, got_labels = exported[metric]
                if got_kind != kind:
                    problems.append(f"{name} {daemon}: {metric} is a {got_kind}, not a {kind}")
                if set(got_labels) != set(labels):
                    problems.append(f"{name} {daemon}: {metric} has labels {sorted(got_labels)}")
                for label, values in labels.items():
                    missing = values - got_labels.get(label, set())
                    if missing:
                        problems.append(f"{name} {daemon}: {metric}{{{label}}} lacks {missing}")
            if daemon == "relayd":
                outcomes = exported["opentunnel_visitor_connections_total"][1]["outcome"]
                if not {"forwarded_out", "forwarded_in"} <= outcomes:
                    problems.append(f"{name} relayd: no forwarded_out / forwarded_in outcome")
            for metric, (_, label_values) in exported.items():
                if not metric.startswith(("opentunnel_mesh_", "opentunnel_cluster_")):
                    continue
                if not set(label_values) <= MESH_LABELS:
                    problems.append(f"{name} {daemon}: {metric} has labels "
                                    f"{sorted(label_values)}")
                if metric not in documented_names():
                    problems.append(f"{name} {daemon}: {metric} is named nowhere in docs/")
            # No series names the tunnel (ID or hostname).
            if tunnel.hostname.split(".")[0] in text:
                problems.append(f"{name} {daemon}: a series names the tunnel")
            code, output = promtool_problems(text)
            if code != 0:
                problems.append(f"{name} {daemon}: promtool check metrics:\n{output}")
        assert not problems, "\n".join(problems)

        # The histograms are fed: B observed A's attach propagate, and each side a snapshot.
        at_b = b.controld_metrics()
        assert at_b.get("opentunnel_mesh_propagation_seconds_count", kind="attached") >= 1
        for machine in (a, b):
            metrics = machine.controld_metrics()
            assert metrics.get("opentunnel_mesh_snapshot_bridges_count") >= 1
            assert metrics.get("opentunnel_mesh_snapshot_duration_seconds_count") >= 1
            assert metrics.get("opentunnel_mesh_links_total", event="up") >= 1
