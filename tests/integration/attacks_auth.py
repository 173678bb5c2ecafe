"""Attacks on authentication and per-source limits, as one client with a laptop would run them
(loopback only, bounded in count and time): creates through relayd from many source ports,
wrong-token attaches, wrong bearer tokens on the API, and many bridges on one tunnel.

test_hardening_auth.py calls these functions. Run as a program it starts controld and relayd,
runs every attack and prints relayd's RSS before, during (peak) and after, and the counters:

    OT_BUILD_DIR=$PWD/build /usr/bin/python3 tests/integration/attacks_auth.py
"""
import socket
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bridge_client as bc  # noqa: E402
import harness  # noqa: E402
import relay_harness as rh  # noqa: E402
import resilience_harness as res  # noqa: E402

# 127.0.0.0/8 is all loopback: a second source address without any setup.
ATTACKER = "127.0.0.1"
BYSTANDER = "127.0.0.2"


# ---------------------------------------------------------------------------------------------
# Connections from a chosen source address

def tls_from(source, port, ca_file, timeout=15):
    """A verified TLS connection to relayd's API domain from `source` (a fresh source port)."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.settimeout(timeout)
    try:
        raw.bind((source, 0))
        raw.connect(("127.0.0.1", port))
        return rh.client_context(ca_file).wrap_socket(raw, server_hostname=rh.DOMAIN)
    except BaseException:
        raw.close()
        raise


class SourcedBridgeClient(bc.BridgeClient):
    """bridge_client.BridgeClient from a chosen source address."""

    def __init__(self, port, ca_file, source, timeout=15):  # noqa: super().__init__ connects
        self.port = port
        self.ca_file = ca_file
        self.timeout = timeout
        self.sock = tls_from(source, port, ca_file, timeout)
        self.buffer = b""
        self.status = None
        self.headers = {}
        self.body = b""


def api_request(relayd, method, path, source=ATTACKER, token=None, body=None):
    """One HTTP API request on its own TLS connection (so its own source port) through relayd."""
    import json
    sock = tls_from(source, relayd.tls_port, relayd.ca_file)
    try:
        data = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nHost: {rh.DOMAIN}\r\nConnection: close\r\n"
        if token is not None:
            head += f"Authorization: Bearer {token}\r\n"
        if body is not None:
            head += "Content-Type: application/json\r\n"
        head += f"Content-Length: {len(data)}\r\n\r\n"
        sock.sendall(head.encode() + data)
        status, headers, payload = rh.read_http_response(sock.makefile("rb"))
        return harness.Response(status, headers, payload)
    finally:
        sock.close()


def attach_from(relayd, tunnel_id, token, source=ATTACKER):
    """Upgrade and attach from `source`; returns (answer, client). The answer is the relay's
    first JSON message, or {"upgrade": status} when the upgrade was refused."""
    client = SourcedBridgeClient(relayd.tls_port, relayd.ca_file, source)
    status = client.upgrade(tunnel_id)
    if status != 101:
        client.close()
        return {"upgrade": status}, None
    return client.attach(token), client


# ---------------------------------------------------------------------------------------------
# The attacks

def create_from_many_ports(relayd, count, source=ATTACKER):
    """POST /api/tunnel `count` times, each on a new connection: statuses in order."""
    return [api_request(relayd, "POST", "/api/tunnel", source=source).status for _ in range(count)]


def rate_limit_keys(controld):
    """The keys of the rate_limits table in controld's SQLite database."""
    path = controld.env["DATABASE_URL"][len("sqlite:"):]
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return sorted(row[0] for row in connection.execute("SELECT k FROM rate_limits"))
    finally:
        connection.close()


def wrong_token_attaches(relayd, tunnel_id, count, source=ATTACKER, seconds=30.0):
    """Attaches with wrong tokens; the codes of the attach_errors, in order."""
    codes = []
    deadline = time.monotonic() + seconds
    for i in range(count):
        if time.monotonic() > deadline:
            break
        answer, client = attach_from(relayd, tunnel_id, f"tk_wrong{i:06d}", source)
        if client is not None:
            client.close()
        codes.append(answer.get("code", answer.get("type", str(answer))))
    return codes


def wrong_token_api_calls(relayd, tunnel_id, count, source=ATTACKER, seconds=30.0):
    """GET /api/tunnel/<id> with wrong bearer tokens; the statuses in order."""
    statuses = []
    deadline = time.monotonic() + seconds
    for i in range(count):
        if time.monotonic() > deadline:
            break
        statuses.append(api_request(relayd, "GET", f"/api/tunnel/{tunnel_id}", source=source,
                                    token=f"tk_wrong{i:06d}").status)
    return statuses


def many_bridges(relayd, tunnel, count, source=ATTACKER):
    """Attaches with the right token, all held open: (answers, clients to close)."""
    answers, clients = [], []
    for _ in range(count):
        answer, client = attach_from(relayd, tunnel["id"], tunnel["token"], source)
        answers.append(answer)
        if client is not None:
            clients.append(client)
    return answers, clients


def close_all(clients):
    for client in clients:
        client.close()


def metric_or_absent(metrics, name, **labels):
    """A sample's value, or "absent" (a build without that counter)."""
    try:
        return metrics.get(name, **labels)
    except KeyError:
        return "absent"


def controld_metrics(port):
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        return rh.Metrics(rh.parse_metrics(connection.getresponse().read().decode()))
    finally:
        connection.close()


# ---------------------------------------------------------------------------------------------
# The CLI: every attack against real processes, with relayd's memory and the counters


def main():
    workdir = Path(tempfile.mkdtemp(prefix="ot-attacks-auth-"))
    metrics_port = harness.free_port()
    stack = rh.Stack(workdir, relayd_env={"SHUTDOWN_DRAIN_MS": "200"},
                     controld_env={"CREATE_RATE_BURST": "10", "CREATE_RATE_PER_HOUR": "30",
                                   "METRICS_LISTEN": f"127.0.0.1:{metrics_port}"})
    try:
        relayd = stack.relayd
        pid = relayd.process.pid
        tunnel = bc.create_ready_tunnel(relayd, workdir)
        before = res.rss_kb(pid)
        print(f"relayd VmRSS before: {before} kB")
        with res.RssPeak(pid) as peak:
            started = time.monotonic()
            creates = create_from_many_ports(relayd, 40)
            print(f"creates from 40 source ports of one address: {creates.count(201)} x 201, "
                  f"{creates.count(429)} x 429; rate_limits rows: "
                  f"{len([k for k in rate_limit_keys(stack.controld) if k.startswith('create:')])}"
                  f" ({time.monotonic() - started:.1f} s)")
            started = time.monotonic()
            codes = wrong_token_attaches(relayd, tunnel["id"], 1000, seconds=60)
            print(f"wrong-token attaches: {len(codes)} in {time.monotonic() - started:.1f} s: "
                  f"{codes.count('bad_token')} bad_token, "
                  f"{codes.count('too_many_failures')} too_many_failures")
            started = time.monotonic()
            statuses = wrong_token_api_calls(relayd, tunnel["id"], 1000, seconds=60)
            print(f"wrong-token API calls: {len(statuses)} in {time.monotonic() - started:.1f} s: "
                  f"{statuses.count(401)} x 401, {statuses.count(429)} x 429")
            bystander = api_request(relayd, "GET", f"/api/tunnel/{tunnel['id']}",
                                    source=BYSTANDER, token=tunnel["token"]).status
            answer, client = attach_from(relayd, tunnel["id"], tunnel["token"], BYSTANDER)
            print(f"right token from another address: API {bystander}, attach {answer.get('type')}")
            if client is not None:
                client.close()
            answers, clients = many_bridges(relayd, tunnel, 200, source=BYSTANDER)
            attached = sum(1 for a in answers if a.get("type") == "attached")
            refused = sum(1 for a in answers if a.get("code") == "too_many_bridges")
            print(f"200 bridges on one tunnel: {attached} attached, {refused} too_many_bridges")
            close_all(clients)
        metrics = relayd.metrics()
        cmetrics = controld_metrics(metrics_port)
        harness.wait_until(lambda: relayd.metrics().get("opentunnel_bridges_attached") == 0, 30,
                           "the bridges to detach")
        after = res.rss_kb(pid)
        print(f"relayd VmRSS during (peak): {peak.peak} kB")
        print(f"relayd VmRSS after: {after} kB")
        for result in ("bad_token", "too_many_failures", "too_many_bridges", "ok"):
            print(f"relayd opentunnel_bridge_attaches_total{{result=\"{result}\"}} "
                  f"{metric_or_absent(metrics, 'opentunnel_bridge_attaches_total', result=result)}")
        print("controld opentunnel_auth_failures_total{kind=\"api\"} "
              f"{metric_or_absent(cmetrics, 'opentunnel_auth_failures_total', kind='api')}")
        print("controld opentunnel_requests_limited_total{limit=\"auth_failures\"} "
              f"{metric_or_absent(cmetrics, 'opentunnel_requests_limited_total', limit='auth_failures')}")
        print("controld opentunnel_requests_limited_total{limit=\"create_rate\"} "
              f"{metric_or_absent(cmetrics, 'opentunnel_requests_limited_total', limit='create_rate')}")
        lines = [line for line in relayd.log_text().splitlines() if "relayd.attach" in line]
        print(f"relayd attach-failure log lines: {len(lines)}")
        clines = [line for line in stack.controld.log_path.read_text().splitlines()
                  if "authentication" in line or "refusing credentials" in line]
        print(f"controld authentication log lines: {len(clines)}")
    finally:
        stack.close()


if __name__ == "__main__":
    main()
