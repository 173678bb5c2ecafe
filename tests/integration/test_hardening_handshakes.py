"""One client against relayd's handshake slots (issue 10, items 4 and 5 and the 16 MB hello):
silent TLS handshakes for the API domain or a tunnel, visitors that close right after their
ClientHello, and a hello announcing more than the 64 KiB budget. The attacks themselves are in
attacks_handshakes.py; each test checks that a bystander from another address (127.0.0.2) is
still served while one address attacks, and that relayd's memory stays put."""
import pytest

import attacks_handshakes as attack
import relay_harness as rh
import resilience_harness as res

MIB_KB = 1024
value = attack.value


def test_silent_api_handshakes_from_one_address_leave_the_api_to_everyone_else(stack):
    s = stack()
    relayd = s.relayd
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=1)
    before = res.rss_kb(relayd.process.pid)

    # 300 ClientHellos for the API domain, then silence: more than the 256 handshake slots.
    sockets, sent_at = attack.open_silent_handshakes(relayd.tls_port, rh.DOMAIN, 300)
    try:
        relayd.wait_metric(
            lambda m: value(m, "opentunnel_connections_shed_total", reason="handshakes")
            + value(m, "opentunnel_connections_shed_total", reason="source_handshakes") >= 300 - 256,
            what="the flood to reach the handshake limits")
        # Meanwhile another address calls the API and opens a bridge: both get a handshake slot.
        status, waited = attack.api_call_from(attack.BYSTANDER, relayd)
        assert status == 200, f"the API call from another address was refused ({waited:.2f} s)"
        bridge = attack.BridgeFrom(attack.BYSTANDER, relayd.tls_port, relayd.ca_file)
        try:
            assert bridge.upgrade(tunnel.tunnel_id) == 101
        finally:
            bridge.close()
        metrics = relayd.metrics()
        assert value(metrics, "opentunnel_connections_shed_total", reason="source_handshakes") >= 250

        # The handshakes one address holds end 5 s after their hello, not 10 s after.
        held = [attack.held_for(sock, at, 15) for sock, at in zip(sockets, sent_at)]
        assert None not in held
        assert max(held) < 8.5, f"a silent handshake held its slot {max(held):.1f} s"
        metrics = relayd.wait_metric(
            lambda m: m.get("opentunnel_api_tls_handshakes_total", result="timeout") >= 1,
            what="the timeouts counted")
        assert metrics.get("opentunnel_api_tls_handshakes_total", result="timeout") <= 32
    finally:
        attack.close_all(sockets)
    assert res.rss_kb(relayd.process.pid) - before < 32 * MIB_KB
    assert "API handshake refused: the source holds its share" in relayd.log_text()


@pytest.mark.waits
def test_one_address_cannot_take_a_tunnels_slots_with_silent_handshakes(stack):
    # 2 links x 32 slots; one address may hold 16 of them (the flag under test).
    s = stack(relayd_env={"MAX_CONNS_PER_BRIDGE": "32", "MAX_CONNS_PER_TUNNEL_PER_SOURCE": "16"})
    relayd = s.relayd
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=2)
    before = res.rss_kb(relayd.process.pid)

    sockets, _ = attack.open_silent_handshakes(relayd.tls_port, tunnel.hostname, 100)
    try:
        metrics = relayd.wait_metric(
            lambda m: value(m, "opentunnel_visitor_connections_total",
                            outcome="rejected_source_limit") >= 84,
            what="the visitors past the source's share refused")
        assert metrics.get("opentunnel_visitor_connections_open") == 16
        status, body, waited = attack.visit_from(attack.BYSTANDER, relayd.tls_port,
                                                 tunnel.hostname, s.ca_file)
        assert (status, body) == (200, b"hello from web\n"), f"refused after {waited:.2f} s"
        assert "visitor refused: its address holds its share" in relayd.log_text()

        # otunnel gives up on the handshakes that never finish (10 s), which frees the slots.
        relayd.wait_metric(lambda m: m.get("opentunnel_visitor_connections_open") == 0,
                           timeout=50, what="otunnel's handshake timeout to free the slots")
    finally:
        attack.close_all(sockets)
    assert attack.visit_from(attack.ATTACKER, relayd.tls_port, tunnel.hostname, s.ca_file)[0] == 200
    assert res.rss_kb(relayd.process.pid) - before < 32 * MIB_KB


def test_visitors_that_close_after_their_hello_free_their_slots_at_once(stack):
    # 2 links x 64 slots, no per-source share below the tunnel's: the burst could take them all.
    s = stack(relayd_env={"MAX_CONNS_PER_BRIDGE": "64", "MAX_CONNS_PER_TUNNEL_PER_SOURCE": "1024"})
    relayd = s.relayd
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=2)
    before = res.rss_kb(relayd.process.pid)

    attack.hello_then_close(relayd.tls_port, tunnel.hostname, 600)
    # Every slot is free again within seconds, not after the 60 s half-close timeout.
    relayd.wait_metric(lambda m: m.get("opentunnel_visitor_connections_open") == 0, timeout=10,
                       what="the slots of visitors that left to be freed")
    status, body, _ = attack.visit_from(attack.ATTACKER, relayd.tls_port, tunnel.hostname,
                                        s.ca_file)
    assert (status, body) == (200, b"hello from web\n")
    assert res.rss_kb(relayd.process.pid) - before < 32 * MIB_KB


def test_a_hello_announcing_16_mb_is_refused_on_its_header(stack):
    s = stack()
    relayd = s.relayd
    waited = attack.huge_hello(relayd.tls_port, "t.example")
    assert waited < 3, f"held {waited:.1f} s"
    relayd.wait_metric(lambda m: m.visitors("rejected_bad_hello") >= 1,
                       what="the hello counted as bad")
