"""Bulk data through the tunnel, byte for byte: 100 MB each way, and 200 visitors at once."""
import concurrent.futures
import hashlib
import json
import threading
import time

import relay_harness as rh

MB = 1_000_000


def test_100_mb_upload_and_download_byte_for_byte(stack, tmp_path):
    s = stack()
    web = s.origin()
    tunnel = s.tunnel(web.port, links=2)
    size = 100 * MB + 7  # not a multiple of any frame or chunk size

    upload = tmp_path / "up.bin"
    up_sha = rh.write_pattern_file(upload, size, "upload")
    started = time.monotonic()
    posted = rh.curl_url(tunnel.url + "/upload", s.ca_file, "--http1.1",
                         "-H", "Content-Type: application/octet-stream",
                         "--data-binary", f"@{upload}", timeout=300)
    up_seconds = time.monotonic() - started
    assert posted.returncode == 0, posted.stderr
    assert json.loads(posted.stdout) == {"length": size, "sha256": up_sha}
    upload.unlink()

    download = tmp_path / "down.bin"
    started = time.monotonic()
    got = rh.curl_url(tunnel.url + f"/bytes?n={size}&seed=download", s.ca_file, "--http1.1",
                      "-o", str(download), "-w", "%{http_code} %{size_download}", timeout=300)
    down_seconds = time.monotonic() - started
    assert got.returncode == 0, got.stderr
    assert got.stdout == f"200 {size}"
    assert rh.sha256_file(download) == rh.pattern_sha256(size, "download")
    print(f"\n100 MB through the tunnel: upload {size / MB / up_seconds:.1f} MB/s, "
          f"download {size / MB / down_seconds:.1f} MB/s")

    metrics = s.relayd.metrics()
    assert metrics.get("opentunnel_visitor_bytes_total", direction="in") > size
    assert metrics.get("opentunnel_visitor_bytes_total", direction="out") > size
    assert metrics.visitors("served_local") == 2


def _visit(port, hostname, ca_file, index, connected, go):
    """One visitor: its own TLS connection, held until all are connected, then a GET for a body
    of its own size and seed."""
    length = 20_000 + index * 997
    seed = f"v{index}"
    sock = rh.tls_connect(port, hostname, ca_file, timeout=60)
    try:
        connected.wait(60)
        go.wait(60)
        request = (f"GET /bytes?n={length}&seed={seed} HTTP/1.1\r\nHost: {hostname}\r\n"
                   "Connection: close\r\n\r\n").encode()
        sock.sendall(request)
        reader = sock.makefile("rb")
        status, headers, body = rh.read_http_response(reader)
        return index, status, int(headers["content-length"]), len(body), \
            hashlib.sha256(body).hexdigest() == rh.pattern_sha256(length, seed)
    finally:
        sock.close()


def test_200_concurrent_visitors_get_their_exact_bodies(stack):
    # All 200 come from one address: above the per-source share of a tunnel (128 by default),
    # which is not what this test is about.
    s = stack(relayd_env={"MAX_CONNS_PER_TUNNEL_PER_SOURCE": "256"})
    web = s.origin()
    tunnel = s.tunnel(web.port, links=2)
    count = 200
    connected = threading.Barrier(count + 1)
    go = threading.Barrier(count + 1)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=count)
    try:
        futures = [pool.submit(_visit, s.relayd.tls_port, tunnel.hostname, s.ca_file, i,
                               connected, go) for i in range(count)]
        connected.wait(120)
        # All 200 are through their TLS handshakes with otunnel at the same time.
        assert s.relayd.metrics().get("opentunnel_visitor_connections_open") == count
        go.wait(60)
        results = sorted(f.result(timeout=120) for f in futures)
    finally:
        connected.abort()
        go.abort()
        pool.shutdown(wait=True)
    for index, status, declared, received, sha_ok in results:
        length = 20_000 + index * 997
        assert (status, declared, received, sha_ok) == (200, length, length, True), index
    assert len(results) == count

    metrics = s.relayd.wait_metric(lambda m: m.get("opentunnel_visitor_connections_open") == 0,
                                   what="every visitor connection closed")
    assert metrics.visitors("served_local") == count
    assert metrics.visitors("rejected_too_many_connections") == 0
    assert len(web.requests) == count
