"""TLS session resumption for bridges (docs/relayd.md, Session resumption): relayd seals its
session tickets with keys kept in STATE_DIR/tls-ticket-keys (0600), so a relayd restarted on the
same state directory resumes the sessions of the bridges that come back (the reconnect storm of a
restart costs resumed handshakes); otunnel offers the newest ticket of its relay. A relayd with
other keys does a full handshake and the bridge still attaches."""
import stat

import relay_harness as rh

SESSIONS = "opentunnel_api_tls_sessions_total"


def sessions(relay, kind):
    return relay.metrics().get(SESSIONS, handshake=kind) or 0


def test_otunnel_resumes_across_a_relayd_restart_with_the_same_state_dir(stack, tmp_path):
    state = tmp_path / "relay-state"
    env = {"STATE_DIR": str(state), "SHUTDOWN_DRAIN_MS": "200"}
    s = stack(relayd_env=env)
    web = s.origin()
    tunnel = s.tunnel(web.port, links=1)
    first = s.relayd
    port = first.tls_port
    assert sessions(first, "full") >= 1  # otunnel's first bridge: nothing to resume yet
    assert sessions(first, "resumed") == 0

    keys = state / "tls-ticket-keys"
    assert keys.exists()
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert first.stop() == 0

    # The same state directory: the bridge comes back on a resumed handshake.
    second = s.start_relayd(env=env, name="relayd-same-keys", tls_port=port)
    tunnel.wait_connected(count=2, timeout=60)
    second.wait_metric(lambda m: (m.get(SESSIONS, handshake="resumed") or 0) >= 1,
                       what="a resumed bridge handshake on the restarted relayd")
    assert second.metrics().get("opentunnel_bridges_attached") == 1
    got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "--http1.1")
    assert got.returncode == 0, got.stderr
    assert got.stdout == "hello from origin\n"
    assert second.stop() == 0

    # Another relayd's keys (a fresh state directory): a full handshake, and it still attaches.
    third = s.start_relayd(env={**env, "STATE_DIR": str(tmp_path / "other-state")},
                           name="relayd-other-keys", tls_port=port)
    tunnel.wait_connected(count=3, timeout=60)
    third.wait_metric(lambda m: m.get("opentunnel_bridges_attached") == 1,
                      what="the bridge attached to the relayd with other keys")
    assert sessions(third, "resumed") == 0
    assert sessions(third, "full") >= 1


def test_a_damaged_ticket_key_file_is_replaced_and_relayd_serves(stack, tmp_path):
    state = tmp_path / "relay-state"
    state.mkdir()
    keys = state / "tls-ticket-keys"
    keys.write_text("not a key file\n")
    s = stack(relayd_env={"STATE_DIR": str(state)})
    web = s.origin()
    s.tunnel(web.port, links=1)
    assert "the TLS ticket key file is damaged" in s.relayd.log_text()
    assert keys.read_text().startswith("opentunnel-tls-ticket-keys v1\n")
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert s.relayd.metrics().get("opentunnel_bridges_attached") == 1
