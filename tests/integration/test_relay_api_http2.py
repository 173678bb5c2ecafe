"""The API domain over HTTP/2 (ALPN h2) and HTTP/1.1 through the real relayd + controld, and what
relayd does to API connections when it drains (docs/relayd.md, "API over HTTP/2" and "Shutdown").
HTTP/2 frames are written by hand here (RFC 9113 section 4.1) where curl cannot send them."""
import json
import signal
import struct
import subprocess
import time

import pytest

import harness
import relay_harness as rh

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
GOAWAY = 0x7


def api_curl(relayd, method, path, *args, token=None):
    """curl to the API domain; stdout ends with '\\n<http_version> <status>'."""
    url = f"{relayd.server_url}{path}"
    extra = ["-X", method, "-w", "\n%{http_version} %{http_code}"]
    if token:
        extra += ["-H", f"Authorization: Bearer {token}"]
    return rh.curl_url(url, relayd.ca_file, *extra, *args, timeout=60)


def split(result):
    assert result.returncode == 0, result.stderr
    body, _, status = result.stdout.rpartition("\n")
    return body, status


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(
        ">I", stream) + payload


def read_frames(sock, until_type=None):
    """Frames from `sock` until EOF (or until a frame of `until_type`): [(type, flags, payload)]."""
    data = b""
    frames = []
    while True:
        while len(data) >= 9:
            length = int.from_bytes(data[:3], "big")
            if len(data) < 9 + length:
                break
            frames.append((data[3], data[4], data[9:9 + length]))
            data = data[9 + length:]
            if until_type is not None and frames[-1][0] == until_type:
                return frames
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, OSError):
            return frames
        if not chunk:
            return frames
        data += chunk


def h2_socket(relayd):
    sock = rh.tls_connect(relayd.tls_port, rh.DOMAIN, relayd.ca_file, timeout=15, alpn=("h2",))
    assert sock.selected_alpn_protocol() == "h2"
    return sock


def goaway_error(frames):
    goaways = [payload for kind, _, payload in frames if kind == GOAWAY]
    assert goaways, f"no GOAWAY among {[kind for kind, _, _ in frames]}"
    return struct.unpack(">I", goaways[0][4:8])[0]


def test_api_answers_over_h2_and_http11_and_the_bridge_stays_http11(stack):
    s = stack()
    relay = s.relayd

    # Creating a tunnel and reading it back over HTTP/2, then over HTTP/1.1.
    body, status = split(api_curl(relay, "POST", "/api/tunnel", "--http2"))
    assert status == "2 201", body
    created = json.loads(body)
    body, status = split(api_curl(relay, "GET", f"/api/tunnel/{created['id']}", "--http2",
                                  token=created["token"]))
    assert status == "2 200", body
    assert json.loads(body)["id"] == created["id"]
    body, status = split(api_curl(relay, "GET", f"/api/tunnel/{created['id']}", "--http1.1",
                                  token=created["token"]))
    assert status == "1.1 200", body
    assert json.loads(body)["id"] == created["id"]
    body, status = split(api_curl(relay, "POST", "/api/tunnel", "--http1.1"))
    assert status == "1.1 201", body

    # Several requests on one h2 connection at once (curl multiplexes --parallel transfers).
    url = f"{relay.server_url}/api/tunnel/{created['id']}"
    parallel = rh.curl(["--cacert", str(relay.ca_file), "--resolve",
                        f"{rh.DOMAIN}:{relay.tls_port}:127.0.0.1", "--http2", "--parallel",
                        "--parallel-immediate", "-H", f"Authorization: Bearer {created['token']}",
                        "-w", "%{http_version} %{http_code} %{num_connects}\n", "-o",
                        "/dev/null", url, "-o", "/dev/null", url, "-o", "/dev/null", url])
    assert parallel.returncode == 0, parallel.stderr
    lines = parallel.stdout.split()
    assert lines.count("200") == 3 and lines.count("2") >= 3, parallel.stdout

    # The bridge upgrade asked for over h2: a clear error, the connection otherwise fine.
    body, status = split(api_curl(relay, "GET", f"/api/tunnel/{created['id']}/bridge", "--http2"))
    assert status == "2 400", body
    assert json.loads(body)["_tag"] == "BadRequestError"
    assert "HTTP/1.1" in json.loads(body)["message"]

    # controld gone: 503 JSON on h2 as on HTTP/1.1.
    s.controld.stop()
    body, status = split(api_curl(relay, "GET", f"/api/tunnel/{created['id']}", "--http2",
                                  token=created["token"]))
    assert status == "2 503", body
    assert json.loads(body)["_tag"] == "ServiceUnavailableError"
    s.controld.start()
    relay.wait_log("control session up", count=2)


def test_malformed_h2_gets_goaway_and_relayd_keeps_serving(stack):
    s = stack()
    relay = s.relayd

    # Not the client preface: GOAWAY, then the close.
    with h2_socket(relay) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 16)
        frames = read_frames(sock)
    assert goaway_error(frames) != 0  # PROTOCOL_ERROR

    # The preface, then DATA on stream 0: a connection error (PROTOCOL_ERROR).
    with h2_socket(relay) as sock:
        sock.sendall(PREFACE + frame(0x4, 0, 0) + frame(0x0, 0x1, 0, b"junk"))
        frames = read_frames(sock)
    assert goaway_error(frames) == 0x1

    # A SETTINGS frame of a length no SETTINGS can have: FRAME_SIZE_ERROR.
    with h2_socket(relay) as sock:
        sock.sendall(PREFACE + frame(0x4, 0, 0, b"\0\0\0"))
        frames = read_frames(sock)
    assert goaway_error(frames) == 0x6

    body, status = split(api_curl(relay, "POST", "/api/tunnel", "--http2"))
    assert status == "2 201", body


@pytest.mark.waits
def test_drain_closes_idle_api_connections_and_says_connection_close(stack):
    s = stack(relayd_env={"SHUTDOWN_DRAIN_MS": "8000"})
    relay = s.relayd

    # An HTTP/1.1 keep-alive connection that got its answer and sits idle.
    idle = rh.tls_connect(relay.tls_port, rh.DOMAIN, relay.ca_file, timeout=15)
    idle.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: " + rh.DOMAIN.encode() + b"\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += idle.recv(65536)
    assert head.startswith(b"HTTP/1.1 200") and b"connection: close" not in head.lower()
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    rest = head.split(b"\r\n\r\n", 1)[1]
    while len(rest) < length:
        rest += idle.recv(65536)
    # An HTTP/2 connection with no stream open.
    h2 = h2_socket(relay)
    h2.sendall(PREFACE + frame(0x4, 0, 0))

    relay.process.send_signal(signal.SIGTERM)
    relay.wait_log("draining")
    # Both are closed by the drain, long before its end (relayd is still serving).
    assert idle.recv(65536) == b""
    assert goaway_error(read_frames(h2)) == 0
    assert relay.process.poll() is None
    idle.close()
    h2.close()

    # A request during the drain is answered, with Connection: close.
    answer = relay.api("GET", "/openapi.json")
    assert answer.status == 200
    assert {k.lower(): v for k, v in answer.headers.items()}.get("connection") == "close"
    assert relay.process.wait(30) == 0


def test_open_request_gets_the_shutdown_grace(stack):
    s = stack(relayd_env={"SHUTDOWN_DRAIN_MS": "500"})
    relay = s.relayd
    s.controld.process.send_signal(signal.SIGSTOP)  # controld holds the request unanswered
    try:
        request = subprocess.Popen(
            ["curl", "-sS", "--http1.1", "--cacert", str(relay.ca_file), "--resolve",
             f"{rh.DOMAIN}:{relay.tls_port}:127.0.0.1", "-w", "%{http_code}", "-o", "/dev/null",
             f"{relay.server_url}/openapi.json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        relay.wait_metric(
            lambda m: (m.get("opentunnel_api_tls_handshakes_total", result="ok") or 0) >= 1,
            what="the request to reach relayd")
        relay.process.send_signal(signal.SIGTERM)
        relay.wait_log("stopped listening")
        # The grace is a duration: hold controld past the 1 s relayd used to give, within 10 s.
        time.sleep(2.5)
        assert relay.process.poll() is None
    finally:
        s.controld.process.send_signal(signal.SIGCONT)
    stdout, stderr = request.communicate(timeout=30)
    assert request.returncode == 0, stderr
    assert stdout == "200"
    assert relay.process.wait(30) == 0  # and exits once nothing is open



@pytest.mark.waits
def test_idle_h2_connection_outlives_the_handshake_deadline(stack):
    s = stack()
    relay = s.relayd
    with h2_socket(relay) as sock:
        sock.sendall(PREFACE + frame(0x4, 0, 0))
        # Quiet for longer than the handshake's 5 s after the ClientHello: the keep-alive idle
        # limit (60 s) applies now, so no GOAWAY comes. This waits on nothing happening.
        sock.settimeout(7)
        frames = read_frames(sock, until_type=GOAWAY)
        assert GOAWAY not in [kind for kind, _, _ in frames]
        sock.settimeout(15)
        authority = rh.DOMAIN.encode()
        block = bytes([0x82, 0x87, 0x84, 0x41, len(authority)]) + authority  # GET https /
        sock.sendall(frame(0x1, 0x5, 1, block))
        frames = read_frames(sock, until_type=0x1)
        assert frames and frames[-1][0] == 0x1, frames
