"""Issue 10, items 2, 3 and 7, against real controld and relayd processes: peers that leave relayd's
answers unread (pongs, pipelined API answers) hold a bounded, counted amount of memory that comes
back when they leave; API requests waiting on a frozen controld are answered when the control
session goes down; many API connections from one address cannot fill the process's budget
of buffered bytes. The attacks live in attacks_queues.py (which also runs them from a CLI)."""
import ssl
import time

import pytest

import attacks_queues as aq
import bridge_client as bc
import resilience_harness as rz

MIB_KB = 1024
# What a non-reading peer may cost relayd (its queue is bounded at 2 MiB, plus TLS and allocator
# slack). The old relayd grew by hundreds of MiB under the same attacks.
GROWTH_BOUND_KB = 40 * MIB_KB


def _flood_and_check(stack, attached):
    relay = stack.relayd
    tunnel = bc.create_ready_tunnel(relay, stack.workdir)
    baseline = rz.ResourceBaseline(relay.process, "relayd")
    result = aq.ping_flood(relay, tunnel, total=64 * 1024 * 1024, seconds=8.0, attached=attached)
    conn = result["conn"]
    try:
        peak = result["sampler"].stop()
        growth = peak - result["sampler"].before
        print(f"\nping flood attached={attached}: sent {result['sent'] >> 20} MiB in "
              f"{result['seconds']:.1f} s, RSS +{growth / 1024:.1f} MiB, {result['during']}")
        # A flood this size must have gone through (relayd keeps reading a peer whose pongs
        # it coalesces) and cost little.
        assert result["sent"] >= 16 * 1024 * 1024, result
        assert not result["closed_by_relay"], "a ping flood alone is no reason to reset"
        assert growth < GROWTH_BOUND_KB, f"RSS grew by {growth} KiB under a ping flood"
        # Every queued byte is counted while it waits, and the bridge still answers.
        assert result["during"]["buffered_bytes"] < 4 * 1024 * 1024, result["during"]
        conn.sock.settimeout(10)
        deadline = time.monotonic() + 10
        pong = False
        while not pong and time.monotonic() < deadline:
            try:
                conn.plain += conn.tls.obj.read(65536)
            except ssl.SSLWantReadError:
                conn.tls.incoming.write(conn.sock.recv(65536))
            pong = b"\x8a\x00" in conn.plain  # an unmasked empty pong
        assert pong, "no pong after the flood"
    finally:
        aq.after_close(relay, conn)
    baseline.wait_back()


def test_ping_flood_on_an_upgrade_before_attach_is_bounded_and_given_back(stack):
    _flood_and_check(stack(), attached=False)


def test_ping_flood_on_an_attached_bridge_is_bounded_and_given_back(stack):
    _flood_and_check(stack(), attached=True)


def test_pipelined_api_requests_stop_at_the_write_backlog_and_resume_when_read(stack):
    s = stack()
    relay = s.relayd
    baseline = rz.ResourceBaseline(relay.process, "relayd")
    result = aq.pipelined_flood(relay, requests=20_000)
    conn = result["conn"]
    try:
        growth = aq.wait_quiet(relay, result["sampler"], GROWTH_BOUND_KB, 3.0)
        during = aq._counters(relay)
        print(f"\npipelined flood: {result['sent'] // result['request_bytes']} requests sent, "
              f"RSS +{growth / 1024:.1f} MiB, {during}")
        assert result["sent"] == 20_000 * result["request_bytes"]
        assert growth < GROWTH_BOUND_KB, f"RSS grew by {growth} KiB with answers unread"
        assert during["peer_backlog_paused"] >= 1, during
        # An API connection stops at 256 KiB of unread answers (plus the one being queued), far
        # below the peer write backlog's 2 MiB.
        assert 128 * 1024 < during["buffered_bytes"] < 1024 * 1024, during
        assert during["peer_backlog_reset"] == 0, during
        # A client that reads again gets the rest: more answers than could wait at the pause.
        answers = 0
        deadline = time.monotonic() + 60
        seen = b""
        while answers < 3000 and time.monotonic() < deadline:
            try:
                seen += conn.tls.obj.read(262144)
            except ssl.SSLWantReadError:
                conn.sock.settimeout(max(0.01, deadline - time.monotonic()))
                conn.tls.incoming.write(conn.sock.recv(262144))
                continue
            answers += seen.count(b"HTTP/1.1 200 ")
            seen = seen[-16:]
        assert answers >= 3000, answers
    finally:
        aq.after_close(relay, conn)
    result["sampler"].stop()
    baseline.wait_back()


@pytest.mark.waits
def test_api_requests_waiting_on_a_frozen_controld_are_answered_when_the_session_goes_down(stack):
    s = stack()
    results, down_after = aq.frozen_controld_requests(s, count=4)
    print(f"\nsession down after {down_after:.1f} s; waits: {[r[:2] for r in results]}")
    for waited, status, body in results:
        assert status == 503, (waited, status, body)
        assert body["_tag"] == "ServiceUnavailableError", body
        # Answered when the keepalive gave its verdict, not at the proxy's 30 s timeout.
        assert waited <= down_after + 3.0, (waited, down_after)
    failures = s.relayd.metrics().get("opentunnel_api_proxy_failures_total")
    assert failures >= 4, failures
    # controld thawed: the session comes back and requests go through again.
    rz.wait_metric_value(s.relayd, "opentunnel_control_connected", 1, timeout=60)
    assert s.relayd.api("GET", "/openapi.json").status == 200


def test_many_api_connections_from_one_address_cannot_fill_the_buffered_budget(stack):
    # The process budget is halved (128 MiB) so that 100 connections are enough to show the harm:
    # at 2 MiB each (the peer write backlog alone) they would fill it and pause every bridge and
    # visitor of every tunnel. Now one address holds at most MAX_API_CONNECTIONS_PER_SOURCE (64)
    # of them, each stopping at 256 KiB of unread answers (plus the one answer being queued).
    # 600 requests each: about 2.4 MiB of answers, past the old 2 MiB per-connection pause.
    s = stack(relayd_env={"BUFFERED_BYTES_LIMIT": str(128 * 1024 * 1024)})
    relay = s.relayd
    web = s.origin("web")
    tunnel = s.tunnel(web.port)
    baseline = rz.ResourceBaseline(relay.process, "relayd")
    result = aq.api_connections_flood(relay, connections=100, requests_each=600)
    try:
        buffered = aq.wait_settled(relay)
        during = aq._counters(relay)
        # Another address downloads through a tunnel while the attacker holds its connections.
        status, intact, waited = aq.download_from("127.0.0.2", relay, tunnel.hostname, s.ca_file,
                                                  8 * 1024 * 1024, timeout=30)
        peak = result["sampler"].stop()
        growth = peak - result["sampler"].before
        print(f"\n100 API connections: {len(result['conns'])} open, {result['refused_429']} "
              f"refused with 429, {result['closed_by_relay']} closed otherwise, buffered {buffered / 1024 / 1024:.1f} MiB, RSS "
              f"+{growth / 1024:.1f} MiB; visitor: {status} intact={intact} in {waited:.2f} s; "
              f"{during}")
        assert (status, intact) == (200, True), (status, intact, waited)
        assert buffered < 64 * 1024 * 1024, during
        assert growth < 96 * MIB_KB, f"RSS grew by {growth} KiB"
        assert during["shed_source_api_connections"] == 36, during
        assert result["refused_429"] == 36, result
        assert "API connection refused: the source holds its share" in relay.log_text()
    finally:
        for conn in result["conns"]:
            conn.close()
    relay.wait_metric(lambda m: m.get("opentunnel_relay_buffered_bytes") == 0, timeout=30,
                      what="buffered bytes back to 0")
    # The slots came back: the same address is served again.
    assert relay.api("GET", "/openapi.json").status == 200
    # Descriptors come back; glibc keeps the freed answer buffers (thousands of small blocks) in
    # its heap for reuse, so memory is held at about the peak the bound above allows, not beyond.
    baseline.wait_back(rss_slack_kb=48 * MIB_KB)
