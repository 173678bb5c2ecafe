#!/usr/bin/python3
"""Capacity run: a dev controld + relayd (relayd pinned to one core), tunnels seeded through
controld's API with certificates from its local CA, then ot_bridge_load: ramp to N bridges, hold
them idle, SIGTERM relayd (this script starts the new one at once on the same ports) and time the
storm. Optionally first a bare TLS 1.3 handshake yardstick (openssl s_server on relayd's core),
full handshakes and resumed ones (s_server issues session tickets itself). The tool prints relayd's
CPU per attach over the ramp (full handshakes) and in the storm (resumed: relayd keeps its ticket
keys in the state directory, so the new relayd opens the tickets the old one gave out).

  /usr/bin/python3 tests/load/run_capacity.py --build-dir build --bridges 19000 --rate 400

See docs/capacity.md. The state directory keeps the seeded tunnels between runs (--fresh drops it).
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

DOMAIN = "opentunnel.localhost"
MAX_BRIDGES_PER_TUNNEL = 16  # the load shape of earlier runs (relayd allows 128 per tunnel since pools)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def nice_prefix(nice):
    """`nice -n N` (negative needs root or CAP_SYS_NICE): on a box busy with other work, keeps the
    scheduler from starving relayd and the tool so the run measures them, not the neighbours."""
    return ["nice", "-n", str(nice)] if nice else []


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


class Controld:
    def __init__(self, build, state):
        self.state = state
        self.port = free_port()
        self.ca_file = str(state / "local-ca.pem")
        self.env = {
            "PATH": "/usr/bin:/bin", "OPENTUNNEL_DOMAIN": DOMAIN, "HTTP_MODE": "serve",
            "HTTP_LISTEN": f"127.0.0.1:{self.port}", "API_SOCKET": str(state / "api.sock"),
            "CONTROL_SOCKET": str(state / "control.sock"), "LOCAL_CA_FILE": self.ca_file,
            "ISSUER": "local", "DATABASE_URL": "sqlite:" + str(state / "controld.db"),
            "METRICS_LISTEN": "off", "LOG_LEVEL": "warn", "CREATE_RATE_PER_HOUR": "0",
            "ISSUANCE_RATE_PER_DAY": "0", "ISSUANCE_BACKLOG_LIMIT": "0",
            "STATE_DIR": str(state),  # its machine-id lives with the seeded tunnels, not in the cwd
        }
        self.log = open(state / "controld.log", "ab")
        self.process = subprocess.Popen([str(build / "controld/controld")], env=self.env,
                                        stdout=self.log, stderr=subprocess.STDOUT,
                                        preexec_fn=raise_nofile)
        wait_until(self.healthy, 60, "controld /health")

    def healthy(self):
        if self.process.poll() is not None:
            raise SystemExit("controld exited; see " + str(self.state / "controld.log"))
        try:
            return self.request("GET", "/health")[0] == 200
        except OSError:
            return False

    def request(self, method, path, body=None, token=None):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            text = response.read()
            return response.status, (json.loads(text) if text else None)
        finally:
            connection.close()


def seed_tunnels(controld, state, count):
    """`count` tunnels with ready certificates, kept in state/tunnels.txt across runs."""
    path = state / "tunnels.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    if len(lines) >= count:
        return path
    key = state / "tunnel-key.pem"
    if not key.exists():
        subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out",
                        str(key)], check=True, capture_output=True)

    def one(_):
        status, tunnel = controld.request("POST", "/api/tunnel")
        assert status == 201, (status, tunnel)
        host = tunnel["hostname"]
        csr = subprocess.run(["openssl", "req", "-new", "-key", str(key), "-subj", f"/CN={host}",
                              "-addext", f"subjectAltName=DNS:{host},DNS:*.{host}"],
                             check=True, capture_output=True, text=True).stdout
        status, _ = controld.request("PUT", f"/api/tunnel/{tunnel['id']}/certificate",
                                     body={"csr": csr}, token=tunnel["token"])
        assert status in (200, 202), status
        for _ in range(600):
            status, answer = controld.request("GET", f"/api/tunnel/{tunnel['id']}/certificate",
                                              token=tunnel["token"])
            if status == 200 and answer["state"] == "ready":
                return f"{tunnel['id']} {tunnel['token']}"
            time.sleep(0.1)
        raise SystemExit(f"certificate of {tunnel['id']} never became ready")

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        lines += list(pool.map(one, range(count - len(lines))))
    path.write_text("\n".join(lines) + "\n")
    print(f"seeded {count} tunnels in {time.monotonic() - started:.0f} s", flush=True)
    return path


class Relayd:
    def __init__(self, build, state, controld, core, tls_port, metrics_port, nice, binary=None):
        """`binary`: another relayd than the build's (a baseline), else build/relayd/relayd."""
        relayd = Path(binary).resolve() if binary else build / "relayd/relayd"
        self.cmd = ["taskset", "-c", str(core), *nice_prefix(nice), str(relayd)]
        self.env = {
            "PATH": "/usr/bin:/bin", "OPENTUNNEL_DOMAIN": DOMAIN,
            "TLS_LISTEN": f"127.0.0.1:{tls_port}", "HTTP_LISTEN": "127.0.0.1:0",
            "METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
            "CONTROL_SOCKET": controld.env["CONTROL_SOCKET"],
            "API_SOCKET": controld.env["API_SOCKET"], "MACHINE_ID": "relayd-load",
            "LOG_LEVEL": "warn",
            # Its TLS ticket keys live here, so the storm's new relayd resumes the old one's
            # sessions, as a restarted relayd in production does.
            "STATE_DIR": str(state),
        }
        self.state = state
        self.ca_file = controld.ca_file
        self.tls_port = tls_port
        self.pid_file = state / "relayd.pid"
        self.process = None
        self.restarts = 0

    def start(self):
        log = open(self.state / "relayd.log", "ab")
        self.process = subprocess.Popen(self.cmd, env=self.env, stdout=log,
                                        stderr=subprocess.STDOUT, preexec_fn=raise_nofile)
        self.pid_file.write_text(f"{self.process.pid}\n")
        return self

    def wait_serving(self, timeout=60):
        context = ssl.create_default_context(cafile=self.ca_file)

        def serving():
            if self.process.poll() is not None:
                raise SystemExit("relayd exited; see " + str(self.state / "relayd.log"))
            try:
                with socket.create_connection(("127.0.0.1", self.tls_port), timeout=2) as raw:
                    with context.wrap_socket(raw, server_hostname=DOMAIN):
                        return True
            except (OSError, ssl.SSLError):
                return False
        wait_until(serving, timeout, "relayd to serve TLS")

    def restart_on_exit(self, stop):
        """Starts a new relayd as soon as the current one exits (the storm's restart)."""
        while not stop.is_set():
            if self.process.poll() is not None:
                started = time.monotonic()
                self.start()
                self.restarts += 1
                print(f"[run_capacity] relayd exited; new relayd pid {self.process.pid} "
                      f"started", flush=True)
                try:
                    self.wait_serving()
                    print(f"[run_capacity] new relayd serving after "
                          f"{time.monotonic() - started:.1f} s", flush=True)
                except SystemExit as e:
                    print(f"[run_capacity] {e}", flush=True)
            time.sleep(0.02)

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def bare_handshakes(state, tool, core, count, nice):
    key, cert = state / "bare-key.pem", state / "bare-cert.pem"
    if not cert.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "30", "-subj", "/CN=bare.test", "-addext",
                        "subjectAltName=DNS:bare.test"], check=True, capture_output=True)
    port = free_port()
    server = subprocess.Popen(["taskset", "-c", str(core), *nice_prefix(nice), "openssl",
                               "s_server", "-quiet", "-www", "-tls1_3", "-accept",
                               f"127.0.0.1:{port}", "-cert", str(cert), "-key", str(key)],
                              stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def listening():
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                return True
            except OSError:
                return False
        wait_until(listening, 10, "s_server")
        for mode in ([], ["--bare-resume"]):
            subprocess.run([*nice_prefix(nice), str(tool), "--ca-file", str(cert),
                            "--domain", "bare.test",
                            "--bare-handshakes", str(count), "--bare-target", f"127.0.0.1:{port}",
                            "--bare-pid", str(server.pid), *mode], check=False)
    finally:
        server.terminate()
        server.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("OT_BUILD_DIR", "build"))
    parser.add_argument("--state", default="/tmp/ot-capacity")
    parser.add_argument("--fresh", action="store_true", help="drop the state (seeded tunnels)")
    parser.add_argument("--bridges", type=int, default=19000)
    parser.add_argument("--rate", type=float, default=400)
    parser.add_argument("--sources", type=int, default=64)
    parser.add_argument("--hold", type=float, default=60)
    parser.add_argument("--mark-at", type=int, default=10000)
    parser.add_argument("--hold-low", type=float, default=0,
                        help="pause the ramp this long at --mark-at (an idle figure there: the "
                             "idle CPU's slope, as the memory's)")
    parser.add_argument("--visitors", type=int, default=0,
                        help="after the hold, this many visitors through the bridges")
    parser.add_argument("--storm", choices=["signal", "none"], default="signal")
    parser.add_argument("--relayd-core", default="0",
                        help="taskset CPU list for relayd (e.g. 0, or 0,1 to let its handshake "
                        "workers use the other core)")
    parser.add_argument("--tool-cores", default="1")
    parser.add_argument("--nice", type=int, default=0,
                        help="run relayd, the tool and s_server under nice -n N (e.g. -10)")
    parser.add_argument("--bare", type=int, default=0,
                        help="first: this many bare TLS handshakes on relayd's core, full and "
                             "then resumed")
    parser.add_argument("--no-status-reports", action="store_true",
                        help="the tool's bridges send no `status` reports (otunnel's do)")
    parser.add_argument("--relayd-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for relayd (repeatable), e.g. IO_URING=false")
    parser.add_argument("--relayd", help="this relayd binary instead of the build's (a "
                        "baseline run beside the build's tool and controld)")
    args = parser.parse_args()
    for setting in args.relayd_env:
        if "=" not in setting:
            parser.error(f"--relayd-env wants NAME=VALUE, not {setting!r}")

    build = Path(args.build_dir).resolve()
    state = Path(args.state)
    if args.fresh and state.exists():
        shutil.rmtree(state)
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)
    tool = build / "tests/load/ot_bridge_load"
    print(f"box: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"load average {os.getloadavg()}", flush=True)
    if args.bare:
        bare_handshakes(state, tool, args.relayd_core, args.bare, args.nice)

    controld = Controld(build, state)
    relayd = None
    stop = threading.Event()
    try:
        tunnels = seed_tunnels(controld, state,
                               -(-args.bridges // MAX_BRIDGES_PER_TUNNEL))
        relayd = Relayd(build, state, controld, args.relayd_core, free_port(), free_port(),
                        args.nice, args.relayd)
        relayd.env.update(setting.split("=", 1) for setting in args.relayd_env)
        relayd.start().wait_serving()
        watcher = threading.Thread(target=relayd.restart_on_exit, args=(stop,), daemon=True)
        watcher.start()
        command = ["taskset", "-c", args.tool_cores, *nice_prefix(args.nice), str(tool),
                   "--ca-file", controld.ca_file,
                   "--domain", DOMAIN, "--relay", f"127.0.0.1:{relayd.tls_port}",
                   "--tunnels", str(tunnels), "--bridges", str(args.bridges),
                   "--rate", str(args.rate), "--sources", str(args.sources),
                   "--hold", str(args.hold), "--mark-at", str(args.mark_at),
                   "--hold-low", str(args.hold_low),
                   "--storm", args.storm, "--visitors", str(args.visitors), "--relayd-pid-file", str(relayd.pid_file),
                   "--controld-pid", str(controld.process.pid),
                   "--metrics", relayd.env["METRICS_LISTEN"],
                   *(["--no-status-reports"] if args.no_status_reports else [])]
        print("+ " + " ".join(command), flush=True)
        code = subprocess.run(command, preexec_fn=raise_nofile).returncode
    finally:
        stop.set()
        if relayd:
            relayd.stop()
        controld.process.send_signal(signal.SIGTERM)
        controld.process.wait(30)
    sys.exit(code)


if __name__ == "__main__":
    main()
