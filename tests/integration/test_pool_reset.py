"""Reset (docs/pools-reset.md) on two machines of one mesh (reset-a on 127.0.21.11, reset-b on
.12, one MariaDB). The pooled tunnel has an otunnel origin (2 links, the bare route) on reset-a
and raw bridges of a second origin on reset-b: the mesh's route rule keeps one route of a tunnel
on one machine (docs/mesh.md "Route checks"), so the reset-b origin claims only "api". A second
tunnel has bridges on reset-a only. POST /api/tunnel/{id}/reset on reset-a closes every bridge of
the pooled tunnel on both machines with close 4000 "reset"; otunnel's links redial at once (they
log a "reset" wait of at most 20 ms, never a backoff) and attach again; the time from the call
until both links are back is printed. The other tunnel's bridges keep their IDs. A second reset
within the second answers 429. `otctl reset` on reset-b resets reset-a's links through the mesh
event; `otctl reset --here` does not.
"""
import datetime
import json
import re
import time

import pytest

import bridge_client as bc
import harness
from test_mesh_link import linked_mesh
from test_otctl import admin_socket, ok_json

ADDRESSES = {"reset-a": "127.0.21.11", "reset-b": "127.0.21.12"}
LINKS = 2
WAIT_LINE = re.compile(r"^(\S+) INFO client\.link: bridge reconnecting link=(\d+) "
                       r"delay_ms=(\d+) kind=(\w+)")
ATTACH_LINE = re.compile(r"^(\S+) INFO client\.bridge: bridge attached link=(\d+)")


@pytest.fixture
def two_machines(tmp_path, mysql_database):
    with linked_mesh(tmp_path, ADDRESSES, {"DATABASE_URL": mysql_database}) as machines:
        for machine in machines:
            machine.stack.relayd.wait_log("mesh table snapshot applied")
        yield machines


def stamp(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def log_after(client, pattern, since):
    """(unix time, match) of the client's log lines matching `pattern` at or after `since`."""
    found = []
    for line in client.stderr_text().splitlines():
        match = pattern.match(line)
        if match and stamp(match.group(1)) >= since - 0.002:  # log stamps are whole ms
            found.append((stamp(match.group(1)), match))
    return found


def bridges_by_machine(socket, tunnel_id):
    """{machine: {bridge IDs}} of a tunnel across the mesh, as otctl bridges sees it."""
    out = {}
    for entry in ok_json("bridges", tunnel_id, socket=socket):
        out.setdefault(entry["machine_id"], set()).add(entry["bridge"]["bridge_id"])
    return out


def wait_bridges(socket, tunnel_id, counts, what):
    def settled():
        seen = bridges_by_machine(socket, tunnel_id)
        return seen if {m: len(ids) for m, ids in seen.items()} == counts else None
    return harness.wait_until(settled, 30, what)


def wait_back(clients, since, timeout=10.0):
    """Until every link of every client attached again after `since`; returns the time (unix) of
    the last of those attaches."""
    def back():
        last = 0.0
        for client in clients:
            client._alive()
            links = {}
            for when, match in log_after(client, ATTACH_LINE, since):
                links[match.group(2)] = when
            if len(links) < client.links:
                return None
            last = max(last, *links.values())
        return last
    return harness.wait_until(back, timeout, "every link of the pooled tunnel attached again")


def reset_waits(client, since):
    """The kinds and delays of the client's reconnect waits since `since`."""
    return [(m.group(4), int(m.group(3))) for _, m in log_after(client, WAIT_LINE, since)]


def raw_bridges(machine, tunnel_id, token, count):
    """Bridges of the tunnel on `machine` claiming only the route "api": the mesh keeps a route on
    the machine that holds it (docs/mesh.md "Route checks"), and the otunnel on reset-a holds
    the bare route."""
    bridges = []
    for _ in range(count):
        bridge = bc.BridgeClient(machine.stack.relayd.tls_port, machine.stack.ca_file)
        assert bridge.upgrade(tunnel_id) == 101, bridge.body
        answer = bridge.attach(token, ["api"], origin="web-b")
        assert answer["type"] == "attached", answer
        bridges.append(bridge)
    return bridges


def test_reset_drops_and_restores_every_link_on_both_machines(two_machines):
    a, b = two_machines
    web = a.stack.origin("web")
    origin_a = a.stack.tunnel(web.port, links=LINKS, name="origin-a",
                              extra_args=["--origin", "web-a", "--log-level", "info"])
    tunnel_id = origin_a.tunnel_id
    token = origin_a.state()["token"]
    on_b = raw_bridges(b, tunnel_id, token, LINKS)
    # Another tunnel, on reset-a only: the reset must not touch it.
    other = a.stack.tunnel(web.port, links=LINKS, name="other", extra_args=["--log-level", "info"])

    sock_a, sock_b = admin_socket(a.stack), admin_socket(b.stack)
    before = wait_bridges(sock_a, tunnel_id, {"reset-a": LINKS, "reset-b": LINKS},
                          "the pooled tunnel's bridges on both machines")
    other_before = wait_bridges(sock_a, other.tunnel_id, {"reset-a": LINKS},
                                "the other tunnel's bridges")

    # Auth first: a wrong token and an unknown tunnel are refused before anything is reset.
    assert a.stack.relayd.api("POST", f"/api/tunnel/{tunnel_id}/reset",
                              token="tk_wrong").status == 401
    assert a.stack.relayd.api("POST", "/api/tunnel/nosuchtunnel/reset",
                              token=token).status in (401, 404)

    since = time.time()
    response = a.stack.relayd.api("POST", f"/api/tunnel/{tunnel_id}/reset", token=token)
    assert response.status == 200, response.body
    outcome = json.loads(response.body)
    last_attach = wait_back([origin_a], since)
    took_ms = (last_attach - since) * 1000
    print(f"\nreset via the API: {LINKS} otunnel links back after {took_ms:.0f} ms")
    # A second reset within the second: 429 with Retry-After, nothing closed.
    again = a.stack.relayd.api("POST", f"/api/tunnel/{tunnel_id}/reset", token=token)
    if time.time() - since < 0.9:
        assert again.status == 429, again.body
        assert int(again.headers["Retry-After"]) >= 1

    assert outcome["id"] == tunnel_id
    assert outcome["bridgesClosedHere"] == LINKS
    assert outcome["peersTold"] == 1
    assert outcome["machines"] == [
        {"machine": "reset-a", "here": True, "told": True, "bridges": LINKS},
        {"machine": "reset-b", "here": False, "told": True, "bridges": LINKS}]
    # reset-b's relayd closed its bridges of the tunnel with 4000 "reset".
    for bridge in on_b:
        assert bridge.wait_close(10) == (4000, "reset")
        bridge.close()
    # Every otunnel link waited the reset's few ms, none a backoff (125 ms or more).
    waits = reset_waits(origin_a, since)
    assert len(waits) == LINKS, waits
    assert all(kind == "reset" and delay <= 20 for kind, delay in waits), waits
    # New bridges on reset-a, none left on reset-b; the other tunnel's are the same.
    after = wait_bridges(sock_a, tunnel_id, {"reset-a": LINKS},
                         "the pooled tunnel's links back")
    assert not (after["reset-a"] & before["reset-a"])
    assert bridges_by_machine(sock_a, other.tunnel_id) == other_before
    assert reset_waits(other, since) == []
    for machine in (a, b):
        machine.stack.relayd.wait_metric(
            lambda m: m.get("opentunnel_bridge_detaches_total", reason="reset") == LINKS,
            timeout=10, what=f"{machine.name}: reset detaches counted")

    # otctl reset on reset-b: reset-a's otunnel links are reset through the mesh event.
    on_b = raw_bridges(b, tunnel_id, token, 1)
    wait_bridges(sock_b, tunnel_id, {"reset-a": LINKS, "reset-b": 1}, "reset-b's bridge known")
    since = time.time()
    done = ok_json("reset", tunnel_id, socket=sock_b)
    last_attach = wait_back([origin_a], since)
    print(f"reset via otctl on reset-b: back after {(last_attach - since) * 1000:.0f} ms")
    machines = {m["machine_id"]: m for m in done["machines"]}
    assert machines["reset-b"].get("here") is True and machines["reset-b"].get("bridges") == 1
    assert machines["reset-a"].get("told") is True
    assert machines["reset-a"].get("bridges") == LINKS
    assert on_b[0].wait_close(10) == (4000, "reset")
    on_b[0].close()
    waits = reset_waits(origin_a, since)
    assert len(waits) == LINKS and all(kind == "reset" for kind, _ in waits), waits
    assert bridges_by_machine(sock_a, other.tunnel_id) == other_before

    # --here on reset-b: reset-a's links are not touched.
    since = time.time()
    done = ok_json("reset", tunnel_id, "--here", socket=sock_b)
    assert [m["machine_id"] for m in done["machines"]] == ["reset-b"]
    time.sleep(0.5)  # shows that nothing happens on reset-a (the event would take ms)
    assert reset_waits(origin_a, since) == []
