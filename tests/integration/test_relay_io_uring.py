"""Issue 12 item 4: idle bridges read through io_uring and are pinged in one submission per tick
(relayd/io_ring.h, docs/relayd.md "io_uring for idle bridges"). Real otunnel bridges: while idle
they are armed in the ring and their heartbeats go through it, a visitor's stream moves the bridge
back to libuv with every byte in order (small answers, 3 MB up, an echo), and the bridge returns
to the ring when its streams end. With IO_URING=false the same traffic works through libuv alone."""
import json

import relay_harness as rh

RING = "opentunnel_relay_ring_total"
ARMED = "opentunnel_relay_ring_armed"
HEARTBEAT_ENV = {"BRIDGE_HEARTBEAT_MS": "1000"}


def _visits(s, tunnel, tmp_path):
    for _ in range(3):
        got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "--http1.1")
        assert got.returncode == 0, got.stderr
        assert got.stdout == "hello from web\n"
    payload = tmp_path / "payload.bin"
    sha = rh.write_pattern_file(payload, 3_000_017, "ring")
    posted = rh.curl_url(tunnel.url + "/upload", s.ca_file, "--http1.1",
                         "-H", "Content-Type: application/octet-stream",
                         "--data-binary", f"@{payload}")
    assert posted.returncode == 0, posted.stderr
    assert json.loads(posted.stdout) == {"length": 3_000_017, "sha256": sha}
    echoed = rh.curl_url(tunnel.url + "/echo", s.ca_file, "--http1.1", "--data-binary", "z" * 70000)
    assert echoed.returncode == 0, echoed.stderr
    assert echoed.stdout == "z" * 70000


def test_idle_bridges_read_and_are_pinged_through_the_ring(stack, tmp_path):
    s = stack(relayd_env=HEARTBEAT_ENV)
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=2)
    s.relayd.wait_metric(lambda m: m.get(ARMED) == 2, what="both idle bridges armed in the ring")
    # Heartbeats: relayd's pings leave in its tick's batch, the pongs come back through the ring.
    before = s.relayd.wait_metric(
        lambda m: m.get(RING, event="send") >= 2 and m.get(RING, event="receive") >= 2,
        what="pings sent and pongs read through the ring")

    _visits(s, tunnel, tmp_path)
    assert s.relayd.metrics().visitors("served_local") == 5
    # Streams over: both bridges read through the ring again, and their heartbeats go on there.
    after = s.relayd.wait_metric(
        lambda m: m.get(ARMED) == 2
        and m.get(RING, event="send") >= before.get(RING, event="send") + 2,
        what="the bridges back in the ring, still pinged")
    assert after.get("opentunnel_bridges_attached") == 2
    assert after.get(RING, event="out_of_buffers") == 0
    got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "--http1.1")
    assert got.returncode == 0, got.stderr
    assert "io_uring=on" in s.relayd.log_text()


def test_without_io_uring_the_same_traffic_goes_through_libuv(stack, tmp_path):
    s = stack(relayd_env={**HEARTBEAT_ENV, "IO_URING": "false"})
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=2)
    s.relayd.wait_metric(lambda m: m.get("opentunnel_bridges_attached") == 2,
                         what="both bridges attached")
    _visits(s, tunnel, tmp_path)
    metrics = s.relayd.metrics()
    assert metrics.visitors("served_local") == 5
    assert "io_uring=\"off (IO_URING)\"" in s.relayd.log_text() or \
        "io_uring=off (IO_URING)" in s.relayd.log_text(), s.relayd.log_text()[-2000:]
    assert metrics.get(ARMED) == 0
    assert metrics.get(RING, event="send") == 0
    assert metrics.get(RING, event="receive") == 0
