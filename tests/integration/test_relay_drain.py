"""relayd on SIGTERM (protocol.md 4.4, section 10): bridges get drain then close 1012, a visitor
download already in flight finishes intact within SHUTDOWN_DRAIN_MS, relayd exits 0, and
otunnel reconnects to a new relayd started on the same port."""
import signal
import subprocess
import time
import urllib.parse

import harness
import relay_harness as rh

MB = 1_000_000


def test_sigterm_drains_finishes_the_download_and_otunnel_reconnects(stack, tmp_path):
    drain_ms = 3000
    s = stack(relayd_env={"SHUTDOWN_DRAIN_MS": str(drain_ms)})
    web = s.origin()
    tunnel = s.tunnel(web.port, links=2)
    old = s.relayd
    port = old.tls_port

    # A 3 MB download paced at 2 MB/s: in flight for ~1.5 s, well within the drain period.
    size = 3 * MB
    out = tmp_path / "inflight.bin"
    parsed = urllib.parse.urlsplit(tunnel.url)
    download = subprocess.Popen(
        ["curl", "-sS", "--http1.1", "--cacert", str(s.ca_file), "--resolve",
         f"{parsed.hostname}:{port}:127.0.0.1", "-o", str(out), "-w",
         "%{http_code} %{size_download}", f"{tunnel.url}/bytes?n={size}&seed=drain&rate={2 * MB}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        harness.wait_until(lambda: out.exists() and out.stat().st_size > 0, 15,
                           "the download to be in flight")
        terminated_at = time.monotonic()
        old.process.send_signal(signal.SIGTERM)
        stdout, stderr = download.communicate(timeout=60)
    finally:
        if download.poll() is None:
            download.kill()
            download.wait()
    finished_at = time.monotonic()
    assert download.returncode == 0, stderr
    assert stdout == f"200 {size}"
    assert rh.sha256_file(out) == rh.pattern_sha256(size, "drain")
    assert finished_at - terminated_at < drain_ms / 1000

    # otunnel heard drain: it leaves the old relay, which exits 0 once its drain is over.
    assert old.process.wait(30) == 0, old.log_text()[-3000:]
    exited_at = time.monotonic()
    assert exited_at - terminated_at < drain_ms / 1000 + 10
    # The status line names the drain itself (any lost connection would also say "reconnecting").
    assert "the relay is restarting (drain)" in tunnel.stderr_text()

    # A new relayd on the same port: otunnel comes back on its own and says connected again.
    new = s.start_relayd(env={"SHUTDOWN_DRAIN_MS": "200"}, name="relayd-new", tls_port=port)
    assert new.tls_port == port
    tunnel.wait_connected(count=2, timeout=60)
    got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "--http1.1", "-w", " %{http_code}")
    assert got.returncode == 0, got.stderr
    assert got.stdout == "hello from origin\n 200"
    metrics = new.metrics()
    assert metrics.get("opentunnel_bridges_attached") == 2
    assert metrics.visitors("served_local") == 1
