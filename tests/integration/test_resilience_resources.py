"""Resource exhaustion: relayd out of descriptors pauses its accepts instead of spinning, keeps
the connections it has, and accepts again once descriptors are free; BUFFERED_BYTES_LIMIT holds
under a flood of visitors that never read. relayd's descriptors and memory return to their
baseline afterwards."""
import concurrent.futures
import socket
import time

import harness
import relay_harness as rh
import resilience_harness as rz

MB = 1_000_000
NOFILE = 64
CONNECTIONS = 80  # well past what 64 descriptors leave after relayd's own (~20) and the bridge


def test_out_of_descriptors_pauses_accepts_without_spinning_and_recovers(stack):
    s = stack(start_relayd=False)
    relay = rz.add_relayd(s, rz.LimitedRelayd(s.workdir / "limited", s.controld,
                                              env={"SHUTDOWN_DRAIN_MS": "200"},
                                              name="limited", nofile=NOFILE).start())
    assert f"open file limit soft={NOFILE}" in relay.log_text()
    web = s.origin()
    t = s.tunnel(web.port, links=1)
    # A visitor connected before the descriptors run out, kept across the exhaustion.
    keeper = rh.tls_connect(relay.tls_port, t.hostname, s.ca_file)
    keeper_reader = keeper.makefile("rb")

    def keeper_get():
        keeper.sendall(f"GET /hello HTTP/1.1\r\nHost: {t.hostname}\r\n\r\n".encode())
        status, _, body = rh.read_http_response(keeper_reader)
        assert (status, body) == (200, b"hello from origin\n")
    keeper_get()
    rz.wait_metrics(relay, {"opentunnel_visitor_connections_open": 1})
    kept = rz.KeptMetrics(relay)  # opened now: no descriptor is needed to read it later
    kept.get()
    baseline = rz.ResourceBaseline(relay.process, "relayd")
    assert baseline.fds < NOFILE - 20, baseline.fds

    # Connections that never send a byte: each one relayd accepts holds a descriptor (for
    # the 10 s ClientHello timeout); the kernel queues the rest in the listen backlog.
    flood = []
    try:
        for _ in range(CONNECTIONS):
            flood.append(socket.create_connection(("127.0.0.1", relay.tls_port), timeout=10))
        kept.wait(lambda m: m.get("opentunnel_accept_errors_total", error="emfile") >= 1,
                  timeout=20, what="accept to hit EMFILE")
        assert rz.fd_count(relay.process.pid) >= NOFILE - 2
        # Paused, not spinning: over 2 s relayd uses a small fraction of one CPU.
        cpu_before = rz.cpu_seconds(relay.process.pid)
        wall_before = time.monotonic()
        harness.wait_until(lambda: time.monotonic() - wall_before >= 2.0, 5, "2 s to pass")
        cpu_used = rz.cpu_seconds(relay.process.pid) - cpu_before
        wall = time.monotonic() - wall_before
        emfile = kept.get().get("opentunnel_accept_errors_total", error="emfile")
        print(f"\nout of descriptors: {cpu_used:.2f} s CPU in {wall:.1f} s, {emfile:.0f} EMFILE")
        assert cpu_used < 0.5 * wall, cpu_used
        # One EMFILE per 500 ms pause, not one per loop iteration.
        assert emfile <= 4 * (time.monotonic() - wall_before + 10), emfile
        # What relayd already holds keeps working.
        keeper_get()
    finally:
        for sock in flood:
            sock.close()
        kept.close()

    # Descriptors free again: accepts resume and a new visitor is served, byte for byte.
    rz.get_hello(rz.tunnel_url(t, relay), s.ca_file)
    metrics = relay.metrics()
    assert metrics.visitors("served_local") == 2
    assert metrics.get("opentunnel_accept_errors_total", error="other") == 0
    keeper_get()
    keeper_reader.close()
    keeper.close()
    rz.wait_metrics(relay, {"opentunnel_visitor_connections_open": 0,
                            "opentunnel_bridges_attached": 1}, timeout=30)
    baseline.wait_back(timeout=40)


def test_buffered_bytes_limit_holds_under_a_flood_of_visitors_that_never_read(stack, tmp_path):
    limit = 2 * 1024 * 1024  # the lowest relayd takes is 1 MiB
    links = 4
    stalled_count = 24  # 24 windows of 512 KiB would be 12 MiB, six times the limit
    s = stack(relayd_env={"BUFFERED_BYTES_LIMIT": str(limit)})
    relay = s.relayd
    web = s.origin()
    t = s.tunnel(web.port, links=links)
    rz.wait_metrics(relay, {"opentunnel_bridges_attached": links})
    baseline = rz.ResourceBaseline(relay.process, "relayd")

    stalled = []
    peak = 0
    samples = 0
    kept = rz.KeptMetrics(relay)

    def stalled_visitor(index):
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        raw.settimeout(30)
        raw.connect(("127.0.0.1", relay.tls_port))
        sock = rh.client_context(s.ca_file).wrap_socket(raw, server_hostname=t.hostname)
        sock.sendall(f"GET /bytes?n={50 * MB}&seed=flood{index} HTTP/1.1\r\n"
                     f"Host: {t.hostname}\r\n\r\n".encode())
        return sock
    try:
        # All at once: once relayd stops reading, new handshakes wait with everything else.
        with concurrent.futures.ThreadPoolExecutor(stalled_count) as pool:
            futures = [pool.submit(stalled_visitor, i) for i in range(stalled_count)]
            while not all(f.done() for f in futures):
                peak = max(peak, kept.get().get("opentunnel_relay_buffered_bytes"))
                samples += 1
                time.sleep(0.005)  # the sampling interval
            stalled = [f.result() for f in futures]
        # Sample while the flood backs up, until the too-slow resets have freed it all.
        connections = stalled_count + links
        bound = limit + 65536 * connections
        deadline = time.monotonic() + 45  # too_slow resets come in waves 5 s apart
        while time.monotonic() < deadline:
            metrics = kept.get()
            value = metrics.get("opentunnel_relay_buffered_bytes")
            peak = max(peak, value)
            samples += 1
            assert value <= bound, (value, bound)
            if (metrics.get("opentunnel_visitor_connections_open") == 0 and samples > 50):
                break
            time.sleep(0.02)  # the sampling interval
        print(f"\nbuffered peak {peak / 1024 / 1024:.2f} MiB over {samples} samples "
              f"(limit {limit / 1024 / 1024:.0f} MiB, bound {bound / 1024 / 1024:.2f} MiB)")
        assert peak <= bound
        assert peak >= limit * 3 // 4, peak  # the flood really pressed on the limit
    finally:
        for sock in stalled:
            sock.close()
        kept.close()

    metrics = rz.wait_metrics(relay, {"opentunnel_visitor_connections_open": 0,
                                      "opentunnel_relay_buffered_bytes": 0}, timeout=20)
    assert metrics.get("opentunnel_bridges_attached") == links
    assert metrics.visitors("served_local") == stalled_count
    # A fresh visitor gets everything.
    out = tmp_path / "after.bin"
    got = rh.curl_url(f"{rz.tunnel_url(t, relay)}/bytes?n={8 * MB}&seed=after", s.ca_file,
                      "--http1.1", "-o", str(out), "-w", "%{http_code} %{size_download}")
    assert got.returncode == 0, got.stderr
    assert got.stdout == f"200 {8 * MB}"
    assert rh.sha256_file(out) == rh.pattern_sha256(8 * MB, "after")
    baseline.wait_back(timeout=40)
