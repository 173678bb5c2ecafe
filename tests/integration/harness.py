"""Starts the real binaries for integration tests and talks to them over real sockets.

Everything here waits on readiness (a health check answering, a socket accepting), never on a
fixed sleep, and every wait has a deadline so a broken build fails instead of hanging.
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BUILD_DIR = Path(os.environ.get("OT_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
CONTROLD = BUILD_DIR / "controld" / "controld"


# Ports this process already handed out. The kernel may give the same free port to two binds
# in a row (nothing holds it in between), and a daemon given one port for two listeners fails to
# start ("Address already in use": seen with a controld's HTTP and metrics listeners).
_handed_out = set()


def free_port(host="127.0.0.1"):
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port this process has not handed out already")


def mysql_url_or_none():
    """The URL of the MariaDB the ctest fixture started, or None when not run under ctest."""
    path = os.environ.get("OT_TEST_MYSQL_URL_FILE")
    if not path:
        return None
    url = Path(path).read_text().strip()  # a missing file under ctest is a failure, not a skip
    return url


def wait_until(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    delay = 0.01
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(delay)  # polling interval, not a wait for an event to "probably" happen
        delay = min(delay * 2, 0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def stop_process(process, sig=signal.SIGTERM, timeout=30):
    """Sends `sig`, waits up to `timeout` s, then kills; returns the exit code (None: never
    started)."""
    if process is None:
        return None
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def popen_with_nofile(argv, env, log, nofile):
    """Starts `argv` with RLIMIT_NOFILE soft = hard = `nofile` (lowering both: the daemons raise
    their soft limit to the hard one at start), its output appended to `log`."""
    import resource

    def lower():
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=lower, close_fds=True)


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.status} {self.body[:200]!r}>"


class Controld:
    """One controld process with its own sockets, database and log."""

    def __init__(self, workdir, database_url=None, env=None, name="controld"):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.port = free_port()
        self.api_socket = str(self.workdir / f"{name}-api.sock")
        self.control_socket = str(self.workdir / f"{name}-control.sock")
        self.ca_file = str(self.workdir / "local-ca.pem")
        self.log_path = self.workdir / f"{name}.log"
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "OPENTUNNEL_DOMAIN": "tunnels.test",
            "HTTP_MODE": "serve",
            "HTTP_LISTEN": f"127.0.0.1:{self.port}",
            "API_SOCKET": self.api_socket,
            "CONTROL_SOCKET": self.control_socket,
            "LOCAL_CA_FILE": self.ca_file,
            "ISSUER": "local",
            "MACHINE_ID": name,
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "debug",
            "STARTUP_DB_TIMEOUT_MS": "30000",
        }
        if database_url:
            self.env["DATABASE_URL"] = database_url
        else:
            self.env["DATABASE_URL"] = "sqlite:" + str(self.workdir / "controld.db")
        for key in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            if key in os.environ:
                self.env[key] = os.environ[key]
        self.env.update(env or {})
        self.process = None

    def start(self, wait=True, umask=-1):
        """umask: the process's umask (-1: inherited)."""
        self.log = open(self.log_path, "ab")
        self.process = subprocess.Popen([str(CONTROLD)], env=self.env, stdout=self.log,
                                        stderr=subprocess.STDOUT, umask=umask)
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout=60.0):
        def healthy():
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n"
                                   + self.log_path.read_text(errors="replace")[-4000:])
            try:
                return self.request("GET", "/health").status == 200
            except OSError:
                return False
        wait_until(healthy, timeout, f"{self.name} to answer /health")

    def request(self, method, path, body=None, headers=None, token=None, unix=False, raw=None):
        connection = (UnixHTTPConnection(self.api_socket) if unix
                      else http.client.HTTPConnection("127.0.0.1", self.port, timeout=10))
        try:
            headers = dict(headers or {})
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            data = raw
            if body is not None:
                data = json.dumps(body).encode()
                headers.setdefault("Content-Type", "application/json")
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            return Response(response.status, dict(response.getheaders()), response.read())
        finally:
            connection.close()

    def stop(self, sig=signal.SIGTERM, timeout=30):
        code = stop_process(self.process, sig, timeout)
        if getattr(self, "log", None):
            self.log.close()
        return code

    def log_lines(self):
        lines = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                lines.append({"raw": line})
        return lines


def make_csr(workdir, names, cn=None, key_type="ec"):
    """A real key and CSR made by the openssl binary, as a client would."""
    workdir = Path(workdir)
    key = workdir / f"key-{names[0].replace('*', 'star')}.pem"
    csr = workdir / f"csr-{names[0].replace('*', 'star')}.pem"
    keyopt = (["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"] if key_type == "ec"
              else ["-newkey", "rsa:2048"])
    san = ",".join(f"DNS:{n}" for n in names)
    subprocess.run(["openssl", "req", "-new", *keyopt, "-nodes", "-keyout", str(key), "-out",
                    str(csr), "-subj", f"/CN={cn or names[0]}", "-addext",
                    f"subjectAltName={san}"], check=True, capture_output=True)
    return csr.read_text(), key


def new_workdir(prefix="ot-it-"):
    return tempfile.mkdtemp(prefix=prefix)
