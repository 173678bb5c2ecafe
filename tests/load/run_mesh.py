#!/usr/bin/python3
"""Mesh load run (issue 14, docs/capacity.md "The region mesh"): N machines, each a real controld +
relayd pair on its own loopback address linked by the region mesh (INTERNAL_LISTEN, one internal
token, MESH_PEERS naming the others), all on one MariaDB database. Tunnels are seeded through
machine A's API and split between the machines; one ot_bridge_load per machine attaches its share
of the bridges to its own relayd. Then, in order:

  idle      CPU of every controld and relayd (from /proc) while the bridges are held, the baseline
  churn     every tool detaches and re-attaches its bridges (ot_bridge_load --churn), together
            --changes a second; propagation from controld's opentunnel_mesh_propagation_seconds
            (the sender's sent_at, whole ms, to the receiver applying it), CPU per change over the
            idle baseline, total CPU; optionally `perf record -g` on machine B's controld
  sync      every machine's view of every other machine's bridges equals that machine's own count
            (controld's opentunnel_mesh_table_bridges{machine} against opentunnel_mesh_local_bridges)
  visitors  the same visitors to tunnels held on A through A's relayd (local) and through B's
            (forwarded to A): time to the first byte back, relayd CPU per visitor
  join      one more machine starts; the time until its links are up and its controld's table and
            its relayd's copy hold every bridge and route

  /usr/bin/python3 tests/load/run_mesh.py --build-dir build --bridges 20000 --changes 100
  /usr/bin/python3 tests/load/run_mesh.py --build-dir build --smoke     # what ctest runs

Prints the figures at the end (and --json writes them). The state directory keeps the MariaDB
server's data and the seeded tunnels for the next run (--fresh drops them). --smoke exits 1 unless
the tables agree, every visitor was served and the new machine caught up.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "integration"))
import bridge_client  # noqa: E402  (the protocol's raw bridge, for the probe)
import run_capacity  # noqa: E402  (seed_tunnels, wait_until, raise_nofile)

DOMAIN = run_capacity.DOMAIN
PER_TUNNEL = run_capacity.MAX_BRIDGES_PER_TUNNEL
TOKEN = "mesh-load-internal-token-of-at-least-32-bytes"
DATABASE = "ot_meshload"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def log(message):
    print(f"[run_mesh {time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """utime + stime of a live process, in seconds (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(address):
    """Prometheus text from http://address/metrics as {(name, frozenset(labels)): value}."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if not match or line.startswith("#"):
            continue
        labels = frozenset(LABEL.findall(match.group(3) or ""))
        values[(match.group(1), labels)] = float(match.group(4))
    return values


def metric(values, name, **labels):
    """The sum of the series of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in values.items() if n == name and wanted <= ls)


class Machine:
    def __init__(self, build, state, name, address, peers, database):
        self.name = name
        self.address = address
        self.dir = state / name
        if self.dir.exists():
            shutil.rmtree(self.dir)  # sockets, logs; the tunnels live in the database
        self.dir.mkdir(parents=True)
        os.chmod(self.dir, 0o700)
        self.internal_port = free_port(address)
        self.internal = f"{address}:{self.internal_port}"
        self.http_port = free_port("127.0.0.1")
        self.controld_metrics = f"{address}:{free_port(address)}"
        self.relayd_metrics = f"{address}:{free_port(address)}"
        self.tls_port = free_port(address)
        self.ca_file = str(self.dir / "local-ca.pem")
        self.build = build
        common = {
            "PATH": "/usr/bin:/bin", "OPENTUNNEL_DOMAIN": DOMAIN, "MACHINE_ID": name,
            "REGION": "local", "INTERNAL_LISTEN": self.internal, "INTERNAL_TOKEN": TOKEN,
            "CONTROL_SOCKET": str(self.dir / "control.sock"),
            "API_SOCKET": str(self.dir / "api.sock"), "LOG_LEVEL": "warn",
        }
        self.controld_env = {
            **common, "HTTP_MODE": "serve", "HTTP_LISTEN": f"127.0.0.1:{self.http_port}",
            "LOCAL_CA_FILE": self.ca_file, "ISSUER": "local", "DATABASE_URL": database,
            "METRICS_LISTEN": self.controld_metrics, "CREATE_RATE_PER_HOUR": "0",
            "ISSUANCE_RATE_PER_DAY": "0", "ISSUANCE_BACKLOG_LIMIT": "0",
            "STARTUP_DB_TIMEOUT_MS": "30000", "MESH_PEERS": peers, "STATE_DIR": str(self.dir),
        }
        self.relayd_env = {
            **common, "TLS_LISTEN": f"{address}:{self.tls_port}", "HTTP_LISTEN": f"{address}:0",
            "METRICS_LISTEN": self.relayd_metrics, "STATE_DIR": str(self.dir / "relayd-state"),
        }
        for key in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            if key in os.environ:
                self.controld_env[key] = self.relayd_env[key] = os.environ[key]
        self.controld = self.relayd = None
        self.tool = None

    def start(self):
        """controld, then relayd; returns when both serve (not waiting for the links)."""
        self.started_at = time.monotonic()
        self.controld = self._spawn("controld/controld", self.controld_env, "controld.log")
        run_capacity.wait_until(self.healthy, 60, f"{self.name}: controld /health")
        self.relayd = self._spawn("relayd/relayd", self.relayd_env, "relayd.log")
        run_capacity.wait_until(self.serving, 60, f"{self.name}: relayd serving TLS")
        return self

    def _spawn(self, binary, env, log_name):
        return subprocess.Popen([str(self.build / binary)], env=env,
                                stdout=open(self.dir / log_name, "ab"),
                                stderr=subprocess.STDOUT, preexec_fn=run_capacity.raise_nofile)

    def _alive(self):
        for process, log_name in ((self.controld, "controld.log"), (self.relayd, "relayd.log")):
            if process is not None and process.poll() is not None:
                tail = (self.dir / log_name).read_text(errors="replace")[-3000:]
                raise SystemExit(f"{self.name}: {log_name} exited {process.returncode}:\n{tail}")

    def healthy(self):
        self._alive()
        try:
            return self.request("GET", "/health")[0] == 200
        except OSError:
            return False

    def serving(self):
        self._alive()
        try:
            scrape(self.relayd_metrics)
            socket.create_connection((self.address, self.tls_port), timeout=2).close()
            return os.path.exists(self.ca_file)
        except OSError:
            return False

    def request(self, method, path, body=None, token=None):
        return run_capacity.Controld.request(self, method, path, body, token)

    @property
    def port(self):  # run_capacity.Controld.request's
        return self.http_port

    def controld_values(self):
        self._alive()
        return scrape(self.controld_metrics)

    def relayd_values(self):
        self._alive()
        return scrape(self.relayd_metrics)

    def pids(self):
        return [self.controld.pid, self.relayd.pid]

    def stop(self):
        for process in (self.relayd, self.controld):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


class Tool:
    """One ot_bridge_load holding a machine's bridges, churning between SIGUSR1 and SIGUSR2."""

    def __init__(self, build, state, machine, tunnels_file, bridges, rate, churn, source_base):
        self.machine = machine
        self.bridges = bridges
        self.log_path = state / f"tool-{machine.name}.log"
        command = [str(build / "tests/load/ot_bridge_load"), "--relay",
                   f"{machine.address}:{machine.tls_port}", "--domain", DOMAIN,
                   "--ca-file", machine.ca_file, "--tunnels", str(tunnels_file),
                   "--bridges", str(bridges), "--rate", str(rate), "--sources", "64",
                   "--source-base", source_base, "--hold", "1000000000", "--storm", "none",
                   "--churn", str(churn), "--churn-on-signal"]
        self.process = subprocess.Popen(command, stdout=open(self.log_path, "wb"),
                                        stderr=subprocess.STDOUT,
                                        preexec_fn=run_capacity.raise_nofile)

    def signal(self, signum):
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def stop(self):
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def visitors(build, state, machine, target, tunnels_file, count, concurrency, label,
             source_base, idle_rate):
    """ot_bridge_load without bridges: `count` visitors to the tunnels in tunnels_file through
    `target`'s relayd. Returns the tool's summary and the CPU the relayds involved spent
    meanwhile over their idle rate (the held bridges' pings), per visitor."""
    command = [str(build / "tests/load/ot_bridge_load"), "--relay",
               f"{target.address}:{target.tls_port}", "--domain", DOMAIN,
               "--ca-file", machine.ca_file, "--tunnels", str(tunnels_file), "--bridges", "0",
               "--hold", "0", "--visitors", str(count), "--visitor-concurrency",
               str(concurrency), "--visitor-rounds", "1", "--sources", "16",
               "--source-base", source_base]
    relayds = {m.name: m.relayd.pid for m in (machine, target)}
    before = {name: cpu_seconds(pid) for name, pid in relayds.items()}
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    after = {name: cpu_seconds(pid) for name, pid in relayds.items()}
    elapsed = time.monotonic() - started
    (state / f"visitors-{label}.log").write_text(result.stdout + result.stderr)
    match = re.search(r"visitors: (\d+) echoed, (\d+) failed in ([\d.]+) s .*?first byte back "
                      r"p50 ([\d.]+) ms, p99 ([\d.]+) ms", result.stdout)
    if not match:
        raise SystemExit(f"visitors through {target.name}: no summary\n{result.stdout[-3000:]}")
    served, failed = int(match.group(1)), int(match.group(2))
    cpu = {name: (after[name] - before[name] - idle_rate[f"{name}/relayd"] * elapsed) * 1e6
           / max(served, 1) for name in relayds}
    return {"served": served, "failed": failed, "seconds": float(match.group(3)),
            "p50_ms": float(match.group(4)), "p99_ms": float(match.group(5)),
            "relayd_cpu_us_per_visitor": cpu}


def histogram(values, name, **labels):
    """{upper bound: cumulative count} of a histogram's buckets."""
    wanted = set(labels.items())
    buckets = {}
    for (n, ls), v in values.items():
        if n == name + "_bucket" and wanted <= ls:
            le = dict(ls)["le"]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0) + v
    return buckets


def quantile(buckets, q):
    """The q-quantile of a cumulative histogram, as the bucket (lower, upper] that holds it."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return None
    rank = q * total
    lower = 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            return (lower, bound)
        lower = bound
    return (lower, float("inf"))


def describe_ms(interval):
    """A bucket of the propagation histogram in ms. sent_at is in whole ms, so a bucket
    (n - 0.5, n + 0.5] ms holds exactly n ms."""
    if interval is None:
        return "n/a"
    lower, upper = (x * 1000 for x in interval)
    if upper == float("inf"):
        return f"> {lower:g} ms"
    if lower == 0 and upper <= 0.5:
        return "0 ms"  # sent in the millisecond it was applied
    if abs((upper - lower) - 1) < 1e-6 and abs(upper - round(upper) - 0.5) < 1e-6:
        return f"{round(upper - 0.5)} ms"
    return f"{lower:g}-{upper:g} ms"


def probe_bridge(machine, tunnel_id, token):
    """One raw bridge (tests/integration/bridge_client.py) on machine's relayd for the probe
    tunnel; returns it attached and the time its `attach` left."""
    raw = socket.create_connection((machine.address, machine.tls_port), timeout=15)
    context = ssl.create_default_context(cafile=machine.ca_file)
    context.set_alpn_protocols(["http/1.1"])
    client = bridge_client.BridgeClient.__new__(bridge_client.BridgeClient)
    client.port, client.ca_file, client.timeout = machine.tls_port, machine.ca_file, 15
    client.sock = context.wrap_socket(raw, server_hostname=DOMAIN)
    client.buffer, client.status, client.headers, client.body = b"", None, {}, b""
    if client.upgrade(tunnel_id) != 101:
        raise SystemExit(f"probe bridge: upgrade answered {client.status}")
    sent = time.monotonic()
    answer = client.attach(token)
    if answer.get("type") != "attached":
        raise SystemExit(f"probe bridge: {answer}")
    return client, sent


def probe(machines, tunnel_id, token, rounds):
    """End to end, as a visitor elsewhere would see it: a bridge of a tunnel held nowhere else
    attaches on A (then closes); the time from its `attach` (its close) leaving the client until
    every other machine's relayd counts the route in (out of) its forwarding table
    (opentunnel_mesh_table_routes, polled back to back, so each figure is late by at most one
    scrape). The load's tunnels keep 15 of their 16 bridges through the churn, so their routes
    do not move the count."""
    a, others = machines[0], machines[1:]
    base = {m.name: metric(m.relayd_values(), "opentunnel_mesh_table_routes") for m in others}
    samples, scrape_ms = {"attached": [], "detached": []}, []

    def wait_all(want, since, kind):
        pending = set(m.name for m in others)
        deadline = since + 30
        while pending and time.monotonic() < deadline:
            for m in others:
                if m.name in pending:
                    before = time.monotonic()
                    routes = metric(m.relayd_values(), "opentunnel_mesh_table_routes")
                    now = time.monotonic()
                    scrape_ms.append((now - before) * 1000)
                    if routes == base[m.name] + want:
                        pending.discard(m.name)
                        samples[kind].append((now - since) * 1000)
        if pending:
            raise SystemExit(f"probe: {sorted(pending)} never saw the {kind} route")

    for _ in range(rounds):
        client, sent = probe_bridge(a, tunnel_id, token)
        wait_all(1, sent, "attached")
        closed = time.monotonic()
        client.close()
        wait_all(0, closed, "detached")
    return samples, scrape_ms


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def tables(machines):
    """Every machine's controld view: {machine: {holder: bridges}}, and local counts."""
    views, local = {}, {}
    for m in machines:
        values = m.controld_values()
        local[m.name] = metric(values, "opentunnel_mesh_local_bridges")
        views[m.name] = {dict(ls)["machine"]: v for (n, ls), v in values.items()
                         if n == "opentunnel_mesh_table_bridges"}
    return views, local


def in_sync(machines, expected=None, routes=None):
    """True when every machine sees every other machine's own count of bridges (and, given
    `expected`, each machine holds that many; given `routes`, each relayd's forwarding table
    holds that many routes)."""
    views, local = tables(machines)
    for m in machines:
        if expected is not None and local[m.name] != expected[m.name]:
            return False
        if routes is not None and metric(m.relayd_values(),
                                         "opentunnel_mesh_table_routes") != routes[m.name]:
            return False
        for other in machines:
            if other is not m and views[m.name].get(other.name, 0) != local[other.name]:
                return False
    return True


def cpu_all(machines):
    return {f"{m.name}/{kind}": cpu_seconds(pid)
            for m in machines for kind, pid in zip(("controld", "relayd"), m.pids())}


def mariadb(args, state):
    """The database URL: a fresh database on --mysql-url-file's server (dropped at exit), or our
    own server kept in the state directory between runs."""
    script = Path(__file__).resolve().parents[1] / "services/mariadb.sh"
    if args.mysql_url_file:
        base = Path(args.mysql_url_file).read_text().strip().rstrip("/")
        name = "ot_meshload_" + os.urandom(4).hex()
        owned = False
    else:
        directory = state / "mariadb"
        if (directory / "url").exists():
            subprocess.run([str(script), "start-server", str(directory)], check=True)
        else:
            subprocess.run([str(script), "start", str(directory)], check=True)
        base = (directory / "url").read_text().strip().rstrip("/")
        name = DATABASE
        owned = True
    userinfo, hostport = base[len("mysql://"):].split("@", 1)
    user, password = userinfo.split(":", 1)
    host, port = hostport.split(":", 1)

    def sql(statement):
        subprocess.run(["mariadb", f"-h{host}", f"-P{port}", f"-u{user}", f"-p{password}", "-e",
                        statement], check=True)

    sql(f"CREATE DATABASE IF NOT EXISTS {name}")

    def close():
        if owned:
            subprocess.run([str(script), "stop-server", str(state / "mariadb")], check=False)
        else:
            sql(f"DROP DATABASE IF EXISTS {name}")
    return f"{base}/{name}", close, owned


def addresses(base, count):
    first = socket.inet_aton(base)
    start = int.from_bytes(first, "big")
    return [socket.inet_ntoa((start + i).to_bytes(4, "big")) for i in range(count)]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("OT_BUILD_DIR", "build"))
    parser.add_argument("--state", default="/tmp/ot-meshload")
    parser.add_argument("--fresh", action="store_true",
                        help="drop the state (the database server's data, the seeded tunnels)")
    parser.add_argument("--mysql-url-file", default=None,
                        help="use this MariaDB server (a fresh database, dropped at the end) "
                             "instead of starting one in the state directory")
    parser.add_argument("--machines", type=int, default=3)
    parser.add_argument("--address-base", default="127.0.0.41",
                        help="machine i listens on this address + i (the joining one last)")
    parser.add_argument("--bridges", type=int, default=20000, help="across all machines")
    parser.add_argument("--changes", type=float, default=100,
                        help="changes a second across all machines while churning")
    parser.add_argument("--rate", type=float, default=150,
                        help="attaches started a second per machine while ramping")
    parser.add_argument("--idle-seconds", type=float, default=20)
    parser.add_argument("--churn-seconds", type=float, default=60)
    parser.add_argument("--visitors", type=int, default=2000,
                        help="visitors each way (through A's relayd and through B's)")
    parser.add_argument("--visitor-concurrency", type=int, default=4)
    parser.add_argument("--probes", type=int, default=50,
                        help="probe bridges attached and closed on A during the churn")
    parser.add_argument("--no-join", action="store_true", help="skip the joining machine")
    parser.add_argument("--perf", action="store_true",
                        help="perf record -g on machine B's controld during the churn")
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--smoke", action="store_true",
                        help="3 machines, 200 bridges, 5 s of churn at 20 changes/s, 100 "
                             "visitors; exit 1 unless all is in sync and served")
    args = parser.parse_args()
    if args.smoke:
        args.machines, args.bridges, args.changes, args.rate = 3, 200, 20, 100
        args.idle_seconds, args.churn_seconds, args.visitors, args.probes = 2, 5, 100, 5
    if args.machines < 2:
        raise SystemExit("--machines must be at least 2")

    build = Path(args.build_dir).resolve()
    state = Path(args.state)
    if args.fresh and state.exists():
        subprocess.run([str(Path(__file__).resolve().parents[1] / "services/mariadb.sh"),
                        "stop", str(state / "mariadb")], check=False)
        shutil.rmtree(state)
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)
    run_capacity.raise_nofile()
    log(f"box: {os.cpu_count()} cores, load average {os.getloadavg()}")

    database, close_database, keep_tunnels = mariadb(args, state)
    names = [f"machine-{chr(ord('a') + i)}" for i in range(args.machines + 1)]
    ips = addresses(args.address_base, args.machines + 1)
    machines, tools, joining = [], [], None
    figures = {"machines": args.machines, "bridges": args.bridges, "changes_per_s": args.changes}
    ok = True
    try:
        for i in range(args.machines):
            machines.append(Machine(build, state, names[i], ips[i], "", database))
        for machine in machines:
            machine.controld_env["MESH_PEERS"] = ",".join(
                m.internal for m in machines if m is not machine)
        # Machine A first: the tunnels are seeded through its API while the others start.
        machines[0].start()
        per_machine = [args.bridges // args.machines + (1 if i < args.bridges % args.machines
                                                        else 0)
                       for i in range(args.machines)]
        tunnel_counts = [-(-b // PER_TUNNEL) for b in per_machine]
        seed_dir = state if keep_tunnels else state / "seed-once"
        seed_dir.mkdir(exist_ok=True)
        if not keep_tunnels and (seed_dir / "tunnels.txt").exists():
            (seed_dir / "tunnels.txt").unlink()
        lines = run_capacity.seed_tunnels(machines[0], seed_dir,
                                          sum(tunnel_counts) + 1).read_text().split("\n")
        probe_id, probe_token = lines[sum(tunnel_counts)].split()  # held by no tool
        tunnel_files, offset = [], 0
        for i, count in enumerate(tunnel_counts):
            path = state / f"tunnels-{names[i]}.txt"
            path.write_text("\n".join(lines[offset:offset + count]) + "\n")
            tunnel_files.append(path)
            offset += count
        for machine in machines[1:]:
            machine.start()
        run_capacity.wait_until(
            lambda: all(metric(m.controld_values(), "opentunnel_mesh_peers", state="up")
                        == args.machines - 1 for m in machines), 60, "every link up")
        log(f"{args.machines} machines linked: " + ", ".join(
            f"{m.name} {m.internal}" for m in machines))
        rss_before = {m.name: rss_kib(m.controld.pid) for m in machines}

        started = time.monotonic()
        for i, machine in enumerate(machines):
            machine.tool = Tool(build, state, machine, tunnel_files[i], per_machine[i], args.rate,
                                args.changes / args.machines, f"127.{100 + i}.0.1")
            tools.append(machine.tool)
        expected = {m.name: per_machine[i] for i, m in enumerate(machines)}
        # Each tunnel has one route (the tool attaches without routes) and lives on one machine.
        expected_routes = {m.name: sum(tunnel_counts) - tunnel_counts[i]
                           for i, m in enumerate(machines)}
        run_capacity.wait_until(lambda: in_sync(machines, expected, expected_routes),
                                max(120, 4 * args.bridges / args.rate / args.machines),
                                "every bridge attached and in every table")
        figures["ramp_seconds"] = time.monotonic() - started
        log(f"{args.bridges} bridges attached and in every table after "
            f"{figures['ramp_seconds']:.0f} s")
        routes = {m.name: metric(m.relayd_values(), "opentunnel_mesh_table_routes")
                  for m in machines}
        entries = {m.name: metric(m.controld_values(), "opentunnel_mesh_table_entries")
                   for m in machines}
        rss_after = {m.name: rss_kib(m.controld.pid) for m in machines}
        figures["controld_rss_per_bridge_bytes"] = {
            m.name: (rss_after[m.name] - rss_before[m.name]) * 1024 / args.bridges
            for m in machines}
        figures["table_entries"] = entries
        figures["relayd_routes"] = routes

        time.sleep(min(3, args.idle_seconds))
        idle_from, idle_start = cpu_all(machines), time.monotonic()
        time.sleep(args.idle_seconds)
        idle_to, idle_seconds = cpu_all(machines), time.monotonic() - idle_start
        idle_rate = {k: (idle_to[k] - idle_from[k]) / idle_seconds for k in idle_to}

        before = {m.name: m.controld_values() for m in machines}
        churn_from, churn_start = cpu_all(machines), time.monotonic()
        for tool in tools:
            tool.signal(signal.SIGUSR1)
        perf = None
        if args.perf:
            perf = subprocess.Popen(["perf", "record", "-g", "-o", str(state / "perf.data"),
                                     "-p", str(machines[1].controld.pid), "--", "sleep",
                                     str(max(1, args.churn_seconds - 2))],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(args.churn_seconds)
        churn_to, churn_seconds = cpu_all(machines), time.monotonic() - churn_start
        after = {m.name: m.controld_values() for m in machines}
        if perf:
            perf.wait()
        # Still churning, after the CPU window (the probe's scrapes cost relayd CPU).
        samples, scrape_ms = probe(machines, probe_id, probe_token, args.probes)
        for tool in tools:
            tool.signal(signal.SIGUSR2)
        stopped = time.monotonic()
        figures["probe"] = {
            kind: {"p50_ms": percentile(v, 0.5), "p99_ms": percentile(v, 0.99),
                   "max_ms": max(v), "samples": len(v)} for kind, v in samples.items()}
        figures["probe"]["scrape_ms_p50"] = percentile(scrape_ms, 0.5)

        # Propagation over every receiving controld; changes as the receivers applied them.
        propagation = {}
        applied = 0
        for kind in ("attached", "detached"):
            merged = {}
            for m in machines:
                b = histogram(before[m.name], "opentunnel_mesh_propagation_seconds", kind=kind)
                a = histogram(after[m.name], "opentunnel_mesh_propagation_seconds", kind=kind)
                for bound in a:
                    merged[bound] = merged.get(bound, 0) + a[bound] - b.get(bound, 0)
            propagation[kind] = merged
            applied += max(merged.values()) if merged else 0
        both = {bound: propagation["attached"].get(bound, 0)
                + propagation["detached"].get(bound, 0) for bound in propagation["attached"]}
        changes = applied / (args.machines - 1)
        figures["changes"] = changes
        figures["changes_per_s_measured"] = changes / churn_seconds
        figures["propagation"] = {
            "p50": describe_ms(quantile(both, 0.5)), "p99": describe_ms(quantile(both, 0.99)),
            "max_bucket": describe_ms(quantile(both, 1.0)), "samples": applied}
        spent = {k: churn_to[k] - churn_from[k] for k in churn_to}
        over_idle = {k: spent[k] - idle_rate[k] * churn_seconds for k in spent}
        figures["idle_core_percent"] = 100 * sum(idle_rate.values())
        figures["churn_core_percent"] = 100 * sum(spent.values()) / churn_seconds
        figures["churn_core_percent_by_process"] = {
            k: 100 * v / churn_seconds for k, v in spent.items()}
        figures["cpu_us_per_change"] = {
            "all": 1e6 * sum(over_idle.values()) / max(changes, 1),
            "controld": 1e6 * sum(v for k, v in over_idle.items() if k.endswith("controld"))
            / max(changes, 1),
            "relayd": 1e6 * sum(v for k, v in over_idle.items() if k.endswith("relayd"))
            / max(changes, 1)}

        run_capacity.wait_until(lambda: in_sync(machines, expected, expected_routes), 120,
                                "every table in sync after the churn")
        figures["settled_after_churn_seconds"] = time.monotonic() - stopped
        figures["in_sync"] = True
        log(f"tables in sync {figures['settled_after_churn_seconds']:.1f} s after the churn")

        a, b = machines[0], machines[1]
        figures["visitors_local"] = visitors(build, state, a, a, tunnel_files[0], args.visitors,
                                             args.visitor_concurrency, "local", "127.200.0.1",
                                             idle_rate)
        figures["visitors_forwarded"] = visitors(build, state, a, b, tunnel_files[0],
                                                 args.visitors, args.visitor_concurrency,
                                                 "forwarded", "127.201.0.1", idle_rate)

        if not args.no_join:
            joining = Machine(build, state, names[-1], ips[-1],
                              ",".join(m.internal for m in machines), database)
            spawned = time.monotonic()
            joining.start()
            healthy = time.monotonic() - spawned
            rss_empty = {"controld": rss_kib(joining.controld.pid),
                         "relayd": rss_kib(joining.relayd.pid)}
            links_at = table_at = routes_at = None
            want_routes = sum(tunnel_counts)
            deadline = spawned + 300
            while time.monotonic() < deadline and None in (links_at, table_at, routes_at):
                c, r = joining.controld_values(), joining.relayd_values()
                now = time.monotonic() - spawned
                if links_at is None and metric(c, "opentunnel_mesh_peers",
                                               state="up") == args.machines:
                    links_at = now
                if table_at is None and metric(c, "opentunnel_mesh_table_entries") == args.bridges:
                    table_at = now
                if routes_at is None and metric(r, "opentunnel_mesh_table_routes") >= want_routes:
                    routes_at = now
                time.sleep(0.02)
            time.sleep(1)  # the feed's last batch, the allocator settling
            figures["join"] = {"started_s": healthy, "links_up_s": links_at,
                               "controld_table_s": table_at, "relayd_routes_s": routes_at,
                               "routes": want_routes,
                               # A machine with no bridges of its own: its controld's growth is
                               # the table (and the feed to relayd), its relayd's the route copy.
                               "controld_rss_per_entry_bytes":
                                   (rss_kib(joining.controld.pid) - rss_empty["controld"])
                                   * 1024 / args.bridges,
                               "relayd_rss_per_route_bytes":
                                   (rss_kib(joining.relayd.pid) - rss_empty["relayd"])
                                   * 1024 / max(want_routes, 1)}
            ok = ok and None not in (links_at, table_at, routes_at)
            figures["in_sync_with_joined"] = in_sync(machines + [joining])
            ok = ok and figures["in_sync_with_joined"]
        for kind in ("visitors_local", "visitors_forwarded"):
            ok = ok and figures[kind]["failed"] == 0 and figures[kind]["served"] == args.visitors
        ok = ok and changes > 0
    finally:
        for tool in tools:
            tool.stop()
        for machine in machines + ([joining] if joining else []):
            machine.stop()
        close_database()

    report(figures, args)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    if args.perf:
        log(f"profile: perf report -i {state / 'perf.data'} --no-children --stdio")
    sys.exit(0 if ok or not args.smoke else 1)


def report(f, args):
    print(f"\n== mesh load: {f['machines']} machines, {f['bridges']} bridges, "
          f"{f['changes_per_s']:g} changes/s asked ==")
    print(f"ramp: every bridge attached and in every table after {f['ramp_seconds']:.0f} s; "
          f"table entries {f['table_entries']}, relayd routes {f['relayd_routes']}")
    print(f"churn: {f['changes']:.0f} changes applied ({f['changes_per_s_measured']:.1f}/s); "
          f"propagation (sender's sent_at to the receiving controld applying it, ms clocks): "
          f"p50 {f['propagation']['p50']}, p99 {f['propagation']['p99']}, "
          f"max {f['propagation']['max_bucket']} over {f['propagation']['samples']:.0f} "
          f"applications")
    p = f["probe"]
    print("end to end (probe bridge on A, every other relayd's forwarding table, polled; "
          f"a scrape takes ~{p['scrape_ms_p50']:.1f} ms): " + "; ".join(
              f"{kind} p50 {p[kind]['p50_ms']:.1f} ms, p99 {p[kind]['p99_ms']:.1f} ms, "
              f"max {p[kind]['max_ms']:.1f} ms ({p[kind]['samples']})"
              for kind in ("attached", "detached")))
    per = f["cpu_us_per_change"]
    print(f"CPU per change over the idle baseline: {per['all']:.0f} us (controlds "
          f"{per['controld']:.0f} us, relayds {per['relayd']:.0f} us, the bridge's reconnect "
          f"included)")
    print(f"CPU, all controlds and relayds: idle {f['idle_core_percent']:.1f} % of a core, "
          f"churning {f['churn_core_percent']:.1f} % of a core")
    print("  by process while churning: " + ", ".join(
        f"{k} {v:.1f} %" for k, v in f["churn_core_percent_by_process"].items()))
    print("controld RSS growth per bridge (ramp, all bridges): " + ", ".join(
        f"{k} {v:.0f} B" for k, v in f["controld_rss_per_bridge_bytes"].items()))
    print(f"in sync after the churn: {f['in_sync']} "
          f"(settled {f['settled_after_churn_seconds']:.1f} s after it stopped)")
    for kind in ("visitors_local", "visitors_forwarded"):
        v = f[kind]
        cpu = ", ".join(f"{k} {c:.0f} us" for k, c in v["relayd_cpu_us_per_visitor"].items())
        print(f"{kind}: {v['served']} served, {v['failed']} failed; connect + first byte back "
              f"p50 {v['p50_ms']:.2f} ms, p99 {v['p99_ms']:.2f} ms; relayd CPU per visitor: {cpu}")
    if "join" in f:
        j = f["join"]

        def s(x):
            return "never" if x is None else f"{x:.2f} s"
        print(f"join: controld healthy + relayd serving {s(j['started_s'])}, links up "
              f"{s(j['links_up_s'])}, controld table complete {s(j['controld_table_s'])}, "
              f"relayd routes complete ({j['routes']}) {s(j['relayd_routes_s'])} (from spawn); "
              f"all in sync with it: {f['in_sync_with_joined']}")
        print(f"join: RSS growth of the new machine (no bridges of its own): controld "
              f"{j['controld_rss_per_entry_bytes']:.0f} B per table entry, relayd "
              f"{j['relayd_rss_per_route_bytes']:.0f} B per route")


if __name__ == "__main__":
    main()
