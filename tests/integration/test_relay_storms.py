"""Storms that clear in seconds (protocol.md section 10, relayd.md "Draining"): otunnel tells a
relay that is restarting or busy from a broken one. A draining relayd refuses new bridges from
their ClientHello (ALPN otunnel-bridge) before any handshake, and the client reads that, the
refused connections while no relayd listens and the new relayd's first answers as "come back
soon": every bridge is back after a restart and no client's wait grew past the busy window (3 s),
which the doubling of the broken schedule would have passed. And a control-plane outage does not
stop a client that could connect: otunnel started while controld is down attaches from its saved
tunnel and checks it with the API once controld is back."""
import re
import signal

import harness
import relay_harness as rh
import resilience_harness as rz

BUSY_CAP_MS = 3000
DELAY = re.compile(r"bridge reconnecting.*?delay_ms=(\d+).*?kind=(\w+)")


def reconnect_delays(otunnel):
    """(delay_ms, kind) of every 'bridge reconnecting' line otunnel logged."""
    return [(int(ms), kind) for ms, kind in DELAY.findall(otunnel.stderr_text())]


def test_relay_restart_brings_every_bridge_back_without_a_long_backoff(stack):
    # A drain long enough that the replacements of the drained bridges knock on the old relayd.
    s = stack(relayd_env={"SHUTDOWN_DRAIN_MS": "3000"})
    web = s.origin()
    tunnels = [s.tunnel(web.port, links=2, name=f"t{i}", extra_args=("--log-level", "info"))
               for i in range(3)]
    old = s.relayd
    port = old.tls_port
    assert all(reconnect_delays(t) == [] for t in tunnels)

    old.process.send_signal(signal.SIGTERM)
    # Replacements asking the draining relayd are closed from their ClientHello, and counted.
    old.wait_metric(lambda m: m.get("opentunnel_connections_shed_total",
                                    reason="draining_bridges") >= 1,
                    timeout=10, what="a bridge refused by the draining relayd")
    # A bridge upgrade without the bridge ALPN gets "come back soon" from the draining relayd,
    # while other API requests are still served.
    refused = old.api("GET", f"/api/tunnel/{tunnels[0].tunnel_id}/bridge", headers={
        "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert refused.status == 503, refused
    assert {k.lower(): v for k, v in refused.headers.items()}.get("retry-after") == "1"
    assert old.api("GET", f"/api/tunnel/{tunnels[0].tunnel_id}",
                   token=tunnels[0].state()["token"]).status == 200
    assert old.process.wait(30) == 0, old.log_text()[-3000:]

    # The new relayd on the same port, after some refused connections: every bridge comes back.
    new = s.start_relayd(env={"SHUTDOWN_DRAIN_MS": "200"}, name="relayd-new", tls_port=port)
    for t in tunnels:
        t.wait_connected(count=2, timeout=30)
    for t in tunnels:
        rz.get_hello(rz.tunnel_url(t, new), s.ca_file)
    assert new.metrics().get("opentunnel_bridges_attached") == 2 * len(tunnels)

    # The clients' own account: the waits they chose between attempts. Restarting and refusing
    # are "busy", which never waits past the busy window; the doubling would have reached 4 s
    # and more by now.
    delays = [d for t in tunnels for d in reconnect_delays(t)]
    assert any(kind == "busy" for _, kind in delays), delays
    assert max(ms for ms, _ in delays) <= BUSY_CAP_MS, delays


def test_otunnel_started_while_controld_is_down_attaches_from_its_saved_tunnel(stack):
    s = stack()
    web = s.origin()
    first = s.tunnel(web.port, links=1, name="first")
    assert first.stop() == 0
    relay = s.relayd
    assert rz.kill_controld(s.controld, signal.SIGTERM) == 0
    rz.wait_metric_value(relay, "opentunnel_control_connected", 0)

    # The same state directory, controld down, relayd up: the saved tunnel attaches as it is.
    again = rh.Otunnel(s.workdir / "again", relay.server_url, s.ca_file, port=web.port, links=1,
                       name="again", state_dir=first.state_dir)
    s.tunnels.append(again)
    again.start()
    again.wait_url(timeout=20)
    again.wait_connected(timeout=20)
    assert again.tunnel_id == first.tunnel_id
    rz.get_hello(rz.tunnel_url(again, relay), s.ca_file)
    assert "checking it in the background" in again.stderr_text()

    # controld comes back: the background check gets its answer and says so.
    rz.restart_controld(s.controld)
    rz.wait_stderr(again, "the control plane answers again", timeout=60)
    rz.get_hello(rz.tunnel_url(again, relay), s.ca_file)
