"""The whole data path for integration tests: controld + relayd + otunnel + a local origin.

Every process gets its own temp directory, listens on port 0 (relayd logs the ports it got) and
is waited on by polling its log or a socket with a deadline, never by a fixed sleep. Everything
here is plain Python 3.11 from Debian: ssl, http.server, threading.
"""
import hashlib
import http.client
import http.server
import json
import os
import random
import re
import signal
import socket
import socketserver
import ssl
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import harness

DOMAIN = "opentunnel.localhost"
RELAYD = harness.BUILD_DIR / "relayd" / "relayd"
OTUNNEL = harness.BUILD_DIR / "client" / "otunnel"
CURL = "curl"


def _sanitizer_env():
    return {k: os.environ[k] for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")
            if k in os.environ}


# ---------------------------------------------------------------------------------------------
# Deterministic bodies: 64 KiB chunks of seeded random bytes, each prefixed with its index so that
# a reordered, dropped or repeated chunk changes the hash.

CHUNK = 65536


def pattern_chunks(length, seed):
    base = random.Random(seed).randbytes(CHUNK)
    index = 0
    sent = 0
    while sent < length:
        chunk = index.to_bytes(8, "big") + base[8:]
        take = min(CHUNK, length - sent)
        yield chunk[:take]
        sent += take
        index += 1


def pattern_bytes(length, seed):
    return b"".join(pattern_chunks(length, seed))


def pattern_sha256(length, seed):
    digest = hashlib.sha256()
    for chunk in pattern_chunks(length, seed):
        digest.update(chunk)
    return digest.hexdigest()


def write_pattern_file(path, length, seed):
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        for chunk in pattern_chunks(length, seed):
            out.write(chunk)
            digest.update(chunk)
    return digest.hexdigest()


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                return digest.hexdigest()
            digest.update(block)


# ---------------------------------------------------------------------------------------------
# The local origin: HTTP/1.1 in threads on 127.0.0.1:0.

class _OriginHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _query(self):
        parsed = urllib.parse.urlsplit(self.path)
        return parsed.path, dict(urllib.parse.parse_qsl(parsed.query))

    def _send(self, status, body, content_type="text/plain", extra=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path, query = self._query()
        self.server.origin.record(self)
        if path == "/hello":
            self._send(200, f"hello from {self.server.origin.name}\n".encode())
        elif path == "/bytes":
            length = int(query["n"])
            seed = query.get("seed", "0")
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(length))
            self.end_headers()
            rate = int(query.get("rate", "0"))  # bytes per second; 0: as fast as possible
            started = time.monotonic()
            sent = 0
            try:
                for chunk in pattern_chunks(length, seed):
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    if rate:
                        ahead = sent / rate - (time.monotonic() - started)
                        if ahead > 0:
                            time.sleep(ahead)  # traffic shaping, not synchronization
            except OSError:
                self.close_connection = True
        elif path == "/headers":
            body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
            self._send(200, body, "application/json")
        elif path == "/hang":
            # Headers, then never the body's end: for half-close and drain tests.
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            self.wfile.write(b"x")
            self.wfile.flush()
            self.server.origin.hang.wait(120)
            self.close_connection = True
        else:
            self._send(404, b"not found\n")

    def do_POST(self):
        path, _ = self._query()
        self.server.origin.record(self)
        length = int(self.headers.get("Content-Length", "0"))
        digest = hashlib.sha256()
        received = 0
        echo = [] if path == "/echo" else None
        while received < length:
            block = self.rfile.read(min(1 << 20, length - received))
            if not block:
                break
            received += len(block)
            digest.update(block)
            if echo is not None:
                echo.append(block)
        if path == "/upload":
            body = json.dumps({"length": received, "sha256": digest.hexdigest()}).encode()
            self._send(200, body, "application/json")
        elif path == "/echo":
            self._send(200, b"".join(echo), "application/octet-stream")
        else:
            self._send(404, b"not found\n")


class _ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # 200 concurrent visitors must not overflow the backlog

    def handle_error(self, request, client_address):
        pass  # visitors reset on purpose by the tests; failures show in the tests' assertions


class OriginServer:
    """An HTTP/1.1 origin: /hello, /bytes?n=&seed=[&rate=], /headers, /hang, POST /upload, /echo."""

    def __init__(self, name="origin", port=0):
        self.name = name
        self.hang = threading.Event()
        self.requests = []
        self._lock = threading.Lock()
        self.server = _ThreadingServer(("127.0.0.1", port), _OriginHandler)
        self.server.origin = self
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    def record(self, handler):
        with self._lock:
            self.requests.append((handler.command, handler.path, dict(handler.headers.items())))

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.hang.set()
        self.server.shutdown()
        self.server.server_close()


class TcpOrigin:
    """A raw TCP origin that accepts, reads, and never answers nor closes until stopped."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = []
        self.received = []
        self.eof = threading.Event()
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn):
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                self.eof.set()  # the client half-closed; we keep our side open
                return
            self.received.append(data)

    def stop(self):
        self.stopping = True
        self.sock.close()
        for conn in self.connections:
            try:
                conn.close()
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------
# Metrics

_METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def parse_metrics(text):
    """{(name, frozenset(labels.items())): value}"""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _METRIC_LINE.match(line)
        if not match:
            continue
        labels = {}
        if match.group(2):
            for pair in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2)):
                labels[pair[0]] = pair[1]
        out[(match.group(1), frozenset(labels.items()))] = float(match.group(3))
    return out


class Metrics:
    def __init__(self, values):
        self.values = values

    def get(self, name, **labels):
        key = (name, frozenset(labels.items()))
        if key not in self.values:
            raise KeyError(f"no metric {name}{labels}")
        return self.values[key]

    def visitors(self, outcome):
        return self.get("opentunnel_visitor_connections_total", outcome=outcome)

    def attaches(self, result):
        return self.get("opentunnel_bridge_attaches_total", result=result)


# ---------------------------------------------------------------------------------------------
# relayd

class Relayd:
    """One relayd bound to 127.0.0.1 port 0 (or a given TLS port), talking to a Controld."""

    def __init__(self, workdir, controld, env=None, name="relayd", tls_port=0):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.controld = controld
        self.ca_file = controld.ca_file
        self.log_path = self.workdir / f"{name}.log"
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "OPENTUNNEL_DOMAIN": DOMAIN,
            "TLS_LISTEN": f"127.0.0.1:{tls_port}",
            "HTTP_LISTEN": "127.0.0.1:0",
            "METRICS_LISTEN": "127.0.0.1:0",
            "CONTROL_SOCKET": controld.control_socket,
            "API_SOCKET": controld.api_socket,
            "MACHINE_ID": name,
            "LOG_LEVEL": "debug",
            # Its TLS ticket keys go here, not into the test's working directory.
            "STATE_DIR": str(self.workdir / "state"),
            **_sanitizer_env(),
        }
        self.env.update(env or {})
        self.process = None
        self.tls_port = self.http_port = self.metrics_port = None

    def start(self, wait=True):
        self.log = open(self.log_path, "ab")
        self.process = subprocess.Popen([str(RELAYD)], env=self.env, stdout=self.log,
                                        stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()
        return self

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def _alive(self):
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n"
                               + self.log_text()[-4000:])

    def wait_log(self, needle, timeout=30.0, count=1):
        def seen():
            if self.log_text().count(needle) >= count:
                return True
            self._alive()
            return False
        harness.wait_until(seen, timeout, f"{self.name} to log {needle!r} x{count}")

    def wait_ready(self, timeout=30.0):
        def ports():
            match = re.search(r"serving tls_port=(\d+) http_port=(\d+) metrics_port=(\d+)",
                              self.log_text())
            if match:
                return match
            self._alive()
            return None
        match = harness.wait_until(ports, timeout, f"{self.name} to serve")
        self.tls_port, self.http_port, self.metrics_port = (int(g) for g in match.groups())
        self.wait_log("control session up", timeout)
        self.wait_log("API certificate installed", timeout)
        return self

    @property
    def server_url(self):
        return f"https://{DOMAIN}:{self.tls_port}"

    def metrics(self):
        connection = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            assert response.status == 200
            return Metrics(parse_metrics(response.read().decode()))
        finally:
            connection.close()

    def wait_metric(self, predicate, timeout=15.0, what="a metric"):
        """Polls /metrics until predicate(metrics) holds; returns those metrics."""
        def check():
            metrics = self.metrics()
            return metrics if predicate(metrics) else None
        return harness.wait_until(check, timeout, what)

    def api(self, method, path, body=None, token=None, headers=None):
        """The HTTP API through relayd's TLS listener (verifying the local CA)."""
        headers = dict(headers or {})
        data = None
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        return https_request(self.tls_port, DOMAIN, method, path, self.ca_file, body=data,
                             headers=headers)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        code = harness.stop_process(self.process, sig, timeout)
        if getattr(self, "log", None):
            self.log.close()
        return code


# ---------------------------------------------------------------------------------------------
# otunnel

class Otunnel:
    """One otunnel process; stdout (the URL) and stderr (state lines) go to files we poll."""

    def __init__(self, workdir, server_url, ca_file, mode="http", port=None, routes=None,
                 links=None, extra_args=(), name="otunnel", state_dir=None, env=None,
                 mode_args=()):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.state_dir = Path(state_dir) if state_dir else self.workdir / f"{name}-state"
        self.stdout_path = self.workdir / f"{name}.out"
        self.stderr_path = self.workdir / f"{name}.err"
        self.args = [str(OTUNNEL), "--server", server_url, "--ca-file", str(ca_file),
                     "--state-dir", str(self.state_dir)]
        if links is not None:
            self.args += ["--links", str(links)]
        self.args += list(extra_args)
        self.args += [mode, *mode_args, str(port)]
        for route, route_port in (routes or {}).items():
            self.args += ["--route", f"{route}={route_port}"]
        self.links = links if links is not None else 4  # otunnel's default per profile
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **_sanitizer_env()}
        self.env.update(env or {})
        self.process = None
        self.url = None

    def start(self):
        self.out = open(self.stdout_path, "wb")
        self.err = open(self.stderr_path, "wb")
        self.process = subprocess.Popen(self.args, env=self.env, stdout=self.out, stderr=self.err,
                                        stdin=subprocess.DEVNULL)
        return self

    def stderr_text(self):
        return self.stderr_path.read_text(errors="replace")

    def stdout_text(self):
        return self.stdout_path.read_text(errors="replace")

    def _alive(self):
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n"
                               + self.stderr_text()[-4000:])

    def wait_url(self, timeout=60.0):
        def url():
            text = self.stdout_text()
            if text.endswith("\n"):
                return text
            self._alive()
            return None
        text = harness.wait_until(url, timeout, f"{self.name} to print its URL")
        lines = text.splitlines()
        assert len(lines) == 1, text
        self.url = lines[0]
        match = re.fullmatch(rf"https://([a-z0-9-]+)\.{re.escape(DOMAIN)}:(\d+)", self.url)
        assert match, self.url
        self.tunnel_id = match.group(1)
        self.hostname = f"{self.tunnel_id}.{DOMAIN}"
        return self.url

    def connected_count(self):
        full = f"otunnel: connected ({self.links}/{self.links} links)"
        return self.stderr_text().count(full)

    def wait_connected(self, count=1, timeout=60.0):
        """Until 'connected (N/N links)' has been printed `count` times in all."""
        def connected():
            if self.connected_count() >= count:
                return True
            self._alive()
            return False
        harness.wait_until(connected, timeout, f"{self.name} to print connected x{count}")

    def state(self):
        # <id>.status.json is the running otunnel's status (docs/pools-dialer.md), not the state.
        files = [p for p in self.state_dir.glob("*.json") if not p.name.endswith(".status.json")]
        assert len(files) == 1, files
        return json.loads(files[0].read_text())

    def stop(self, sig=signal.SIGTERM, timeout=15):
        code = harness.stop_process(self.process, sig, timeout)
        for f in (getattr(self, "out", None), getattr(self, "err", None)):
            if f:
                f.close()
        return code


# ---------------------------------------------------------------------------------------------
# The stack: controld + relayd (+ tunnels), everything stopped by `close`.

class Stack:
    def __init__(self, workdir, relayd_env=None, controld_env=None, start_relayd=True):
        self.workdir = Path(workdir)
        self.controld = harness.Controld(self.workdir / "controld", name="controld",
                                         env={"OPENTUNNEL_DOMAIN": DOMAIN,
                                              **(controld_env or {})})
        self.controld.start()
        self.ca_file = self.controld.ca_file
        self.relayds = []
        self.tunnels = []
        self.origins = []
        self.relayd = None
        if start_relayd:
            try:
                self.relayd = self.start_relayd(relayd_env)
            except BaseException:
                # The fixture never gets this Stack to close: stop what was started here.
                self.close()
                raise

    def start_relayd(self, env=None, name=None, tls_port=0, wait=True):
        name = name or f"relayd{len(self.relayds)}"
        relay = Relayd(self.workdir / name, self.controld, env=env, name=name, tls_port=tls_port)
        self.relayds.append(relay)
        relay.start(wait=wait)
        return relay

    def origin(self, name="origin", port=0):
        server = OriginServer(name, port).start()
        self.origins.append(server)
        return server

    def tunnel(self, port, mode="http", routes=None, links=None, extra_args=(), wait=True,
               server_url=None, name=None, mode_args=()):
        """otunnel against `port`, waited on until it prints connected (N/N links)."""
        name = name or f"otunnel{len(self.tunnels)}"
        client = Otunnel(self.workdir / name, server_url or self.relayd.server_url, self.ca_file,
                         mode=mode, port=port, routes=routes, links=links,
                         extra_args=extra_args, name=name, mode_args=mode_args)
        self.tunnels.append(client)
        client.start()
        if wait:
            client.wait_url()
            client.wait_connected()
        return client

    def close(self):
        codes = {}
        for client in self.tunnels:
            client.stop()
        for relay in self.relayds:
            codes[relay.name] = relay.stop()
        codes["controld"] = self.controld.stop()
        for server in self.origins:
            server.stop()
        return codes


# ---------------------------------------------------------------------------------------------
# Visitors

def client_context(ca_file, alpn=("http/1.1",)):
    context = ssl.create_default_context(cafile=str(ca_file))
    if alpn:
        context.set_alpn_protocols(list(alpn))
    return context


def tls_connect(port, hostname, ca_file, timeout=30, alpn=("http/1.1",)):
    """A verified TLS connection to relayd's listener for `hostname` (resolved to loopback)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        return client_context(ca_file, alpn).wrap_socket(raw, server_hostname=hostname)
    except BaseException:
        raw.close()
        raise


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, port, hostname, ca_file, timeout):
        super().__init__(hostname, port, timeout=timeout, context=client_context(ca_file))
        self._pinned_port = port

    def connect(self):
        raw = socket.create_connection(("127.0.0.1", self._pinned_port), timeout=self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=self.host)


def https_request(port, hostname, method, path, ca_file, body=None, headers=None, timeout=30):
    connection = _PinnedHTTPSConnection(port, hostname, ca_file, timeout)
    try:
        connection.request(method, path, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        return harness.Response(response.status, dict(response.getheaders()), response.read())
    finally:
        connection.close()


def curl(args, timeout=120):
    """curl with -sS; returns the CompletedProcess (text output)."""
    return subprocess.run([CURL, "-sS", *args], capture_output=True, text=True, timeout=timeout)


def curl_url(url, ca_file, *args, timeout=120):
    """curl a tunnel URL verifying the local CA, resolving the name to loopback explicitly."""
    parsed = urllib.parse.urlsplit(url)
    resolve = f"{parsed.hostname}:{parsed.port}:127.0.0.1"
    return curl(["--cacert", str(ca_file), "--resolve", resolve, *args, url], timeout=timeout)


def client_hello_bytes(hostname, alpn=("http/1.1",)):
    """A real ClientHello for `hostname` (from OpenSSL through a memory BIO) and its TLS object."""
    tls = MemoryTls(hostname, None, alpn)
    return tls.start(), tls


class MemoryTls:
    """TLS client over memory BIOs, so tests control exactly which bytes go on the wire."""

    def __init__(self, hostname, ca_file, alpn=("http/1.1",)):
        if ca_file:
            context = client_context(ca_file, alpn)
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            if alpn:
                context.set_alpn_protocols(list(alpn))
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_hostname=hostname)

    def start(self):
        try:
            self.obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        return self.outgoing.read()

    def handshake(self, sock, already_sent=True, timeout=30):
        """Finishes the handshake over `sock` after start()'s bytes were sent by the caller."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.obj.do_handshake()
                self._flush(sock)
                return
            except ssl.SSLWantReadError:
                self._flush(sock)
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("EOF during handshake")
                self.incoming.write(data)

    def _flush(self, sock):
        pending = self.outgoing.read()
        if pending:
            sock.sendall(pending)

    def send(self, sock, data):
        self.obj.write(data)
        self._flush(sock)

    def recv_all(self, sock, timeout=30):
        """Reads until the peer closes (TLS close_notify or EOF); returns the plaintext."""
        deadline = time.monotonic() + timeout
        chunks = []
        while True:
            try:
                data = self.obj.read(65536)
                if not data:
                    return b"".join(chunks)
                chunks.append(data)
                continue
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b"".join(chunks)
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            raw = sock.recv(65536)
            if not raw:
                self.incoming.write_eof()
                continue
            self.incoming.write(raw)


def read_http_response(reader):
    """Parses one HTTP/1.1 response with Content-Length from a file-like `reader`."""
    status_line = reader.readline()
    if not status_line:
        raise ConnectionError("no response")
    parts = status_line.decode().split(" ", 2)
    status = int(parts[1])
    headers = {}
    while True:
        line = reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        key, value = line.decode().split(":", 1)
        headers[key.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = reader.read(length)
    return status, headers, body


def wait_closed(sock, timeout):
    """Reads (and drops) until the peer closes or resets; returns seconds waited and how."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the connection stayed open")
        sock.settimeout(remaining)
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start, "reset"
        except ssl.SSLError as error:
            return time.monotonic() - start, f"ssl:{error.reason}"
        except socket.timeout:
            raise TimeoutError("the connection stayed open")
        if not data:
            return time.monotonic() - start, "eof"
