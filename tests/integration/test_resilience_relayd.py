"""relayd drained (SIGTERM) with several clients and in-flight visitors, then a new relayd on the
same port: visitors that finish within the drain window finish byte for byte, one that cannot is
cut when the window ends, relayd exits 0, and the clients come back to the new relayd with the
spec's jittered backoff (protocol.md section 10), not all at once."""
import signal
import time

import harness
import resilience_harness as rz

MB = 1_000_000
CLIENTS = 3
LINKS = 4


def _largest_cluster(times, width):
    """The most attach times that fall within any window of `width` seconds."""
    times = sorted(times)
    best = 0
    start = 0
    for end in range(len(times)):
        while times[end] - times[start] > width:
            start += 1
        best = max(best, end - start + 1)
    return best


def test_relayd_drain_finishes_inflight_visitors_and_clients_return_spread_out(stack, tmp_path):
    drain_ms = 4000
    s = stack(relayd_env={"SHUTDOWN_DRAIN_MS": str(drain_ms)})
    web = s.origin()
    clients = [s.tunnel(web.port, links=LINKS, name=f"c{i}") for i in range(CLIENTS)]
    old = s.relayd
    port = old.tls_port
    rz.wait_metrics(old, {"opentunnel_bridges_attached": CLIENTS * LINKS})

    # In flight when SIGTERM comes: a paced download per client (~1.5 s) and an upload, all
    # well within the drain window; and one download far longer than the window.
    finishing = [rz.Download(rz.tunnel_url(c, old), s.ca_file, 3 * MB, f"drain-{c.name}",
                             tmp_path / f"{c.name}.bin", rate=2 * MB) for c in clients]
    finishing.append(rz.Upload(rz.tunnel_url(clients[0], old), s.ca_file, 2 * MB, "drain-up",
                               tmp_path, limit_rate=1_500_000))
    too_long = rz.Download(rz.tunnel_url(clients[1], old), s.ca_file, 40 * MB, "too-long",
                           tmp_path / "too-long.bin", rate=2 * MB)

    def upload_in_flight():  # the origin has its request: routed, TLS done, the body coming
        return any(method == "POST" for method, _, _ in list(web.requests))

    try:
        # SIGTERM only once every transfer is in flight: a visitor that connects during the
        # drain is refused, as it should be (a busy box can start curl that late).
        harness.wait_until(lambda: all(d.in_flight() for d in finishing[:CLIENTS])
                           and too_long.in_flight() and upload_in_flight(), 30,
                           "the downloads and the upload to be in flight")
        terminated_at = time.monotonic()
        old.process.send_signal(signal.SIGTERM)
        for transfer in finishing:
            transfer.assert_intact(timeout=60)
        assert time.monotonic() - terminated_at < drain_ms / 1000

        # The drain window ends: what is left is cut, relayd exits 0.
        assert old.process.wait(30) == 0, old.log_text()[-3000:]
        exited_after = time.monotonic() - terminated_at
        assert drain_ms / 1000 - 0.5 <= exited_after <= drain_ms / 1000 + 10, exited_after
        code, stdout, _ = too_long.wait(30)
        assert code != 0, stdout  # cut, not completed
        assert too_long.out.stat().st_size < 40 * MB
        assert f"draining bridges={CLIENTS * LINKS}" in old.log_text()

        # A new relayd on the same port: every link of every client comes back to it.
        new = s.start_relayd(env={"SHUTDOWN_DRAIN_MS": "200"}, name="relayd-new",
                             tls_port=port)
        for client in clients:
            client.wait_connected(count=2, timeout=90)
        metrics = rz.wait_metrics(new, {"opentunnel_bridges_attached": CLIENTS * LINKS})
        assert metrics.attaches("ok") == CLIENTS * LINKS

        # Not all at once: each link waits its own jittered backoff.
        times = rz.log_times(new, "bridge attached")
        assert len(times) == CLIENTS * LINKS, times
        span = max(times) - min(times)
        cluster = _largest_cluster(times, 0.005)
        print(f"\n{len(times)} attaches over {span * 1000:.0f} ms, at most {cluster} within 5 ms")
        assert span >= 0.1, times
        assert cluster <= CLIENTS * LINKS * 2 // 3, times

        for client in clients:
            rz.get_hello(rz.tunnel_url(client, new), s.ca_file)
        for client in clients:
            assert client.process.poll() is None  # nobody gave up
    finally:
        for transfer in finishing + [too_long]:
            transfer.kill()
