"""API TLS handshake admission in a reconnect storm (docs/relayd.md, "Built for many idle
bridges"): with all 256 handshake slots taken, a new API connection waits up to 1 s for one and
is then shed (reset before its handshake, connections_shed_total{reason="handshakes"}); one
that is waiting when a slot frees gets it and completes its handshake. Until this change relayd
shed such a connection at once."""
import ssl
import threading
import time

import attacks_handshakes as attack
import harness
import relay_harness as rh

SLOTS = 256
PER_SOURCE = 32


def wait_server_hello(sock, timeout=10):
    """Until relayd answered the hello (its ServerHello is readable): the handshake holds a slot."""
    sock.settimeout(timeout)
    assert sock.recv(1, 0x02)  # MSG_PEEK: leave the bytes where they are


def test_api_connections_wait_a_second_for_a_handshake_slot_then_are_shed(stack):
    s = stack()
    relayd = s.relayd
    sockets = []
    try:
        # Every slot taken by silent handshakes (8 addresses x their share of 32), each answered.
        for i in range(SLOTS // PER_SOURCE):
            opened, _ = attack.open_silent_handshakes(relayd.tls_port, rh.DOMAIN, PER_SOURCE,
                                                      source=f"127.0.0.{10 + i}")
            sockets += opened
        for sock in sockets:
            wait_server_hello(sock)

        # One more from another address: no slot, so it waits about 1 s and is shed unserved.
        probe, sent_at = attack.open_silent_handshakes(relayd.tls_port, rh.DOMAIN, 1,
                                                       source="127.0.0.30")
        try:
            _, how = rh.wait_closed(probe[0], max(0.01, sent_at[0] + 4 - time.monotonic()))
            held = time.monotonic() - sent_at[0]
        except TimeoutError:
            held = how = None
        attack.close_all(probe)
        assert held is not None, "the connection past the slots was neither served nor shed"
        assert 0.9 <= held <= 2.5, f"shed after {held:.2f} s, not after a wait of 1 s"
        # Reset, not closed: no FIN exchange and no TIME_WAIT socket per shed in a storm.
        assert how == "reset", how
        metrics = relayd.metrics()
        assert metrics.get("opentunnel_connections_shed_total", reason="handshakes") == 1
        assert "API connection shed before its TLS handshake" in relayd.log_text()

        # A real client that is waiting when a slot frees gets that slot and its handshake.
        outcome = {}

        def handshake():
            started = time.monotonic()
            try:
                with rh.tls_connect(relayd.tls_port, rh.DOMAIN, relayd.ca_file, timeout=10):
                    outcome["ok"] = time.monotonic() - started
            except (OSError, ssl.SSLError) as error:
                outcome["error"] = repr(error)
        waited_before = relayd.log_text().count("API connection waits for a handshake slot")
        client = threading.Thread(target=handshake)
        client.start()
        relayd.wait_log("API connection waits for a handshake slot", timeout=5,
                        count=waited_before + 1)
        sockets.pop().close()  # that handshake fails at once: its slot goes to the waiter
        client.join(15)
        assert "ok" in outcome, outcome
        assert outcome["ok"] < 2.0, outcome
        metrics = relayd.metrics()
        assert metrics.get("opentunnel_connections_shed_total", reason="handshakes") == 1
    finally:
        attack.close_all(sockets)


def test_a_finished_handshake_gives_its_slot_back_before_the_upgrade(stack):
    """A slot counts a TLS handshake in progress, nothing after it: 256 API connections whose
    handshakes completed and which then send nothing (no upgrade, no request) hold none, so the
    next connection's handshake starts at once instead of waiting for a slot or being shed."""
    s = stack()
    relayd = s.relayd
    context = rh.client_context(relayd.ca_file)
    ok_before = relayd.metrics().get("opentunnel_api_tls_handshakes_total", result="ok") or 0
    idle = []
    try:
        for i in range(SLOTS // PER_SOURCE):
            for _ in range(PER_SOURCE):
                raw = attack.connect_from(f"127.0.0.{40 + i}", relayd.tls_port)
                idle.append(context.wrap_socket(raw, server_hostname=rh.DOMAIN))
        metrics = relayd.metrics()
        assert metrics.get("opentunnel_api_tls_handshakes_total", result="ok") == ok_before + SLOTS

        started = time.monotonic()
        with rh.tls_connect(relayd.tls_port, rh.DOMAIN, relayd.ca_file, timeout=10):
            took = time.monotonic() - started
        assert "API connection waits for a handshake slot" not in relayd.log_text()
        assert took < 0.9, f"the handshake took {took:.2f} s: it waited for a slot"
        metrics = relayd.metrics()
        assert metrics.get("opentunnel_connections_shed_total", reason="handshakes") == 0
    finally:
        attack.close_all(idle)
