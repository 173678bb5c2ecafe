"""A whole pool with real processes (issue 16, docs/pools.md): controld + relayd, one tunnel served
by three otunnel origins (a with the tunnel token, b and c with derived credentials from a copied
state file), each with its own local HTTP server that answers with its name, each reaching the
relay two ways: profile 0 `fwd` through TCP forwarders this test owns (127.0.24.1) and profile 1
`direct` to relayd's own address (127.0.0.1, where the harness's relayd listens, on a port of its
own), 4 links each. Origin a also has a profile `dead` to a closed port
(127.0.24.3) that must stay in backoff. Visitors come from 1000 source addresses 127.24.N.M.

Checked, in one run (the numbers are printed; run with -s to see them): even shares and sticky
visitors, the status API showing the whole pool (otunnel's own report of the dead profile
included), Reset closing all 24 links and the pool healthy again (time printed) without moving a
visitor, killing origin b moves only b's visitors (failover time printed) and b takes them back
only after the hold, `spread` balances open streams over the links, `priority` keeps new visitors
on profile 0 until its last link is gone, cutting a whole profile moves no visitor, and live
changes (add d, remove c, rotate, switch the mode) under load fail no visitor of an origin the
change does not touch.

What "unaffected" means for the live changes: adding an origin touches nobody's links (some
visitors move to it, none may fail); removing c touches only c (its visitors may fail while its
links close, then move); a rotation revokes every derived credential, so b and d (run with
--credential) lose their links and stop, and only a, run with the tunnel token, is unaffected;
switching the balancing mode touches nobody.

Per-link open streams are not exposed by relayd, `otctl bridges` or the API in this branch;
otunnel's status has open streams per profile and address. So the
spread check is per profile: 16 streams over 2 x 4 links, no two links more than one apart, is
exactly 8 on each profile (`tests/relayd/origin_choice_test.cc` checks it per link)."""
import signal
import time

import harness
import pool_harness as ph
import relay_harness as rh

FORWARDER_HOST = "127.0.24.1"
DEAD_HOST = "127.0.24.3"
VISITORS = 1000
HOLD_MS = 2000
LINKS = 4


def _api(relay, method, path, token, body=None):
    answer = relay.api(method, path, body=body, token=token)
    assert answer.status in (200, 201, 204), answer
    return answer


def _start_origin(s, name, port, profiles, credential=None, state_dir=None):
    args = ["--origin", name]
    if credential:
        args += ["--credential", credential]
    for profile in profiles:
        args += ["--profile", profile]
    client = rh.Otunnel(s.workdir / name, s.relayd.server_url, s.ca_file, port=port, name=name,
                        state_dir=state_dir, extra_args=args)
    s.tunnels.append(client)
    return client.start()


def _bridges(relay):
    return relay.metrics().get("opentunnel_bridges_attached")


def _wait_bridges(relay, count, what):
    relay.wait_metric(lambda m: m.get("opentunnel_bridges_attached") == count, 30, what)


def _wait_visitors_gone(relay):
    """Until relayd counts no open visitor: a visit returns once its answer is read, a moment
    before relayd has closed its stream, and `spread` counts the streams relayd still holds."""
    relay.wait_metric(lambda m: m.get("opentunnel_visitor_connections_open") == 0, 30,
                      "every visitor's stream closed in relayd")


def _wait_streams(origin, wanted):
    """Until origin's status shows `wanted` ({profile: open streams})."""
    def check():
        figures = ph.profile_figures(origin.state_dir, origin.process.pid)
        if figures and all(figures[p][1] == n for p, n in wanted.items()):
            return figures
        return None
    return harness.wait_until(check, 20, f"{origin.name}: open streams {wanted}")


def test_three_origins_two_profiles_a_thousand_visitors(stack):
    s = stack(relayd_env={"AUTH_FAILURE_LIMIT": "1000"})
    relay = s.relayd
    # Profile 0 of a goes through its own forwarder (so the test can cut a's links one by one),
    # b's and c's through a shared one.
    forwarders = {name: ph.Forwarder(FORWARDER_HOST, ("127.0.0.1", relay.tls_port))
                  for name in ("a", "bc")}
    dead_port = harness.free_port(DEAD_HOST)  # bound and released: refused from now on
    fwd_a = f"fwd={FORWARDER_HOST}:{forwarders['a'].port}"
    fwd = f"fwd={FORWARDER_HOST}:{forwarders['bc'].port}"
    direct = f"direct={rh.DOMAIN}:{relay.tls_port}"
    dead = f"dead={DEAD_HOST}:{dead_port},links=2"
    webs = {name: s.origin(name) for name in "abcd"}
    procs = {}
    try:
        # Origin a provisions the tunnel with its token; b and c get credentials and a copy.
        procs["a"] = _start_origin(s, "a", webs["a"].port, [fwd_a, direct, dead])
        procs["a"].wait_url()
        state = procs["a"].state()
        tid, token = state["id"], state["token"]
        _api(relay, "PUT", f"/api/tunnel/{tid}/balancing", token, {"stickyHoldMs": HOLD_MS})
        credentials = {}
        for name in "bc":
            added = _api(relay, "POST", f"/api/tunnel/{tid}/origins", token, {"name": name})
            credentials[name] = added.json()["credential"]
            copy = ph.copy_state_without_token(procs["a"], s.workdir / f"{name}-state")
            procs[name] = _start_origin(s, name, webs[name].port, [fwd, direct],
                                        credentials[name], copy)
        for name in "abc":
            ph.wait_profiles(procs[name], {"fwd": LINKS, "direct": LINKS})
        _wait_bridges(relay, 3 * 2 * LINKS, "24 links attached")
        visitors = ph.Visitors(relay.tls_port, procs["a"].hostname, s.ca_file)
        everyone = range(VISITORS)

        # Shares and stickiness.
        started = time.monotonic()
        first = visitors.visit_all(everyone)
        print(f"\n{VISITORS} visits in {time.monotonic() - started:.1f} s")
        counts = {name: sum(1 for o in first.values() if o == name) for name in "abc"}
        print(f"shares of {VISITORS} addresses: {counts}")
        for name, count in counts.items():
            assert abs(count / VISITORS - 1 / 3) <= 0.05, counts
        for i, origin in first.items():
            assert origin == ph.expected_origin(ph.source_address(i), "abc"), (i, origin)
        assert visitors.visit_all(everyone) == first
        _status_and_reset(relay, tid, token)
        assert visitors.visit_all(everyone) == first  # a reset moves nobody

        # Kill origin b: exactly b's visitors move.
        b_visitors = [i for i, o in first.items() if o == "b"]
        probe = ph.source_address(b_visitors[0])
        killed_at = time.monotonic()
        procs["b"].process.send_signal(signal.SIGKILL)
        harness.wait_until(lambda: visitors.try_visit(probe, timeout=5) in ("a", "c"), 30,
                           "a visitor of b to be served by another origin")
        failover_ms = (time.monotonic() - killed_at) * 1000
        print(f"failover: a visitor of b served elsewhere {failover_ms:.0f} ms after SIGKILL")
        procs["b"].process.wait(10)
        _wait_bridges(relay, 2 * 2 * LINKS, "b's links detached")
        moved = visitors.visit_all(everyone)
        for i, origin in first.items():
            if origin == "b":
                assert moved[i] == ph.expected_origin(ph.source_address(i), "ac"), (i, moved[i])
            else:
                assert moved[i] == origin, (i, origin, moved[i])
        print(f"moved after the kill: {sum(1 for i in everyone if moved[i] != first[i])} "
              f"(b had {len(b_visitors)})")

        # b comes back (same state and credential): its visitors wait out the hold.
        back_at = time.monotonic()
        procs["b"] = _start_origin(s, "b", webs["b"].port, [fwd, direct], credentials["b"],
                                   procs["b"].state_dir)
        within_hold = 0
        while time.monotonic() < back_at + HOLD_MS / 1000 - 0.3:
            for i in b_visitors[:50]:
                answer = visitors.visit(ph.source_address(i))
                if time.monotonic() >= back_at + HOLD_MS / 1000 - 0.05:
                    break
                assert answer == moved[i], (i, answer, "before the hold ended")
                within_hold += 1
        harness.wait_until(lambda: visitors.visit(probe) == "b", 30,
                           "b's visitors to come back after the hold")
        returned = time.monotonic() - back_at
        print(f"{within_hold} visits of b's visitors stayed put within the hold; they came back "
              f"{returned:.2f} s after b was restarted (hold {HOLD_MS} ms)")
        assert returned >= HOLD_MS / 1000 - 0.05, returned
        assert within_hold >= 10
        ph.wait_profiles(procs["b"], {"fwd": LINKS, "direct": LINKS})
        assert visitors.visit_all(everyone) == first

        # spread: a new visitor takes the link with the fewest open streams, over both profiles.
        on_a = [i for i, o in first.items() if o == "a"]
        _wait_visitors_gone(relay)
        held = [visitors.hold_open(ph.source_address(i)) for i in on_a[:16]]
        figures = _wait_streams(procs["a"], {"fwd": 8, "direct": 8})
        print("spread, 16 open streams on a: " + ", ".join(
            f"{p} {figures[p][1]}" for p in ("fwd", "direct")))
        for connection in held:
            connection.close()
        _wait_streams(procs["a"], {"fwd": 0, "direct": 0})

        # priority, switched live: profile 0 takes every new visitor while it has a link.
        _api(relay, "PUT", f"/api/tunnel/{tid}/balancing", token, {"mode": "priority"})

        def priority_in_force():
            # The record reaches relayd with the next push: until then spread splits them 4/4.
            opened = [visitors.hold_open(ph.source_address(i)) for i in on_a[:8]]
            figures = harness.wait_until(
                lambda: (lambda f: f if f and f["fwd"][1] + f["direct"][1] == 8 else None)(
                    ph.profile_figures(procs["a"].state_dir, procs["a"].process.pid)),
                20, "8 open streams on a")
            if figures["fwd"][1] == 8:
                return opened
            for connection in opened:
                connection.close()
            _wait_streams(procs["a"], {"fwd": 0, "direct": 0})
            return None
        held = harness.wait_until(priority_in_force, 20, "priority to be in force")
        print("priority, 8 open streams on a: fwd 8, direct 0")
        for connection in held:
            connection.close()
        _wait_streams(procs["a"], {"fwd": 0, "direct": 0})

        # a's profile 0 loses links one by one (no way back: its forwarder stops listening):
        # while it has one, it takes every new visitor.
        forwarders["a"].stop_listening()
        forwarders["a"].cut(LINKS - 1)
        ph.wait_profiles(procs["a"], {"fwd": 1, "direct": LINKS})
        _wait_bridges(relay, 3 * 2 * LINKS - (LINKS - 1), "3 of a's fwd links closed")
        held = [visitors.hold_open(ph.source_address(i)) for i in on_a[:4]]
        _wait_streams(procs["a"], {"fwd": 4, "direct": 0})
        print("priority, profile 0 down to 1 link: 4 new visitors on fwd, 0 on direct")

        # Cut profile 0 everywhere: its links close, no visitor changes origin, and priority
        # falls to profile 1.
        for forwarder in forwarders.values():
            forwarder.kill()
        _wait_bridges(relay, 3 * LINKS, "every fwd link closed")
        for connection in held:
            connection.close()
        assert visitors.visit_all(everyone) == first
        held = [visitors.hold_open(ph.source_address(i)) for i in on_a[:4]]
        _wait_streams(procs["a"], {"fwd": 0, "direct": 4})
        print("priority, profile 0 gone: 4 new visitors on direct; nobody changed origin")
        for connection in held:
            connection.close()

        # The dead profile (and now fwd) stays in backoff while direct carries everything.
        figures = ph.profile_figures(procs["a"].state_dir, procs["a"].process.pid)
        for name in ("dead", "fwd"):
            addresses = figures[name][2]
            assert figures[name][0] == 0, (name, addresses)
            assert all(a["lastError"] for a in addresses), (name, addresses)
            assert any(a["nextTryMs"] > 0 for a in addresses), (name, addresses)
        print(f"dead profile: {figures['dead'][2][0]['lastError']!r}, next try in "
              f"{figures['dead'][2][0]['nextTryMs']} ms")

        _live_changes(s, relay, tid, token, procs, webs, visitors, first, direct)
    finally:
        for forwarder in forwarders.values():
            forwarder.kill()


def _pool_status(relay, tid, token):
    return _api(relay, "GET", f"/api/tunnel/{tid}/status", token).json()


def _status_and_reset(relay, tid, token):
    """The API's status shows the whole pool (each origin's own report included), and Reset
    drops every link and has the three otunnels back at once (the time is printed)."""
    def whole(status):
        if status["health"] != "healthy" or status["links"] != 3 * 2 * LINKS:
            return False
        origins = {o["name"]: {p["name"]: p for p in o["profiles"]} for o in status["origins"]}
        if sorted(origins) != ["a", "b", "c"]:
            return False
        for name, profiles in origins.items():
            for profile in ("fwd", "direct"):
                if profiles.get(profile, {}).get("links") != LINKS:
                    return False
        dead = origins["a"].get("dead")
        # a's dead profile: reported by otunnel with its links wanted, none up, and why.
        return dead is not None and dead["links"] == 0 and dead["linksWanted"] == 2 and \
            bool(dead["lastError"])
    status = harness.wait_until(lambda: (lambda st: st if whole(st) else None)(
        _pool_status(relay, tid, token)), 20, "the status API shows the whole pool")
    assert status["summary"] == f"healthy ({3 * 2 * LINKS} links up)", status["summary"]
    print(f"status: {status['summary']}")

    def resets(metrics):
        try:
            return metrics.get("opentunnel_bridge_detaches_total", reason="reset")
        except KeyError:
            return 0
    before = resets(relay.metrics())
    started = time.monotonic()
    answer = _api(relay, "POST", f"/api/tunnel/{tid}/reset", token).json()
    assert answer["bridgesClosedHere"] == 3 * 2 * LINKS, answer
    relay.wait_metric(lambda m: resets(m) >= before + 3 * 2 * LINKS, 10,
                      "the reset closed 24 links")
    harness.wait_until(lambda: whole(_pool_status(relay, tid, token)), 10,
                       "every link back after the reset")
    print(f"reset: 24 links closed and back, whole pool healthy again in "
          f"{(time.monotonic() - started) * 1000:.0f} ms")


def _live_changes(s, relay, tid, token, procs, webs, visitors, first, direct):
    """Add d, remove c, rotate, switch the mode, with visitors running throughout."""
    load_indexes = list(range(0, VISITORS, 10))  # 100 addresses over every origin
    load = ph.Load(visitors, load_indexes, workers=4)
    load.start()
    phases = []  # (name, start, end, origins before, origins after, affected origins)
    try:
        def phase(name, before, after, affected, action, settled):
            start = time.monotonic()
            try:
                action()
                harness.wait_until(settled, 30, f"{name} to take effect")
                time.sleep(0.3)  # some visits after the change, for the record
            finally:  # checked even when it never settled: which visits failed says why
                phases.append((name, start, time.monotonic(), before, after, affected))

        def lands(index, origin):
            return lambda: visitors.try_visit(ph.source_address(index)) == origin

        time.sleep(0.5)
        phases.append(("baseline", 0, time.monotonic(), "abc", "abc", ""))
        credential = {}

        def add_d():
            added = _api(relay, "POST", f"/api/tunnel/{tid}/origins", token, {"name": "d"})
            credential["d"] = added.json()["credential"]
            copy = ph.copy_state_without_token(procs["a"], s.workdir / "d-state")
            procs["d"] = _start_origin(s, "d", webs["d"].port, [direct], credential["d"], copy)
        to_d = next(i for i in load_indexes
                    if ph.expected_origin(ph.source_address(i), "abcd") == "d")
        phase("add d", "abc", "abcd", "", add_d, lands(to_d, "d"))

        from_c = next(i for i in load_indexes if first[i] == "c")
        phase("remove c", "abcd", "abd", "c",
              lambda: _api(relay, "DELETE", f"/api/tunnel/{tid}/origins/c", token),
              lambda: procs["c"].process.poll() is not None
              and lands(from_c, ph.expected_origin(ph.source_address(from_c), "abd"))())

        phase("rotate", "abd", "a", "bd",
              lambda: _api(relay, "POST", f"/api/tunnel/{tid}/origins/rotate", token),
              lambda: procs["b"].process.poll() is not None
              and procs["d"].process.poll() is not None)

        phase("spread", "a", "a", "",
              lambda: _api(relay, "PUT", f"/api/tunnel/{tid}/balancing", token,
                           {"mode": "spread"}),
              lambda: True)
    finally:
        load.stop()
        _check_phases(load, phases)

    for name in ("c", "b", "d"):
        assert procs[name].process.returncode == 1, name
        assert "credential revoked" in procs[name].stderr_text() or \
            "rotated" in procs[name].stderr_text(), procs[name].stderr_text()[-2000:]


def _check_phases(load, phases):
    """No visitor of an origin a phase does not touch failed, and every answer came from the
    visitor's origin before or after the change."""
    total = 0
    for name, start, end, before, after, affected in phases:
        records = load.between(start, end)
        total += len(records)
        failed = [r for r in records if r[3] is None]
        for _, _, i, answer in records:
            source = ph.source_address(i)
            was, will = ph.expected_origin(source, before), ph.expected_origin(source, after)
            if answer is None:
                assert was in affected, (name, source, was)
            else:
                assert answer in (was, will), (name, source, answer, was, will)
        print(f"live change {name!r}: {len(records)} visits, {len(failed)} failed "
              f"(allowed only for visitors of: {affected or 'none'})")
    assert total >= 100
