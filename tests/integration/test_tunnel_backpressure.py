"""Per-connection flow control under visitors that stop reading (docs/relayd.md, bridge limits):
the other visitors on the same bridge keep their speed, the relay holds at most one window for a
stalled one, and a stalled visitor is reset as too_slow and its memory freed."""
import concurrent.futures
import socket
import time

import relay_harness as rh

MB = 1_000_000
WINDOW = 524288  # the relay's receive window per connection (attached.limits.window)
BUDGET = 4 * 1024 * 1024  # client data waiting for one bridge's visitors
LAG = WINDOW // 2  # a visitor holding this much unwritten must take 64 KiB within 5 s


def _stalled_visitor(port, hostname, ca_file, size):
    """A visitor that asks for a big download and never reads a byte of it."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)  # keep the kernel's share small
    # Handshakes wait while the bridge is paused over its budget: one 5 s stall wait per batch of
    # visitors that fill it, so the last of 24 may wait for several.
    raw.settimeout(60)
    raw.connect(("127.0.0.1", port))
    sock = rh.client_context(ca_file).wrap_socket(raw, server_hostname=hostname)
    sock.sendall(f"GET /bytes?n={size}&seed=stalled HTTP/1.1\r\nHost: {hostname}\r\n\r\n"
                 .encode())
    return sock


def _timed_download(url, ca_file, size, seed, out):
    started = time.monotonic()
    got = rh.curl_url(f"{url}/bytes?n={size}&seed={seed}", ca_file, "--http1.1", "-o", str(out),
                      "-w", "%{http_code} %{size_download}", timeout=120)
    return got, time.monotonic() - started


def test_a_stalled_visitor_does_not_slow_another_on_the_same_bridge(stack, tmp_path):
    s = stack()
    web = s.origin()
    tunnel = s.tunnel(web.port, links=1)  # one bridge: both visitors share it

    stalled = _stalled_visitor(s.relayd.tls_port, tunnel.hostname, s.ca_file, 200 * MB)
    # The relay holds at most one window for it (credit), and it lags: half a window unwritten.
    lagging = s.relayd.wait_metric(lambda m: m.get("opentunnel_relay_buffered_bytes") >= LAG,
                                   what="the stalled visitor to lag by half a window")
    lag_seen_at = time.monotonic()
    # One window, plus what relayd charges per queued write (64 bytes) and the small frames it
    # queues toward the client meanwhile.
    assert lagging.get("opentunnel_relay_buffered_bytes") <= WINDOW + 16 * 1024

    size = 50 * MB
    out = tmp_path / "fast.bin"
    got, seconds = _timed_download(tunnel.url, s.ca_file, size, "fast", out)
    assert got.returncode == 0, got.stderr
    assert got.stdout == f"200 {size}"
    assert rh.sha256_file(out) == rh.pattern_sha256(size, "fast")
    print(f"\n50 MB next to a stalled visitor: {seconds:.2f} s, {size / MB / seconds:.1f} MB/s")
    assert seconds < 60

    # A visitor that takes less than 32 KiB in 5 s while lagging is reset as too_slow; the
    # bridge itself never waited (no stall), and what the relay held for it is freed.
    freed = s.relayd.wait_metric(
        lambda m: m.get("opentunnel_visitor_connections_open") == 0, timeout=20,
        what="the stalled connection to be reset")
    reset_after = time.monotonic() - lag_seen_at
    assert 4.0 <= reset_after <= 12.0, reset_after
    assert freed.get("opentunnel_bridge_backpressure_total", event="reset") == 1
    assert freed.get("opentunnel_bridge_backpressure_total", event="stall") == 0
    assert freed.get("opentunnel_relay_buffered_bytes") == 0
    assert freed.get("opentunnel_bridges_attached") == 1
    assert freed.visitors("served_local") == 2
    rh.wait_closed(stalled, 10)  # drains what the kernel held, then the reset
    stalled.close()


def test_stalled_visitors_over_the_bridge_budget_are_all_reset_as_too_slow(stack, tmp_path):
    s = stack()
    web = s.origin()
    tunnel = s.tunnel(web.port, links=1)
    count = 24  # 24 windows of 512 KiB are well over one bridge's 4 MiB budget
    # Connect them all at once: while the bridge is not read, new handshakes wait with it.
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        stalled = list(pool.map(lambda _: _stalled_visitor(s.relayd.tls_port, tunnel.hostname,
                                                           s.ca_file, 100 * MB), range(count)))
    # The budget was reached: seen held now, or a stall wait (armed only past the budget) already
    # ended. On a slow machine connecting 24 visitors takes longer than that wait, and the first
    # ones are reset before the last connect, so what is held at this moment may be less.
    s.relayd.wait_metric(
        lambda m: (m.get("opentunnel_relay_buffered_bytes") >= BUDGET * 0.9
                   or m.get("opentunnel_bridge_backpressure_total", event="stall") >= 1),
        timeout=30, what="the bridge's visitors to reach its budget")

    # A fast visitor still gets its whole download. Each 5 s wait of the bridge resets the
    # visitors that held data and took < 64 KiB of it; visitors that had been given nothing yet
    # fill the budget next, so 24 stalled visitors cost one to three waits (measured, printed).
    size = 20 * MB
    out = tmp_path / "fast.bin"
    got, seconds = _timed_download(tunnel.url, s.ca_file, size, "fast", out)
    assert got.returncode == 0, got.stderr
    assert got.stdout == f"200 {size}"
    assert rh.sha256_file(out) == rh.pattern_sha256(size, "fast")
    print(f"\n20 MB next to {count} stalled visitors: {seconds:.2f} s")
    assert seconds < 60

    # Every stalled visitor ends up reset as too_slow, whichever limit caught it first; the
    # bridge survives and holds nothing.
    metrics = s.relayd.wait_metric(
        lambda m: m.get("opentunnel_visitor_connections_open") == 0, timeout=60,
        what="every stalled visitor to be reset")
    print(f"stalls {metrics.get('opentunnel_bridge_backpressure_total', event='stall')}, "
          f"resets {metrics.get('opentunnel_bridge_backpressure_total', event='reset')}")
    assert metrics.get("opentunnel_bridge_backpressure_total", event="reset") == count
    assert metrics.get("opentunnel_bridge_backpressure_total", event="stall") >= 1
    assert metrics.get("opentunnel_relay_buffered_bytes") == 0
    assert metrics.get("opentunnel_bridges_attached") == 1
    assert metrics.attaches("ok") == 1  # the bridge was never replaced
    assert metrics.visitors("served_local") == count + 1
    for sock in stalled:
        sock.close()
