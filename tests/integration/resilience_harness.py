"""Helpers for the resilience tests (test_resilience_*.py): process probes (descriptors, memory,
CPU time from /proc), background transfers that check every byte, restarting controld in place,
relayd under a descriptor limit, the fault proxy (tests/tools/fault_proxy.py) in front of relayd,
a private MariaDB whose server can be stopped and started, and relayd's log and metrics read back.

Built on harness.py and relay_harness.py (imported, never changed). Every wait polls with a
deadline; nothing here sleeps to let something "probably" happen.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.parse
from datetime import datetime
from pathlib import Path

import harness
import relay_harness as rh

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tools"))
from fault_proxy import FaultProxy  # noqa: E402

MARIADB_SCRIPT = ROOT / "tests" / "services" / "mariadb.sh"
MB = 1_000_000
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# /proc probes

def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


class RssPeak:
    """Samples a process's VmRSS every 20 ms in a thread while in use (a `with` block, or
    start()/stop()); `before` and `peak` in kB. A process that has gone ends the sampling."""

    def __init__(self, pid):
        self.pid = pid
        self.before = rss_kb(pid)
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        try:
            self.peak = max(self.peak, rss_kb(self.pid))
            return True
        except (OSError, RuntimeError):
            return False

    def _run(self):
        while not self._stop.wait(0.02):
            if not self._sample():
                return

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        self._sample()
        return self.peak

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def cpu_seconds(pid):
    """User + system CPU time of the whole process (every thread), in seconds."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class ResourceBaseline:
    """Open descriptors and resident memory of one process, captured once the process is warm,
    and checked again after a fault: descriptors must come back to the baseline (within
    `fd_slack`), memory to within `rss_slack_kb` of it (allocators keep some freed memory)."""

    def __init__(self, process, name):
        self.pid = process.pid
        self.name = name
        self.fds = fd_count(self.pid)
        self.rss = rss_kb(self.pid)

    def current(self):
        return fd_count(self.pid), rss_kb(self.pid)

    def wait_back(self, timeout=30.0, fd_slack=1, rss_slack_kb=16 * 1024):
        last = {}

        def back():
            fds, rss = self.current()
            last.update(fds=fds, rss=rss)
            return fds <= self.fds + fd_slack and rss <= self.rss + rss_slack_kb
        try:
            harness.wait_until(back, timeout, f"{self.name}'s descriptors and memory to settle")
        except TimeoutError:
            raise AssertionError(
                f"{self.name}: fds {last.get('fds')} (baseline {self.fds}, slack {fd_slack}), "
                f"VmRSS {last.get('rss')} kB (baseline {self.rss} kB, slack {rss_slack_kb} kB)"
                f"; open: {describe_fds(self.pid)}")
        print(f"\n{self.name}: fds {last['fds']} (baseline {self.fds}), VmRSS {last['rss']} kB "
              f"(baseline {self.rss} kB)")
        return last


def describe_fds(pid):
    kinds = {}
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue
            kind = target.split(":")[0] if ":" in target else "file"
            kinds[kind] = kinds.get(kind, 0) + 1
    except OSError:
        return "?"
    return kinds


# ---------------------------------------------------------------------------------------------
# Transfers that run in the background (curl processes) and are checked byte for byte

def tunnel_url(tunnel, relayd):
    """The tunnel's URL on relayd's own port (otunnel may have been pointed at a proxy)."""
    return f"https://{tunnel.hostname}:{relayd.tls_port}"


class Download:
    """GET /bytes?n=size&seed=..&rate=.. through the tunnel with curl, into a file."""

    def __init__(self, url, ca_file, size, seed, out_path, rate=0):
        self.size = size
        self.seed = seed
        self.out = Path(out_path)
        parsed = urllib.parse.urlsplit(url)
        query = f"n={size}&seed={seed}" + (f"&rate={rate}" if rate else "")
        self.process = subprocess.Popen(
            ["curl", "-sS", "--http1.1", "--cacert", str(ca_file), "--resolve",
             f"{parsed.hostname}:{parsed.port}:127.0.0.1", "-o", str(self.out), "-w",
             "%{http_code} %{size_download}", f"{url}/bytes?{query}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.result = None

    def in_flight(self):
        return self.out.exists() and self.out.stat().st_size > 0

    def wait(self, timeout=120):
        if self.result is None:
            try:
                stdout, stderr = self.process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                stdout, stderr = self.process.communicate()
                stderr += " (killed after the timeout)"
            self.result = (self.process.returncode, stdout, stderr)
        return self.result

    def assert_intact(self, timeout=120):
        code, stdout, stderr = self.wait(timeout)
        assert code == 0, f"download {self.seed}: curl exited {code}: {stderr}"
        assert stdout == f"200 {self.size}", (self.seed, stdout)
        assert rh.sha256_file(self.out) == rh.pattern_sha256(self.size, self.seed), \
            f"download {self.seed}: the bytes differ"

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Upload:
    """POST /upload of a pattern file with curl (optionally rate limited); the origin answers
    with the length and SHA-256 it received."""

    def __init__(self, url, ca_file, size, seed, workdir, limit_rate=None):
        self.size = size
        self.seed = seed
        workdir = Path(workdir)
        self.source = workdir / f"upload-{seed}.bin"
        self.sha256 = rh.write_pattern_file(self.source, size, seed)
        self.answer = workdir / f"upload-{seed}.json"
        parsed = urllib.parse.urlsplit(url)
        args = ["curl", "-sS", "--http1.1", "--cacert", str(ca_file), "--resolve",
                f"{parsed.hostname}:{parsed.port}:127.0.0.1", "-o", str(self.answer), "-w",
                "%{http_code}", "-H", "Content-Type: application/octet-stream",
                "-H", "Expect:", "--data-binary", f"@{self.source}"]
        if limit_rate:
            args += ["--limit-rate", str(limit_rate)]
        self.process = subprocess.Popen(args + [f"{url}/upload"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.result = None

    def wait(self, timeout=120):
        if self.result is None:
            try:
                stdout, stderr = self.process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                stdout, stderr = self.process.communicate()
                stderr += " (killed after the timeout)"
            self.result = (self.process.returncode, stdout, stderr)
        return self.result

    def assert_intact(self, timeout=120):
        code, stdout, stderr = self.wait(timeout)
        assert code == 0, f"upload {self.seed}: curl exited {code}: {stderr}"
        assert stdout == "200", (self.seed, stdout)
        answer = json.loads(self.answer.read_text())
        assert answer == {"length": self.size, "sha256": self.sha256}, (self.seed, answer)

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def get_hello(url, ca_file, origin_name="origin"):
    """One GET /hello through the tunnel; asserts the exact answer."""
    got = rh.curl_url(url + "/hello", ca_file, "--http1.1", "-w", " %{http_code}", timeout=60)
    assert got.returncode == 0, got.stderr
    assert got.stdout == f"hello from {origin_name}\n 200", got.stdout


# ---------------------------------------------------------------------------------------------
# controld restarted in place: same environment (DATABASE_URL, sockets, HTTP port, CA file)

def kill_controld(controld, sig=signal.SIGKILL, timeout=30):
    controld.process.send_signal(sig)
    code = controld.process.wait(timeout)
    controld.log.close()
    return code


def restart_controld(controld, timeout=60):
    """Starts the same harness.Controld again (its env is unchanged) and waits for /health."""
    controld.start(wait=False)
    controld.wait_healthy(timeout)
    return controld


def tunnel_view(controld, tunnel_id, token):
    """controld's answer for the tunnel: (status, json)."""
    response = controld.request("GET", f"/api/tunnel/{tunnel_id}", token=token)
    return response.status, (response.json() if response.body else None)


def wait_views_match(stack, tunnels, expected, timeout=30.0):
    """Until controld reports each tunnel online with `expected[id]` bridges and relayd's
    opentunnel_bridges_attached equals their sum; returns {id: bridges}."""
    views = {}

    def match():
        for tunnel_id, token in tunnels.items():
            status, body = tunnel_view(stack.controld, tunnel_id, token)
            if status != 200:
                return False
            views[tunnel_id] = (body["state"], body["bridges"])
        relay_total = stack.relayd.metrics().get("opentunnel_bridges_attached")
        views["relayd"] = relay_total
        return (all(views[t] == ("online", expected[t]) for t in tunnels)
                and relay_total == sum(expected.values()))
    try:
        harness.wait_until(match, timeout, "controld's view to equal relayd's")
    except TimeoutError:
        raise AssertionError(f"views differ: controld/relayd {views}, expected {expected}")
    return views


# ---------------------------------------------------------------------------------------------
# relayd: metrics shortcuts, its log, and a relayd under a descriptor limit

def metric(relayd, name, **labels):
    return relayd.metrics().get(name, **labels)


def wait_metrics(relayd, expected, timeout=30.0):
    """Until every metric in `expected` ({name or (name, ((label, value), ...)): value}) has its
    value; returns the metrics. On timeout the assertion names what differed."""
    last = {}

    def check():
        metrics = relayd.metrics()
        last.clear()
        for key, value in expected.items():
            name, labels = (key, {}) if isinstance(key, str) else (key[0], dict(key[1]))
            got = metrics.get(name, **labels)
            if got != value:
                last[f"{name}{labels or ''}"] = (got, value)
        return metrics if not last else None
    try:
        return harness.wait_until(check, timeout, "metrics")
    except TimeoutError:
        raise AssertionError(f"{relayd.name} metrics (got, wanted): {last}")


def wait_metric_value(relayd, name, value, timeout=30.0, **labels):
    """Until the metric equals `value` exactly; returns the metrics."""
    return wait_metrics(relayd, {(name, tuple(labels.items())): value}, timeout)


class KeptMetrics:
    """/metrics over one kept-alive HTTP connection: it still answers when relayd is out of
    descriptors and cannot accept a new connection."""

    def __init__(self, relayd):
        self.relayd = relayd
        self.connection = http.client.HTTPConnection("127.0.0.1", relayd.metrics_port,
                                                     timeout=10)

    def get(self):
        self.connection.request("GET", "/metrics")
        response = self.connection.getresponse()
        body = response.read()
        assert response.status == 200, response.status
        return rh.Metrics(rh.parse_metrics(body.decode()))

    def wait(self, predicate, timeout=30.0, what="a metric"):
        def check():
            metrics = self.get()
            return metrics if predicate(metrics) else None
        return harness.wait_until(check, timeout, what)

    def close(self):
        self.connection.close()


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z")


def log_times(relayd, needle):
    """Timestamps (seconds, float) of relayd's text log lines containing `needle`."""
    times = []
    for line in relayd.log_text().splitlines():
        if needle not in line:
            continue
        match = _LOG_TIME.match(line)
        if match:
            stamp = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S.%f")
            times.append(stamp.timestamp())
    return times


class LimitedRelayd(rh.Relayd):
    """relayd started with RLIMIT_NOFILE soft = hard = `nofile` (relayd raises its soft limit
    to the hard one at start, so both are lowered)."""

    def __init__(self, *args, nofile=64, **kwargs):
        super().__init__(*args, **kwargs)
        self.nofile = nofile

    def start(self, wait=True):
        self.log = open(self.log_path, "ab")
        self.process = harness.popen_with_nofile([str(rh.RELAYD)], self.env, self.log, self.nofile)
        if wait:
            self.wait_ready()
        return self


def add_relayd(stack, relayd):
    """Registers a relayd made here with the stack (stopped and checked by its close)."""
    stack.relayds.append(relayd)
    stack.relayd = relayd
    return relayd


# ---------------------------------------------------------------------------------------------
# otunnel through the fault proxy

def proxy_to(relayd):
    return FaultProxy(relayd.tls_port).start()


def proxied_tunnel(stack, proxy, port, links=2, name=None, wait=True):
    """otunnel whose --server is the proxy's port (SNI stays the domain, the certificate
    verifies): provisioning and every bridge go through the proxy."""
    return stack.tunnel(port, links=links, name=name, wait=wait,
                        server_url=f"https://{rh.DOMAIN}:{proxy.port}")


def wait_stderr(otunnel, needle, timeout=60.0, count=1):
    def seen():
        return otunnel.stderr_text().count(needle) >= count
    harness.wait_until(seen, timeout, f"{otunnel.name} to print {needle!r} x{count}")


# ---------------------------------------------------------------------------------------------
# Raw visitors

def hello_then_close(port, hostname, timeout=15):
    """Sends a real ClientHello for `hostname` and waits for relayd to close the connection
    (a visitor relayd refuses); returns how it closed."""
    hello, _ = rh.client_hello_bytes(hostname)
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(hello)
        return rh.wait_closed(sock, timeout)[1]
    finally:
        sock.close()


# ---------------------------------------------------------------------------------------------
# A private MariaDB server (tests/services/mariadb.sh) that a test may stop and start

class PrivateMariaDB:
    def __init__(self, directory):
        self.dir = Path(directory)
        self.url = None

    def _run(self, command, timeout=180):
        done = subprocess.run([str(MARIADB_SCRIPT), command, str(self.dir)], capture_output=True,
                              text=True, timeout=timeout)
        assert done.returncode == 0, f"mariadb.sh {command}: {done.stderr[-2000:]}"

    def start(self):
        self._run("start")
        self.url = (self.dir / "url").read_text().strip()
        return self

    def stop_server(self):
        self._run("stop-server")

    def start_server(self):
        self._run("start-server")

    def stop(self):
        self._run("stop")

    def create_database(self):
        name = "ot_res_" + os.urandom(6).hex()
        rest = self.url[len("mysql://"):].rstrip("/")
        userinfo, hostport = rest.split("@", 1)
        user, password = userinfo.split(":", 1)
        host, port = hostport.split(":", 1)
        subprocess.run(["mariadb", f"-h{host}", f"-P{port}", f"-u{user}", f"-p{password}",
                        "-e", f"CREATE DATABASE {name}"], check=True, timeout=60)
        return f"{self.url.rstrip('/')}/{name}"
