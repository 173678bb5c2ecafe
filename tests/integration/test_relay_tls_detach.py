"""Issue 12 item 4: a bridge's TLS drops OpenSSL's per-connection state once the handshake is done
and both sequence numbers are proven (common/tls_engine.h, releaseHandshakeState); relayd then runs
the TLS 1.3 record layer itself (common/tls13_record.h). Real otunnel bridges carry visitors
through detached engines (otunnel's own end detached too), a Python (OpenSSL) bridge pings across the switch, and a bridge limited
to TLS 1.2 stays on OpenSSL and still works, and `openssl s_client` as a bridge's TLS client
attaches and pings. opentunnel_bridge_tls_detach_total counts each."""
import json
import os
import select
import socket
import ssl
import subprocess
import time

import bridge_client as bc
import relay_harness as rh

METRIC = "opentunnel_bridge_tls_detach_total"


def _detach(metrics, result):
    return metrics.get(METRIC, result=result)


def _ping(client, payload):
    client.send_frame(bc.OP_PING, payload)
    deadline = time.monotonic() + 10
    while True:
        _, opcode, data = client.recv_frame(max(0.01, deadline - time.monotonic()))
        if opcode == bc.OP_PONG and data == payload:
            return


def test_otunnel_bridges_detach_and_carry_visitors(stack, tmp_path):
    s = stack()
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=2, extra_args=("--log-level", "info"))
    metrics = s.relayd.wait_metric(lambda m: _detach(m, "detached") >= 2,
                                   what="both bridges detached")
    assert _detach(metrics, "detached") == 2
    for result in ("kept_tls12", "kept_suite", "kept_no_secrets", "kept_unproven"):
        assert _detach(metrics, result) == 0, result

    # Visitors both ways through the detached bridges: small, a megabyte up, an echo.
    for _ in range(4):
        got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "--http1.1")
        assert got.returncode == 0, got.stderr
        assert got.stdout == "hello from web\n"
    payload = tmp_path / "payload.bin"
    sha = rh.write_pattern_file(payload, 3_000_017, "detach")
    posted = rh.curl_url(tunnel.url + "/upload", s.ca_file, "--http1.1",
                         "-H", "Content-Type: application/octet-stream",
                         "--data-binary", f"@{payload}")
    assert posted.returncode == 0, posted.stderr
    assert json.loads(posted.stdout) == {"length": 3_000_017, "sha256": sha}
    echoed = rh.curl_url(tunnel.url + "/echo", s.ca_file, "--http1.1", "--data-binary", "x" * 70000)
    assert echoed.returncode == 0, echoed.stderr
    assert echoed.stdout == "x" * 70000
    assert s.relayd.metrics().visitors("served_local") == 6
    assert "bridge TLS after the handshake" in s.relayd.log_text()
    # otunnel's end detached too (its own record layer seals the frames it sends).
    attached = [line for line in tunnel.stderr_text().splitlines() if "bridge attached" in line]
    assert len(attached) == 2, tunnel.stderr_text()
    assert all("tls=detached" in line for line in attached), attached


def test_a_python_bridge_detaches_and_a_tls12_bridge_stays_on_openssl(stack):
    relay = stack().relayd
    tunnel = bc.create_ready_tunnel(relay, relay.workdir)

    modern = bc.BridgeClient(relay.tls_port, relay.ca_file)
    legacy = bc.BridgeClient(relay.tls_port, relay.ca_file)
    legacy.sock.close()
    context = rh.client_context(relay.ca_file)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    raw = socket.create_connection(("127.0.0.1", relay.tls_port), timeout=15)
    legacy.sock = context.wrap_socket(raw, server_hostname=rh.DOMAIN)
    assert legacy.sock.version() == "TLSv1.2"
    try:
        for client in (modern, legacy):
            assert client.upgrade(tunnel["id"]) == 101
            answer = client.attach(tunnel["token"])
            assert answer["type"] == "attached", answer
        metrics = relay.wait_metric(
            lambda m: _detach(m, "detached") >= 1 and _detach(m, "kept_tls12") >= 1,
            what="one detached, one kept")
        assert _detach(metrics, "detached") == 1
        assert _detach(metrics, "kept_tls12") == 1
        # Both keep answering, small and large pings, many times.
        for i in range(20):
            for client in (modern, legacy):
                _ping(client, bytes([i]) * (1 + i * 6))
    finally:
        modern.close()
        legacy.close()


def _read_until(process, predicate, what, timeout=15):
    """Reads s_client's stdout (the decrypted stream) until predicate(data) holds."""
    data = b""
    deadline = time.monotonic() + timeout
    while not predicate(data):
        left = deadline - time.monotonic()
        assert left > 0, f"no {what} from s_client; got {data[:200]!r}"
        ready, _, _ = select.select([process.stdout], [], [], left)
        if ready:
            chunk = os.read(process.stdout.fileno(), 65536)
            assert chunk, f"s_client ended before {what}; got {data[:200]!r}"
            data += chunk
    return data


def test_openssl_s_client_as_the_bridge_tls_client(stack):
    relay = stack().relayd
    tunnel = bc.create_ready_tunnel(relay, relay.workdir)
    process = subprocess.Popen(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{relay.tls_port}", "-servername",
         rh.DOMAIN, "-CAfile", str(relay.ca_file), "-verify_return_error", "-alpn", "http/1.1",
         "-quiet"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        request = (f"GET /api/tunnel/{tunnel['id']}/bridge HTTP/1.1\r\nHost: {rh.DOMAIN}\r\n"
                   "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                   "\r\n")
        process.stdin.write(request.encode())
        process.stdin.flush()
        head = _read_until(process, lambda d: b"\r\n\r\n" in d, "101")
        assert head.startswith(b"HTTP/1.1 101 "), head[:100]
        attach = json.dumps({"type": "attach", "token": tunnel["token"]}).encode()
        process.stdin.write(bc.encode_frame(bc.OP_TEXT, attach))
        process.stdin.flush()
        _read_until(process, lambda d: b'"attached"' in d, "attached")
        relay.wait_metric(lambda m: _detach(m, "detached") >= 1, what="s_client's bridge detached")
        for i in range(3):  # pings across the detached record layer, s_client's OpenSSL opening
            payload = f"ping-{i}".encode()
            process.stdin.write(bc.encode_frame(bc.OP_PING, payload))
            process.stdin.flush()
            _read_until(process, lambda d, p=payload: bytes([0x8a, len(p)]) + p in d, "pong")
    finally:
        process.kill()
        process.wait()
