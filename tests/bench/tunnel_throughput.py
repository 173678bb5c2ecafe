#!/usr/bin/python3
"""Throughput of one stream through the tunnel, against the same stream straight to the origin.

Not a test (pytest never collects it: it lives outside tests/integration and its name does not
start with test_). It starts controld + relayd (relay_harness.Stack), a fast local origin (a
preallocated buffer written with sendall, so the origin is not the bottleneck), and otunnel, then
moves N MB with curl in each direction twice: directly to the origin over plain HTTP, and through
relayd + otunnel over TLS (visitor TLS terminated by otunnel in `http` mode). It prints MB/s for
both and the ratio tunnel/direct, and the CPU time relayd and otunnel spent per MB moved through
the tunnel (read from /proc, summed over every run; it holds steady on a busy machine where MB/s
does not).

Side by side, the same transfers go through OpenSSH's reverse tunnel (`ssh -N -R`) with the
cipher our TLS negotiates (TLS_AES_128_GCM_SHA256 -> aes128-gcm@openssh.com): a throwaway sshd on
a loopback port (its own host key, authorized key and config in the work directory; run as root,
it needs /usr/sbin/sshd and /run/sshd), an ssh client forwarding a loopback port of sshd's to the
origin, curl over plain HTTP to that port. sshd (every process of its tree) stands beside relayd,
the ssh client beside otunnel. When sshd or ssh is missing or will not start, the ssh path is
skipped with the reason printed (--no-ssh skips it always).

Usage (after building controld, relayd and otunnel in build/):
    /usr/bin/python3 tests/bench/tunnel_throughput.py [--mb 200] [--links 2] [--runs 3]
    OT_BUILD_DIR=/work/main/build-asan /usr/bin/python3 tests/bench/tunnel_throughput.py --mb 50

Output, per direction (the best of --runs runs for each path; CPU summed over all runs):
    download  direct  1850.3 MB/s
    download  tunnel   410.4 MB/s  ratio 0.22  cpu ms/MB relayd 1.10 otunnel 1.52
    download  ssh -R   520.2 MB/s  ratio 0.28  cpu ms/MB sshd   1.25 ssh     1.40

--tls-mode adds the same transfers with the visitor's TLS carried end to end to an origin that
terminates TLS itself (with the key and chain otunnel provisioned): straight to it ("direct tls"),
through otunnel's `tls` mode (passthrough: one TLS layer at otunnel, the bridge's, as ssh -R has
one cipher layer) and through ssh -R ("ssh -R tls"). The `http` mode rows make otunnel terminate
the visitor's TLS as well, a second cipher layer ssh -R does not have.

--direction download|upload runs one direction only (e.g. while perf records relayd, whose pid is
printed). --visitors N then opens N visitor connections through the tunnel, one HTTPS connection
each (GET /dl?n=1), and prints the epoll_ctl calls relayd and otunnel made per visitor (perf stat
on the syscalls:sys_enter_epoll_ctl tracepoint; skipped with a message when perf cannot count).

With --rtt N it then measures small round trips on their own stream of the same tunnel (one
HTTPS keep-alive connection through relayd + otunnel, N requests of GET /dl?n=1): alone, then
while a bulk download runs on another stream. Run with --links 1 so both streams share one bridge
(issue 12 item 5: frame scheduling between streams). Prints p50 / p99 / max in ms for both, the
bulk transfer's MB/s, and the bridge's queues while the round trips ran (`ss` on otunnel's and
relayd's ends: Recv-Q / Send-Q max, avg, p50). --beside upload|both runs them beside an upload
(zeros from head(1) piped into curl) instead of / as well as a download; --probe-only skips the
throughput runs (and the upload file); --bulk-rate N paces that bulk transfer to N MB/s (curl
--limit-rate), to tell what the tunnel adds from what two saturated cores add. The probe's client
runs in a child process and the origin serves each connection from its own process, so no GIL is
shared between the probe and the bulk transfer; beside each probe the tool prints how long
relayd, otunnel and the probe waited on a run queue per second (/proc/<pid>/task/*/schedstat).
--rt-probe (root) runs relayd, otunnel, the probe's client and the origin process serving the
probe under SCHED_FIFO, while curl and the bulk transfer's origin stay in the normal class: what
is left of the probe's rise is then the tunnel's own queueing, not waits for a CPU:
    OT_BUILD_DIR=$PWD/build /usr/bin/python3 tests/bench/tunnel_throughput.py --mb 4000 \
        --runs 1 --links 1 --rtt 1000 --no-ssh --probe-only --beside both
"""
import argparse
import glob
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import relay_harness as rh  # noqa: E402

MB = 1_000_000
BLOCK = bytes(range(256)) * 4096  # 1 MiB


# --rt-probe: the probe's processes run under SCHED_FIFO at this priority.
RT_PRIORITY = 10
RT_PROBE = False


def make_realtime(pid=0):
    """SCHED_FIFO for every thread of `pid` (0: this process)."""
    tids = [0] if pid == 0 else [int(Path(t).name) for t in glob.glob(f"/proc/{pid}/task/*")]
    for tid in tids:
        os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))


class FastOrigin:
    """HTTP/1.1, one process per connection (forked at accept): GET /dl?n=N answers N bytes;
    POST /ul discards its body and answers the byte count. Processes, not threads: the round-trip
    probe's answers must not wait for a GIL held by the thread feeding the bulk transfer beside
    it (Python hands the GIL over at most every 5 ms, which was the whole of the probe's p99 rise
    when both were threads of this process)."""

    def __init__(self, tls_files=None, port=0):
        # tls_files = (chain, key): the origin terminates TLS itself (for otunnel's `tls` mode,
        # which passes the visitor's TLS through, and the same through ssh -R).
        self.tls = None
        if tls_files is not None:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(str(tls_files[0]), str(tls_files[1]))
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            # Without it a small answer (head, then body) waits for a delayed ACK: 40 ms that
            # are the origin's, not the tunnel's, in every round trip of --rtt.
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pid = os.fork()
            if pid == 0:
                # The child serves this connection only, and leaves without running the
                # parent's exit handlers (the stack's clean-up is the parent's).
                self.sock.close()
                if self.tls is not None:
                    try:
                        conn = self.tls.wrap_socket(conn, server_side=True)
                    except (OSError, ssl.SSLError):
                        os._exit(0)
                self._serve(conn)
                os._exit(0)
            conn.close()
            threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()

    @staticmethod
    def _serve(conn):
        reader = conn.makefile("rb")
        try:
            while True:
                line = reader.readline()
                if not line:
                    return
                method, target, _ = line.decode().split(" ", 2)
                if RT_PROBE and target == "/dl?n=1":
                    make_realtime()  # this process serves the probe's connection
                length = 0
                while True:
                    header = reader.readline()
                    if header in (b"\r\n", b""):
                        break
                    key, value = header.decode().split(":", 1)
                    if key.strip().lower() == "content-length":
                        length = int(value)
                    if key.strip().lower() == "expect":
                        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                if method == "GET":
                    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(target).query))
                    n = int(query["n"])
                    conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n".encode())
                    view = memoryview(BLOCK)
                    left = n
                    while left:
                        take = min(left, len(BLOCK))
                        conn.sendall(view[:take])
                        left -= take
                else:
                    left = length
                    sink = memoryview(bytearray(1 << 20))
                    while left:
                        got = reader.readinto(sink[:min(left, len(sink))])
                        if not got:
                            return
                        left -= got
                    body = str(length).encode()
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode()
                                 + b"\r\n\r\n" + body)
        except OSError:
            return
        finally:
            conn.close()

    def stop(self):
        self.sock.close()


def cpu_seconds(pid):
    """User + system CPU seconds of a running process (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SSH_CIPHER = "aes128-gcm@openssh.com"  # TLS_AES_128_GCM_SHA256, what relayd and otunnel pick


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_port(port, alive, timeout=15.0):
    """True once 127.0.0.1:port accepts a connection; False when alive() turns false or at the
    deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def process_tree(pid):
    """pid and all its descendants (/proc/<pid>/task/*/children)."""
    found = [pid]
    for current in found:
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as f:
                    found.extend(int(child) for child in f.read().split())
            except OSError:
                pass
    return found


class SshReverseTunnel:
    """A throwaway sshd on a loopback port and `ssh -N -R port:127.0.0.1:origin` into it."""

    def __init__(self, workdir, origin_ports):
        self.dir = workdir / "ssh"
        self.dir.mkdir()
        self.sshd = None
        self.ssh = None
        self.ports = {}  # origin port -> sshd's forwarded port for it
        self.error = None
        self.origin_ports = list(origin_ports)

    def start(self):
        sshd_exe = shutil.which("sshd") or "/usr/sbin/sshd"
        if not os.path.exists(sshd_exe) or shutil.which("ssh") is None:
            self.error = "sshd or ssh not installed (Debian: openssh-server, openssh-client)"
            return False
        if os.geteuid() != 0:
            self.error = "sshd needs root here (privilege separation)"
            return False
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        for name in ("host_key", "user_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            str(self.dir / name)], check=True, capture_output=True)
        shutil.copy(self.dir / "user_key.pub", self.dir / "authorized_keys")
        ssh_port = free_port()
        (self.dir / "sshd_config").write_text(
            f"Port {ssh_port}\nListenAddress 127.0.0.1\nHostKey {self.dir / 'host_key'}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\nPidFile none\nUsePAM no\n"
            "StrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "AllowTcpForwarding yes\nGatewayPorts no\nCompression no\n"
            f"Ciphers {SSH_CIPHER}\nLogLevel ERROR\n")
        self.sshd_log = open(self.dir / "sshd.log", "w")
        self.sshd = subprocess.Popen([sshd_exe, "-D", "-e", "-f", str(self.dir / "sshd_config")],
                                     stdout=self.sshd_log, stderr=subprocess.STDOUT)
        if not wait_port(ssh_port, lambda: self.sshd.poll() is None):
            self.error = f"sshd did not start: {(self.dir / 'sshd.log').read_text().strip()}"
            return False
        self.ports = {origin: free_port() for origin in self.origin_ports}
        forwards = []
        for origin, port in self.ports.items():
            forwards += ["-R", f"127.0.0.1:{port}:127.0.0.1:{origin}"]
        self.ssh_log = open(self.dir / "ssh.log", "w")
        self.ssh = subprocess.Popen(
            ["ssh", "-N", "-F", "/dev/null", "-i", str(self.dir / "user_key"), "-p", str(ssh_port),
             "-c", SSH_CIPHER, "-o", "Compression=no", "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=no", "-o", f"UserKnownHostsFile={os.devnull}",
             "-o", "ExitOnForwardFailure=yes", "-o", "LogLevel=ERROR",
             *forwards, "root@127.0.0.1"],
            stdout=self.ssh_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        for port in self.ports.values():
            if not wait_port(port, lambda: self.ssh.poll() is None):
                self.error = f"ssh -R did not come up: {(self.dir / 'ssh.log').read_text().strip()}"
                return False
        return True

    def cpu(self):
        """CPU seconds of sshd's whole tree (listener, the session's monitor and its child) and of
        the ssh client."""
        sshd = 0.0
        for pid in process_tree(self.sshd.pid):
            try:
                sshd += cpu_seconds(pid)
            except OSError:
                pass
        return {"sshd": sshd, "ssh": cpu_seconds(self.ssh.pid)}

    def stop(self):
        for process in (self.ssh, self.sshd):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()


def timed_curl(args, input_bytes=0):
    """Seconds and stdout of one curl; with input_bytes, that many bytes are fed to its stdin."""
    started = time.monotonic()
    if input_bytes:
        # zeros from head(1), so that no Python thread of ours (the origin's) feeds the pipe
        with subprocess.Popen(["head", "-c", str(input_bytes), "/dev/zero"],
                              stdout=subprocess.PIPE) as source:
            result = subprocess.run(["curl", "-sS", "--http1.1", *args], stdin=source.stdout,
                                    capture_output=True, text=True)
    else:
        result = subprocess.run(["curl", "-sS", "--http1.1", *args], capture_output=True,
                                text=True)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"curl failed: {result.stderr}")
    return seconds, result.stdout


def round_trips(url, ca_file, count):
    """Milliseconds of `count` GET /dl?n=1 on one keep-alive connection through the tunnel."""
    parsed = urllib.parse.urlsplit(url)
    context = rh.client_context(ca_file)
    # The tunnel's hostname for SNI and Host, the socket to 127.0.0.1 (no resolver needed).
    connection = http.client.HTTPSConnection(parsed.hostname, parsed.port, timeout=30)
    connection.sock = context.wrap_socket(
        socket.create_connection(("127.0.0.1", parsed.port), timeout=30),
        server_hostname=parsed.hostname)
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            connection.request("GET", "/dl?n=1")
            response = connection.getresponse()
            if response.read() != BLOCK[:1]:
                raise RuntimeError("round trip: wrong body")
            times.append((time.perf_counter() - started) * 1000)
    finally:
        connection.close()
    return times


def round_trips_in_child(url, ca_file, count):
    """round_trips() in a forked child, so that the probe's client is a process of its own and
    shares no GIL with this process's threads (the bulk transfer's curl runs beside it)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        code = 0
        if RT_PROBE:
            make_realtime()
        try:
            payload = json.dumps({"times": round_trips(url, ca_file, count),
                                  "schedstat": schedstat(os.getpid())}).encode()
        except Exception as error:  # reported by the parent, which raises it
            payload = json.dumps({"error": repr(error)}).encode()
            code = 1
        with os.fdopen(writer, "wb") as out:
            out.write(payload)
        os._exit(code)
    os.close(writer)
    with os.fdopen(reader, "rb") as source:
        payload = json.loads(source.read() or b'{"error": "the probe child wrote nothing"}')
    os.waitpid(pid, 0)
    if "error" in payload:
        raise RuntimeError(f"round trips: {payload['error']}")
    return payload["times"], payload["schedstat"]


def schedstat(pid):
    """(ns on a CPU, ns waiting on a run queue) of a process, all its threads, from
    /proc/<pid>/task/*/schedstat; None where the kernel does not keep schedstats."""
    running = waiting = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            fields = (task / "schedstat").read_text().split()
            running += int(fields[0])
            waiting += int(fields[1])
    except (OSError, IndexError, ValueError):
        return None
    return running, waiting


def describe(times):
    ordered = sorted(times)
    def pick(q):
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return f"p50 {pick(0.50):6.2f} ms  p99 {pick(0.99):6.2f} ms  max {ordered[-1]:6.2f} ms"


class BridgeQueues:
    """Samples `ss` every 10 ms while running: the bridge's queues on both ends (otunnel's
    socket to relayd's TLS port, and relayd's socket of that connection). Recv-Q on relayd's end
    is what relayd has not read yet (the bulk bytes a small answer waits behind); Send-Q on
    otunnel's end is what its kernel has not had acknowledged."""

    def __init__(self, relay_port, otunnel_pid):
        self.relay_port = relay_port
        self.otunnel_pid = otunnel_pid
        self.samples = []  # (otunnel recv, otunnel send, relayd recv, relayd send)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        out = subprocess.run(["ss", "-tnpH", "state", "established", "(", "sport", "=",
                              f":{self.relay_port}", "or", "dport", "=", f":{self.relay_port}",
                              ")"], capture_output=True, text=True).stdout
        rows = []
        for line in out.splitlines():
            fields = line.split()
            if len(fields) < 4:
                continue
            recv, send, local, peer = int(fields[0]), int(fields[1]), fields[2], fields[3]
            rows.append((recv, send, local.rsplit(":", 1)[1], peer.rsplit(":", 1)[1], line))
        mine = [r for r in rows if f"pid={self.otunnel_pid}," in r[4]
                and r[3] == str(self.relay_port)]
        if len(mine) != 1:
            return None
        theirs = [r for r in rows if r[2] == str(self.relay_port) and r[3] == mine[0][2]]
        if len(theirs) != 1:
            return None
        return mine[0][0], mine[0][1], theirs[0][0], theirs[0][1]

    def _run(self):
        while not self.stop_event.wait(0.01):
            sample = self._sample()
            if sample is not None:
                self.samples.append(sample)

    def __enter__(self):
        if shutil.which("ss") is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join()

    def describe(self):
        if not self.samples:
            return "bridge queues: no ss samples"
        names = ("otunnel Recv-Q", "otunnel Send-Q", "relayd Recv-Q", "relayd Send-Q")
        parts = []
        for i, name in enumerate(names):
            values = sorted(s[i] for s in self.samples)
            parts.append(f"{name} max {values[-1] // 1000} KB avg "
                         f"{sum(values) // len(values) // 1000} KB p50 "
                         f"{values[len(values) // 2] // 1000} KB")
        return f"bridge queues ({len(self.samples)} ss samples): " + ", ".join(parts)


def run_queue_waits(before, after, seconds):
    """'name waited X ms/s for a CPU (ran Y ms/s)' for each process sampled in both."""
    parts = []
    for name in after:
        if before.get(name) is None or after[name] is None:
            continue
        ran = (after[name][0] - before[name][0]) / 1e6 / seconds
        waited = (after[name][1] - before[name][1]) / 1e6 / seconds
        parts.append(f"{name} waited {waited:.0f} ms/s (ran {ran:.0f} ms/s)")
    return "run-queue waits: " + ", ".join(parts) if parts else "run-queue waits: no schedstat"


def probe_once(tunnel, ca_file, count, pids):
    """The probe in its child, with every pid's run-queue wait over the same interval."""
    before = {name: schedstat(pid) for name, pid in pids.items()}
    started = time.monotonic()
    times, child = round_trips_in_child(tunnel.url, ca_file, count)
    seconds = time.monotonic() - started
    after = {name: schedstat(pid) for name, pid in pids.items()}
    # The child's own figures cover its whole life (it started with the probe).
    before["probe"] = (0, 0)
    after["probe"] = child
    return times, run_queue_waits(before, after, seconds)


def rtt_probe(tunnel, ca_file, tunnel_args, count, size, relay_port, pids, beside, rate):
    alone, waits = probe_once(tunnel, ca_file, count, pids)
    print(f"round trips alone          {describe(alone)}  ({count})")
    print(f"  {waits}")
    limit = ["--limit-rate", f"{rate * MB}"] if rate else []
    moved = {}

    def bulk_transfer():
        if beside == "download":
            moved["result"] = timed_curl([*tunnel_args, *limit, "-o", "/dev/null", "-w",
                                          "%{size_download}", f"{tunnel.url}/dl?n={size}"])
        else:
            # a length, not chunked (the origin reads Content-Length bytes)
            moved["result"] = timed_curl([*tunnel_args, *limit, "-H", "Expect:", "-H",
                                          "Transfer-Encoding:", "-H", f"Content-Length: {size}",
                                          "-X", "POST", "-T", "-", "-w", "%{size_upload}",
                                          "-o", "/dev/null", f"{tunnel.url}/ul"],
                                         input_bytes=size)

    bulk = threading.Thread(target=bulk_transfer)
    bulk.start()
    time.sleep(0.3)  # the transfer is under way
    with BridgeQueues(relay_port, pids["otunnel"]) as queues:
        shared, waits = probe_once(tunnel, ca_file, count, pids)
    still_running = bulk.is_alive()
    bulk.join()
    if "result" not in moved:
        raise RuntimeError(f"the {beside} beside the round trips failed")
    seconds, out = moved["result"]
    print(f"round trips with {beside:8}  {describe(shared)}  ({count}"
          f"{'' if still_running else f'; the {beside} ended before the probe did: raise --mb'})")
    print(f"  {waits}")
    print(f"the {beside} beside them: {int(out) / MB / seconds:.1f} MB/s"
          + (f" (curl --limit-rate {rate} MB/s)" if rate else ""))
    print(queues.describe(), flush=True)


def count_epoll_ctl(pids, action):
    """epoll_ctl calls each of `pids` made while action() ran (perf stat on the syscall
    tracepoint), or None when perf cannot count them."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    outputs = {}
    counters = {}
    for name, pid in pids.items():
        outputs[name] = tempfile.NamedTemporaryFile(prefix="ot-perf-", suffix=".txt")
        counters[name] = subprocess.Popen(
            [perf, "stat", "-x", ",", "-e", "syscalls:sys_enter_epoll_ctl", "-p", str(pid),
             "-o", outputs[name].name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # perf attached
    try:
        action()
    finally:
        for counter in counters.values():
            counter.send_signal(signal.SIGINT)
            counter.wait()
    counts = {}
    for name, output in outputs.items():
        text = Path(output.name).read_text()
        output.close()
        for line in text.splitlines():
            fields = line.split(",")
            if len(fields) > 2 and "epoll_ctl" in fields[2] and fields[0].isdigit():
                counts[name] = int(fields[0])
    return counts if len(counts) == len(pids) else None


def visitor_connections(url, ca_file, count):
    """`count` visitors, each its own HTTPS connection through the tunnel: GET /dl?n=1, close."""
    parsed = urllib.parse.urlsplit(url)
    context = rh.client_context(ca_file)
    for _ in range(count):
        connection = http.client.HTTPSConnection(parsed.hostname, parsed.port, timeout=30)
        connection.sock = context.wrap_socket(
            socket.create_connection(("127.0.0.1", parsed.port), timeout=30),
            server_hostname=parsed.hostname)
        try:
            connection.request("GET", "/dl?n=1", headers={"Connection": "close"})
            if connection.getresponse().read() != BLOCK[:1]:
                raise RuntimeError("visitor: wrong body")
        finally:
            connection.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=200, help="megabytes per transfer")
    parser.add_argument("--links", type=int, default=2, help="otunnel --links")
    parser.add_argument("--runs", type=int, default=3, help="runs per path; the best is shown")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--rtt", type=int, default=0,
                        help="then this many small round trips, alone and beside a download")
    parser.add_argument("--no-ssh", action="store_true", help="skip the ssh -R path")
    parser.add_argument("--direction", choices=("both", "download", "upload"), default="both")
    parser.add_argument("--visitors", type=int, default=0,
                        help="then this many visitor connections, counting epoll_ctl calls")
    parser.add_argument("--beside", choices=("download", "upload", "both"), default="download",
                        help="with --rtt: the bulk transfer the round trips run beside")
    parser.add_argument("--probe-only", action="store_true",
                        help="with --rtt: skip the throughput runs")
    parser.add_argument("--tls-mode", action="store_true",
                        help="also the same transfers with the visitor's TLS carried end to end "
                             "to a TLS origin: otunnel `tls` (passthrough) against ssh -R")
    parser.add_argument("--bulk-rate", type=int, default=0,
                        help="with --rtt: pace the bulk transfer beside the probe to this many "
                             "MB/s (curl --limit-rate); 0: as fast as it goes")
    parser.add_argument("--rt-probe", action="store_true",
                        help="with --rtt (root): relayd, otunnel and the probe's processes "
                             "under SCHED_FIFO, the bulk transfer's not")
    options = parser.parse_args()
    global RT_PROBE
    RT_PROBE = options.rt_probe

    workdir = Path(tempfile.mkdtemp(prefix="ot-bench-"))
    origin = FastOrigin()
    tls_origin = None
    stack = rh.Stack(workdir, relayd_env={"SHUTDOWN_DRAIN_MS": "200", "LOG_LEVEL": "info"})
    ssh = None
    try:
        tunnel = stack.tunnel(origin.port, links=options.links)
        tls_tunnel = None
        if options.tls_mode:
            # otunnel `tls` passes the visitor's TLS through to an origin that terminates it with
            # the key and chain otunnel provisioned (written to its state directory).
            tls_port = free_port()
            tls_tunnel = stack.tunnel(tls_port, mode="tls", links=options.links,
                                      name="otunnel-tls")
            tls_origin = FastOrigin(tls_files=(
                tls_tunnel.state_dir / f"{tls_tunnel.tunnel_id}.chain.pem",
                tls_tunnel.state_dir / f"{tls_tunnel.tunnel_id}.key.pem"), port=tls_port)
        size = options.mb * MB
        upload = workdir / "upload.bin"
        if not options.probe_only:  # the probe's upload is fed from /dev/zero
            with open(upload, "wb") as f:
                for _ in range(size // len(BLOCK)):
                    f.write(BLOCK)
                f.write(BLOCK[:size % len(BLOCK)])

        parsed = urllib.parse.urlsplit(tunnel.url)
        tunnel_args = ["--cacert", str(stack.ca_file), "--resolve",
                       f"{parsed.hostname}:{parsed.port}:127.0.0.1"]
        direct = f"http://127.0.0.1:{origin.port}"
        tunnel_pids = {"relayd": stack.relayd.process.pid, "otunnel": tunnel.process.pid}

        def tunnel_cpu():
            return {name: cpu_seconds(pid) for name, pid in tunnel_pids.items()}

        # name -> (base URL, curl arguments, CPU reader or None, the path its ratio is against)
        paths = {"direct": (direct, [], None, None),
                 "tunnel": (tunnel.url, tunnel_args, tunnel_cpu, "direct")}
        tls_args = []
        if tls_tunnel is not None:
            host = tls_tunnel.hostname
            tls_args = ["--cacert", str(stack.ca_file)]
            tls_pids = {"relayd": stack.relayd.process.pid, "otunnel": tls_tunnel.process.pid}
            paths["direct tls"] = (
                f"https://{host}:{tls_origin.port}",
                [*tls_args, "--resolve", f"{host}:{tls_origin.port}:127.0.0.1"], None, None)
            paths["tunnel tls"] = (
                tls_tunnel.url,
                [*tls_args, "--resolve", f"{host}:{parsed.port}:127.0.0.1"],
                lambda: {name: cpu_seconds(pid) for name, pid in tls_pids.items()}, "direct tls")
        if options.no_ssh:
            print("ssh -R: skipped (--no-ssh)")
        else:
            ssh = SshReverseTunnel(workdir, [origin.port] + (
                [tls_origin.port] if tls_origin is not None else []))
            if ssh.start():
                paths["ssh -R"] = (f"http://127.0.0.1:{ssh.ports[origin.port]}", [], ssh.cpu,
                                   "direct")
                if tls_origin is not None:
                    port = ssh.ports[tls_origin.port]
                    paths["ssh -R tls"] = (
                        f"https://{tls_tunnel.hostname}:{port}",
                        [*tls_args, "--resolve", f"{tls_tunnel.hostname}:{port}:127.0.0.1"],
                        ssh.cpu, "direct tls")
            else:
                print(f"ssh -R: skipped: {ssh.error}")
        print(f"{options.mb} MB per transfer, otunnel --links {options.links}, "
              f"best of {options.runs}" + (f", ssh -R with {SSH_CIPHER}" if "ssh -R" in paths
                                           else ""))
        print(f"relayd pid {tunnel_pids['relayd']}, otunnel pid {tunnel_pids['otunnel']}",
              flush=True)
        directions = ("download", "upload") if options.direction == "both" else (options.direction,)
        if options.probe_only:
            directions = ()
        for direction in directions:
            best = {}
            for name, (base, extra, read_cpu, reference) in paths.items():
                before = read_cpu() if read_cpu else {}
                for _ in range(options.runs):
                    if direction == "download":
                        seconds, out = timed_curl([*extra, "-o", "/dev/null", "-w",
                                                   "%{size_download}", f"{base}/dl?n={size}"])
                    else:
                        # -T streams the file (--data-binary copies it first, at ~150 MB/s).
                        seconds, out = timed_curl([*extra, "-H", "Expect:", "-X", "POST", "-T",
                                                   str(upload), f"{base}/ul"])
                    if int(out) != size:
                        raise RuntimeError(f"{direction} {name}: {out} bytes, wanted {size}")
                    best[name] = max(best.get(name, 0.0), size / MB / seconds)
                line = f"{direction:8}  {name:10} {best[name]:8.1f} MB/s"
                if read_cpu:
                    moved = options.runs * size / MB
                    after = read_cpu()
                    line += f"  ratio {best[name] / best[reference]:.2f}  cpu ms/MB " + "  ".join(
                        f"{d:7} {(after[d] - before[d]) * 1000 / moved:.2f}" for d in after)
                print(line, flush=True)
        if options.visitors:
            counts = count_epoll_ctl(tunnel_pids, lambda: visitor_connections(
                tunnel.url, stack.ca_file, options.visitors))
            if counts is None:
                print("epoll_ctl per visitor: perf cannot count syscalls:sys_enter_epoll_ctl here")
            else:
                print(f"epoll_ctl per visitor ({options.visitors} visitors, one connection "
                      "each): " + "  ".join(f"{name} {count / options.visitors:.1f}"
                                            for name, count in counts.items()))
        if options.rtt:
            if RT_PROBE:
                for pid in tunnel_pids.values():
                    make_realtime(pid)
            for beside in ("download", "upload") if options.beside == "both" else (
                    options.beside,):
                rtt_probe(tunnel, stack.ca_file, tunnel_args, options.rtt, size,
                          stack.relayd.tls_port, tunnel_pids, beside, options.bulk_rate)
    finally:
        if ssh is not None:
            ssh.stop()
        codes = stack.close()
        origin.stop()
        if tls_origin is not None:
            tls_origin.stop()
        if options.keep:
            print(f"work directory: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        bad = {name: code for name, code in codes.items() if code != 0}
        if bad:
            print(f"processes exited badly: {bad}", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
