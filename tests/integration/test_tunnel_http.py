"""Visitors reach a local service through relayd and otunnel: HTTP/1.1 (otunnel http), HTTP/2
(otunnel tls passthrough to nghttpd with TLS, and otunnel http --http2 to nghttpd --no-tls),
named routes, unknown routes refused, and a local service that is down answered 502.
Every TLS connection verifies the tunnel's certificate against controld's local CA (no -k)."""
import json
import shutil
import signal
import socket
import subprocess

import pytest

import harness
import relay_harness as rh


def test_http1_get_and_post_through_the_tunnel(stack, tmp_path):
    s = stack()
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=2)
    assert tunnel.url == f"https://{tunnel.hostname}:{s.relayd.tls_port}"

    got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "--http1.1",
                      "-w", "\n%{http_code} %{http_version} %{ssl_verify_result}")
    assert got.returncode == 0, got.stderr
    assert got.stdout == "hello from web\n\n200 1.1 0"

    payload = tmp_path / "payload.bin"
    sha = rh.write_pattern_file(payload, 1_000_003, "post")
    posted = rh.curl_url(tunnel.url + "/upload", s.ca_file, "--http1.1",
                         "-H", "Content-Type: application/octet-stream",
                         "--data-binary", f"@{payload}")
    assert posted.returncode == 0, posted.stderr
    assert json.loads(posted.stdout) == {"length": 1_000_003, "sha256": sha}

    echoed = rh.curl_url(tunnel.url + "/echo", s.ca_file, "--http1.1",
                         "--data-binary", "ping-pong")
    assert echoed.returncode == 0, echoed.stderr
    assert echoed.stdout == "ping-pong"

    # The origin saw the visitor's Host and the requests in order.
    assert [(m, p) for m, p, _ in web.requests] == [("GET", "/hello"), ("POST", "/upload"),
                                                    ("POST", "/echo")]
    assert web.requests[0][2]["Host"] == f"{tunnel.hostname}:{s.relayd.tls_port}"

    metrics = s.relayd.metrics()
    assert metrics.visitors("served_local") == 3
    assert metrics.get("opentunnel_bridges_attached") == 2
    assert metrics.attaches("ok") == 2


def test_http_mode_serves_a_default_curl_from_an_http1_origin(stack):
    # curl offers h2 and http/1.1 by default, as browsers do. `otunnel http <port>` forwards to a
    # plain HTTP/1.1 service, so the visitor must end up speaking HTTP/1.1 (or be translated).
    s = stack()
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=1)
    got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "-w", "\n%{http_code} %{http_version}")
    assert got.returncode == 0, got.stderr
    assert got.stdout == "hello from web\n\n200 1.1"


def test_a_local_service_that_is_down_answers_502_and_tells_the_user(stack):
    # Nothing listens on the port: the visitor's TLS still verifies and completes, and the
    # request gets a 502 naming the local address, instead of a reset mid-handshake. Once the
    # service is up, the same tunnel serves it.
    s = stack()
    # Bound but not listening: connects are refused, and no other process can take the port.
    placeholder = socket.socket()
    placeholder.bind(("127.0.0.1", 0))
    port = placeholder.getsockname()[1]
    tunnel = s.tunnel(port, links=1)
    got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "-w", "\n%{http_code} %{ssl_verify_result}")
    assert got.returncode == 0, got.stderr
    body, status = got.stdout.rsplit("\n", 1)
    assert status == "502 0"
    assert f"127.0.0.1:{port} (connection refused)" in body
    harness.wait_until(lambda: "cannot reach the local service" in tunnel.stderr_text(),
                       what="otunnel's warning")
    assert f"target=127.0.0.1:{port}" in tunnel.stderr_text()

    placeholder.close()
    web = s.origin("web", port=port)
    got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "-w", "\n%{http_code}")
    assert got.returncode == 0, got.stderr
    assert got.stdout == "hello from web\n\n200"


def test_api_head_through_relayd_passes_controlds_answer_head_only(stack):
    # relayd proxies the API to controld and re-frames the answer. controld answers HEAD (405: its
    # routes are GET/POST/DELETE) with a Content-Length and no body; relayd must pass that on as a
    # head, not wait for a body that never comes and answer 503.
    s = stack()
    head = s.relayd.api("HEAD", "/openapi.json")
    assert head.status == 405, (head.status, head.headers)
    assert head.body == b""
    assert int(head.headers["Content-Length"]) > 0
    assert head.headers["Content-Type"] == "application/json"
    assert s.relayd.api("GET", "/openapi.json").status == 200  # the next call is served as usual


def test_every_link_is_a_distinct_bridge_in_the_api(stack):
    s = stack()
    web = s.origin()
    tunnel = s.tunnel(web.port, links=4)
    state = tunnel.state()
    assert state["id"] == tunnel.tunnel_id

    def online():
        info = s.relayd.api("GET", f"/api/tunnel/{tunnel.tunnel_id}", token=state["token"])
        assert info.status == 200, info
        body = info.json()
        return body if body["state"] == "online" and body["bridges"] == 4 else None
    try:
        body = harness.wait_until(online, 10, "the tunnel online with 4 bridges")
    except TimeoutError:
        info = s.relayd.api("GET", f"/api/tunnel/{tunnel.tunnel_id}", token=state["token"])
        pytest.fail(f"expected state online with 4 bridges, got {info.json()}; otunnel log:\n"
                    + tunnel.stderr_text())
    assert body["id"] == tunnel.tunnel_id
    assert body["hostname"] == tunnel.hostname
    # relayd (LOG_LEVEL=debug) names each bridge it attached.
    ids = [line.split("bridge=")[1].split()[0] for line in s.relayd.log_text().splitlines()
           if "bridge attached" in line and f"tunnel={tunnel.tunnel_id}" in line]
    assert len(ids) == 4 and len(set(ids)) == 4, ids
    assert s.relayd.metrics().get("opentunnel_bridges_attached") == 4


def test_named_routes_reach_their_own_service_and_unknown_routes_are_refused(stack):
    s = stack()
    web = s.origin("web")
    api = s.origin("api")
    tunnel = s.tunnel(web.port, routes={"api": api.port}, links=1)
    port = s.relayd.tls_port

    bare = rh.curl_url(tunnel.url + "/hello", s.ca_file, "--http1.1")
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout == "hello from web\n"

    api_url = f"https://api.{tunnel.hostname}:{port}"
    routed = rh.curl_url(api_url + "/hello", s.ca_file, "--http1.1", "-w", " %{http_code}")
    assert routed.returncode == 0, routed.stderr
    assert routed.stdout == "hello from api\n 200"
    assert [p for _, p, _ in api.requests] == ["/hello"]
    assert api.requests[0][2]["Host"] == f"api.{tunnel.hostname}:{port}"

    before = s.relayd.metrics().visitors("rejected_unknown_route")
    unknown = rh.curl_url(f"https://nope.{tunnel.hostname}:{port}/hello", s.ca_file, "--http1.1")
    # The relay closes the connection during the TLS handshake: curl's 35 (SSL connect error).
    assert unknown.returncode == 35, (unknown.returncode, unknown.stderr)
    after = s.relayd.wait_metric(
        lambda m: m.visitors("rejected_unknown_route") >= before + 1, what="the rejection counted")
    assert after.visitors("rejected_unknown_route") == before + 1
    assert after.visitors("served_local") == 2
    assert len(web.requests) == 1 and len(api.requests) == 1


# Debian's nghttp2-server (deploy/install-deps.sh installs it): missing is a failure, not a skip.
NGHTTPD = shutil.which("nghttpd") or "/usr/sbin/nghttpd"


class Nghttpd:
    """nghttpd serving `docroot` on 127.0.0.1:`port`, with TLS (key, cert) or h2c (no TLS)."""

    def __init__(self, tmp_path, docroot, port, key=None, cert=None):
        self.log_path = tmp_path / f"nghttpd-{port}.log"
        self.log = open(self.log_path, "wb")
        args = [NGHTTPD, f"--htdocs={docroot}", "--address=127.0.0.1"]
        args += [str(port), str(key), str(cert)] if key else ["--no-tls", str(port)]
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

        def listening():
            if self.process.poll() is not None:
                raise RuntimeError("nghttpd exited: " + self.log_path.read_text(errors="replace"))
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False
        harness.wait_until(listening, 15, "nghttpd to listen")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def _docroot(tmp_path):
    docroot = tmp_path / "htdocs"
    docroot.mkdir()
    body = rh.pattern_bytes(300_000, "h2")
    (docroot / "big.bin").write_bytes(body)
    (docroot / "index.html").write_text("h2 says hi\n")
    return docroot, body


def _check_h2(url, ca_file, tmp_path, body):
    got = rh.curl_url(url + "/index.html", ca_file, "--http2",
                      "-w", "\n%{http_code} %{http_version}")
    assert got.returncode == 0, got.stderr
    assert got.stdout == "h2 says hi\n\n200 2"
    out = tmp_path / "big.out"
    big = rh.curl_url(url + "/big.bin", ca_file, "--http2", "-o", str(out),
                      "-w", "%{http_code} %{http_version} %{size_download}")
    assert big.returncode == 0, big.stderr
    assert big.stdout == "200 2 300000"
    assert out.read_bytes() == body


def test_http2_passthrough_to_a_local_tls_server(stack, tmp_path):
    s = stack()
    docroot, body = _docroot(tmp_path)
    local_port = harness.free_port()
    # otunnel tls provisions the key and chain, writes them to the state dir and says where.
    tunnel = s.tunnel(local_port, mode="tls", links=1)
    stderr = tunnel.stderr_text()
    key_file = tunnel.state_dir / f"{tunnel.tunnel_id}.key.pem"
    chain_file = tunnel.state_dir / f"{tunnel.tunnel_id}.chain.pem"
    assert f"otunnel: key {key_file}" in stderr
    assert f"otunnel: certificate chain {chain_file}" in stderr
    server = Nghttpd(tmp_path, docroot, local_port, key_file, chain_file)
    try:
        _check_h2(tunnel.url, s.ca_file, tmp_path, body)
    finally:
        server.stop()


def test_http2_terminated_by_otunnel_to_an_h2c_server(stack, tmp_path):
    s = stack()
    docroot, body = _docroot(tmp_path)
    local_port = harness.free_port()
    server = Nghttpd(tmp_path, docroot, local_port)
    try:
        tunnel = s.tunnel(local_port, mode="http", mode_args=["--http2"], links=1)
        _check_h2(tunnel.url, s.ca_file, tmp_path, body)
    finally:
        server.stop()
