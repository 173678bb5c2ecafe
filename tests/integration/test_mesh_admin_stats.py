"""POST /api/admin/stats on two linked machines (docs/api.md "Admin", docs/mesh.md "The cluster
view"): each machine answers with the database's counts, its own bridges and its view of the mesh,
and both views name the same machines with the same bridge counts. Without ADMIN_TOKEN the route
does not exist; a missing or wrong token is refused.
"""
import json

import pytest

import harness
import relay_harness as rh

TOKEN = "a-mesh-secret-of-at-least-32-bytes-for-tests"
ADMIN = "an-operator-token-for-the-admin-stats"


def start_machine(workdir, name, address, port, peer, admin=ADMIN):
    common = {"INTERNAL_LISTEN": f"{address}:{port}", "INTERNAL_TOKEN": TOKEN,
              "MACHINE_ID": name}
    controld = {**common, "MESH_PEERS": peer, "MESH_PING_MS": "100", "MESH_DEAD_MS": "500",
                "REGION": "ams" if name.endswith("a") else "fra"}
    if admin:
        controld["ADMIN_TOKEN"] = admin
    return rh.Stack(workdir / name, controld_env=controld,
                    relayd_env={**common, "SHUTDOWN_DRAIN_MS": "200"})


def stats(stack, token=ADMIN):
    response = stack.relayd.api("POST", "/api/admin/stats", token=token)
    return response.status, (json.loads(response.body) if response.body else None)


@pytest.fixture
def two_machines(tmp_path):
    port_a = harness.free_port("127.0.0.11")
    port_b = harness.free_port("127.0.0.12")
    stacks = []
    try:
        stacks.append(start_machine(tmp_path, "machine-a", "127.0.0.11", port_a,
                                    f"127.0.0.12:{port_b}"))
        stacks.append(start_machine(tmp_path, "machine-b", "127.0.0.12", port_b,
                                    f"127.0.0.11:{port_a}", admin=None))
        yield stacks
    finally:
        for stack in stacks:
            stack.close()


def test_admin_stats_show_the_cluster_as_the_answering_machine_sees_it(two_machines):
    a, b = two_machines
    origin = b.origin()
    b.tunnel(origin.port, links=2)

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
    assert peer["address"].startswith("127.0.0.12:")
    assert cluster["bridges"] == 2
    assert cluster["bridges_by_region"] == {"ams": 0, "fra": 2}
    assert cluster["peers_up"] == 1 and cluster["peers"][0]["machine"] == "machine-b"
    # The top-level counts are this machine's: its own database (no tunnel) and no bridge here.
    assert (body["tunnels"], body["bridges"], body["relays"]) == (0, 0, 1)
    assert body["machine"]["id"] == "machine-a" and body["machine"]["region"] == "ams"
    assert body["machine"]["fds"] > 0 and body["machine"]["threads"] > 0

    # No token, a wrong one: 401 with the API's error shape. B has no ADMIN_TOKEN: no such route.
    for token in (None, "not-the-admin-token"):
        status, error = stats(a, token)
        assert status == 401 and error["_tag"] == "UnauthorizedError"
    status, error = stats(b)
    assert status == 404 and error["_tag"] == "NotFoundError"
