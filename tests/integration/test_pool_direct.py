"""Direct mode with real processes (docs/pools-direct.md): controld + relayd, one tunnel with two
origins: `a` dials the relay as usual (2 links), `d` only listens (127.0.28.1) and the relay dials
it (3 links, set through the API). Checked: the relay keeps exactly 3 links to d and counts them in
the pool; visitors from 300 source addresses are split between a and d by the same sticky choice
as reverse links; a killed d loses its links and its visitors move to a, a restarted d gets its 3
links back from the relay without doing anything (time printed); removing d's direct address
closes d's links and the relay stops dialing; and the API refuses a bad address.

Loopback range of this file: 127.0.28.x (d's listener), visitors 127.28.N.M."""
import signal
import time

import harness
from test_mesh_link import linked_mesh
import pool_harness as ph
import relay_harness as rh

LISTEN_HOST = "127.0.28.1"
VISITORS = 300
DIRECT_LINKS = 3


def _visitor(i):
    return f"127.28.{i // 250}.{i % 250 + 1}"


def _api(relay, method, path, token, body=None, expect=(200, 201, 204)):
    answer = relay.api(method, path, body=body, token=token)
    assert answer.status in expect, answer
    return answer


def _origin_links(relay, tid, token, name):
    body = _api(relay, "GET", f"/api/tunnel/{tid}/status", token).json()
    for origin in body["origins"]:
        if origin["name"] == name:
            return origin["links"]
    return 0


def _wait_links(relay, tid, token, name, count, timeout=30):
    harness.wait_until(lambda: _origin_links(relay, tid, token, name) == count, timeout,
                       f"origin {name} with {count} links")


def test_the_relay_dials_a_direct_origin_and_it_joins_the_pool(stack):
    s = stack(relayd_env={"DIRECT_ALLOW_PRIVATE": "true", "AUTH_FAILURE_LIMIT": "1000"})
    relay = s.relayd
    webs = {name: s.origin(name) for name in "ad"}
    a = rh.Otunnel(s.workdir / "a", relay.server_url, s.ca_file, port=webs["a"].port, name="a",
                   extra_args=["--origin", "a", "--profile", f"main={rh.DOMAIN}:{relay.tls_port},links=2"])
    s.tunnels.append(a)
    a.start()
    a.wait_url()
    state = a.state()
    tid, token = state["id"], state["token"]
    _api(relay, "PUT", f"/api/tunnel/{tid}/balancing", token, {"stickyHoldMs": 1000})

    # The API checks the address before anything is dialed.
    for bad in ("no-port", "127.0.28.1:0", "127.0.28.1:70000", "[::1:443", ""):
        answer = relay.api("POST", f"/api/tunnel/{tid}/origins",
                           body={"name": "bad", "direct": {"address": bad, "links": 2}}, token=token)
        assert answer.status == 400, (bad, answer)
    answer = relay.api("POST", f"/api/tunnel/{tid}/origins",
                       body={"name": "bad", "direct": {"address": "127.0.28.9:443", "links": 99}},
                       token=token)
    assert answer.status == 400, answer

    # d: its address first (the relay starts dialing it, refused until d listens).
    port = harness.free_port(LISTEN_HOST)
    added = _api(relay, "POST", f"/api/tunnel/{tid}/origins", token,
                 {"name": "d", "direct": {"address": f"{LISTEN_HOST}:{port}",
                                          "links": DIRECT_LINKS}}).json()
    listed = _api(relay, "GET", f"/api/tunnel/{tid}/origins", token).json()
    direct = {o["name"]: o.get("direct") for o in listed["origins"]}
    assert direct["d"] == {"address": f"{LISTEN_HOST}:{port}", "links": DIRECT_LINKS}, listed
    assert direct.get("a") is None, listed

    def start_d(state_dir):
        d = rh.Otunnel(s.workdir / "d", relay.server_url, s.ca_file, port=webs["d"].port,
                       name="d", state_dir=state_dir,
                       extra_args=["--origin", "d", "--credential", added["credential"],
                                   "--profile", f"in=listen:{LISTEN_HOST}:{port},links={DIRECT_LINKS}"])
        s.tunnels.append(d)
        return d.start()

    d_state = ph.copy_state_without_token(a, s.workdir / "d-state")
    d = start_d(d_state)
    started = time.monotonic()
    _wait_links(relay, tid, token, "d", DIRECT_LINKS)
    print(f"\nd's {DIRECT_LINKS} direct links up {time.monotonic() - started:.2f} s after it "
          f"started listening")
    _wait_links(relay, tid, token, "a", 2)
    ph.wait_profiles(d, {"in": DIRECT_LINKS})

    # The same sticky choice over a and d, whoever dialed (once d's hold of 1 s is over).
    visitors = ph.Visitors(relay.tls_port, a.hostname, s.ca_file)
    sample = range(0, VISITORS, 10)
    harness.wait_until(lambda: all(visitors.try_visit(_visitor(i)) ==
                                   ph.expected_origin(_visitor(i), "ad") for i in sample),
                       30, "d to take its share after the hold")
    first = {}
    for i in range(VISITORS):
        first[i] = visitors.visit(_visitor(i))
        assert first[i] == ph.expected_origin(_visitor(i), "ad"), (i, first[i])
    counts = {name: sum(1 for o in first.values() if o == name) for name in "ad"}
    print(f"shares of {VISITORS} addresses: {counts}")
    assert min(counts.values()) > VISITORS // 4, counts

    # Kill d: its visitors move to a, nobody else moves; the relay keeps trying d.
    killed_at = time.monotonic()
    d.process.send_signal(signal.SIGKILL)
    d.process.wait(10)
    probe = next(i for i, o in first.items() if o == "d")
    harness.wait_until(lambda: visitors.try_visit(_visitor(probe), timeout=5) == "a", 30,
                       "a visitor of d served by a")
    print(f"failover: a visitor of d served by a {1000 * (time.monotonic() - killed_at):.0f} ms "
          f"after SIGKILL")
    _wait_links(relay, tid, token, "d", 0)
    for i in range(0, VISITORS, 3):
        assert visitors.visit(_visitor(i)) == "a", i

    # d restarts listening: the relay dials it again by itself.
    restarted = time.monotonic()
    d = start_d(d_state)
    _wait_links(relay, tid, token, "d", DIRECT_LINKS, timeout=90)
    print(f"d's links back {time.monotonic() - restarted:.2f} s after it listened again "
          f"(the relay's backoff after {time.monotonic() - killed_at:.1f} s of refused dials)")
    harness.wait_until(lambda: visitors.try_visit(_visitor(probe), timeout=5) == "d", 30,
                       "d's visitor back on d after the hold")

    # Direct mode off for d: its links close, the relay stops dialing.
    _api(relay, "DELETE", f"/api/tunnel/{tid}/origins/d/direct", token)
    _wait_links(relay, tid, token, "d", 0)
    listed = _api(relay, "GET", f"/api/tunnel/{tid}/origins", token).json()
    assert {o["name"]: o.get("direct") for o in listed["origins"]}["d"] is None, listed
    assert visitors.visit(_visitor(probe)) == "a"
    _wait_links(relay, tid, token, "a", 2)


MESH = {"machine-1": "127.0.28.11", "machine-2": "127.0.28.12"}


def test_every_machine_of_the_mesh_dials_a_direct_origin(tmp_path, mysql_database):
    """Two machines on one database: both relays dial d, each keeps its own links, and each
    machine's status shows d's links here and on the peer."""
    with linked_mesh(tmp_path, MESH, {"DATABASE_URL": mysql_database, "MESH_DEAD_MS": "1500"},
                     relayd_env={"DIRECT_ALLOW_PRIVATE": "true"}) as machines:
        one, two = machines
        for machine in machines:
            machine.stack.relayd.wait_log("mesh table snapshot applied")
        relay = one.stack.relayd
        webs = {name: one.stack.origin(name) for name in ("owner", "d")}
        owner = rh.Otunnel(tmp_path / "owner", relay.server_url, one.stack.ca_file,
                           port=webs["owner"].port,
                           name="owner", extra_args=["--origin", "owner", "--profile",
                                                     f"main={rh.DOMAIN}:{relay.tls_port},links=1"])
        one.stack.tunnels.append(owner)
        owner.start()
        owner.wait_url()
        tid, token = owner.state()["id"], owner.state()["token"]
        _api(relay, "PUT", f"/api/tunnel/{tid}/balancing", token, {"stickyHoldMs": 1000})
        port = harness.free_port(LISTEN_HOST)
        added = _api(relay, "POST", f"/api/tunnel/{tid}/origins", token,
                     {"name": "d", "direct": {"address": f"{LISTEN_HOST}:{port}",
                                              "links": 2}}).json()
        d = rh.Otunnel(tmp_path / "d", relay.server_url, one.stack.ca_file, port=webs["d"].port,
                       name="d", state_dir=ph.copy_state_without_token(owner, tmp_path / "d-st"),
                       extra_args=["--origin", "d", "--credential", added["credential"],
                                   "--profile", f"in=listen:{LISTEN_HOST}:{port},links=4"])
        one.stack.tunnels.append(d)
        d.start()
        # 2 links from each machine: 4 at d, 2 + 2 in each machine's status.
        ph.wait_profiles(d, {"in": 4})
        for machine in machines:
            def both(m=machine):
                body = _api(m.stack.relayd, "GET", f"/api/tunnel/{tid}/status", token).json()
                d_entry = next((o for o in body["origins"] if o["name"] == "d"), None)
                return d_entry and d_entry["links"] == 2 and d_entry.get("peerLinks") == 2
            harness.wait_until(both, 30, f"{machine.name}: d's 2 links here and 2 on the peer")
        visitors = ph.Visitors(two.stack.relayd.tls_port, owner.hostname, one.stack.ca_file)
        # Visitors on machine 2 get the same sticky choice over {owner, d}: d's links there are
        # machine 2's own dials.
        want = {i: ph.expected_origin(_visitor(i), ("owner", "d")) for i in range(60)}
        assert set(want.values()) == {"owner", "d"}
        harness.wait_until(lambda: all(visitors.try_visit(_visitor(i)) == o
                                       for i, o in want.items()),
                           30, "visitors on machine 2 spread over owner and d")


def test_a_relay_that_starts_with_no_bridge_dials_the_direct_origins(stack):
    """controld hands a starting relay every record with a direct origin, not only the records of
    tunnels it holds bridges of: here the only link of the tunnel is the one the relay must dial."""
    s = stack(relayd_env={"DIRECT_ALLOW_PRIVATE": "true"})
    web = s.origin("d")
    owner = rh.Otunnel(s.workdir / "owner", s.relayd.server_url, s.ca_file, port=web.port,
                       name="owner", links=1)
    s.tunnels.append(owner)
    owner.start()
    owner.wait_url()
    tid, token = owner.state()["id"], owner.state()["token"]
    port = harness.free_port(LISTEN_HOST)
    added = _api(s.relayd, "POST", f"/api/tunnel/{tid}/origins", token,
                 {"name": "d", "direct": {"address": f"{LISTEN_HOST}:{port}", "links": 2}}).json()
    d_state = ph.copy_state_without_token(owner, s.workdir / "d-state")
    owner.stop()
    assert s.relayd.stop() == 0
    s.relayds.remove(s.relayd)
    d = rh.Otunnel(s.workdir / "d", s.relayd.server_url, s.ca_file, port=web.port, name="d",
                   state_dir=d_state,
                   extra_args=["--origin", "d", "--credential", added["credential"],
                               "--profile", f"in=listen:{LISTEN_HOST}:{port},links=2"])
    s.tunnels.append(d)
    d.start()
    relay = s.start_relayd({"DIRECT_ALLOW_PRIVATE": "true", "SHUTDOWN_DRAIN_MS": "200"},
                           name="relayd-new")
    relay.wait_metric(lambda m: m.get("opentunnel_direct_bridges_up") == 2, 30,
                      "the new relay's 2 links to d")
    ph.wait_profiles(d, {"in": 2})
    got = rh.curl_url(f"https://{owner.hostname}:{relay.tls_port}/hello", s.ca_file)
    assert got.stdout == "hello from d\n", got
