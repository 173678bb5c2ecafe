"""Machines of one region mesh with a fault proxy on every mesh link (tests/tools/fault_proxy.py),
for test_mesh_faults.py and test_mesh_routes.py.

Each machine is a controld + relayd pair on its own loopback address. Its relayd listens on
INTERNAL_LISTEN; a fault proxy on the same IP, another port, is the machine's INTERNAL_ADDRESS:
what its hello announces, what the peers' MESH_PEERS name, where the peers dial their links, ask
the liveness question, send route checks and forward visitors (docs/mesh.md "Who listens, who
links, who forwards"). Every byte between two machines therefore crosses the receiver's proxy,
which connects upstream from the sender's own IP (keep_source) so the address checks stay real
(MESH_VERIFY_ADDRESS, a forward's sender linked at the connection's source). Cutting or stalling
the connections from one peer's IP at a proxy cuts or stalls that pair in one direction.

All machines share one MariaDB database (tunnels made on one are known on all) and the timers of
the brief: MESH_PING_MS=100, MESH_DEAD_MS=500.
"""
import contextlib
import datetime
import json
import socket
import ssl
import sys
import threading
from pathlib import Path

import harness
import bridge_client as bc
import relay_harness as rh

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from fault_proxy import FaultProxy  # noqa: E402
from test_mesh_link import ControldMetrics  # noqa: E402

TOKEN = "a-mesh-secret-of-at-least-32-bytes-for-tests"
ADMIN = "an-operator-token-for-the-cluster-view"
PING_MS = 100
DEAD_MS = 500
FAST = {"MESH_PING_MS": str(PING_MS), "MESH_DEAD_MS": str(DEAD_MS), "MESH_HOLD_MS": "60000"}


class Machine(ControldMetrics):
    """controld + relayd on `address`; `proxy` is the fault proxy in front of its internal
    listener (its INTERNAL_ADDRESS)."""

    def __init__(self, workdir, name, address, listen_port, proxy, peers, database):
        self.name = name
        self.address = address
        self.proxy = proxy
        self.internal_address = f"{address}:{proxy.port}"
        self.metrics_port = harness.free_port()
        common = {"INTERNAL_LISTEN": f"{address}:{listen_port}",
                  "INTERNAL_ADDRESS": self.internal_address,
                  "INTERNAL_TOKEN": TOKEN, "MACHINE_ID": name}
        self.stack = rh.Stack(
            workdir / name,
            controld_env={**common, **FAST, "MESH_PEERS": ",".join(peers),
                          "DATABASE_URL": database, "ADMIN_TOKEN": ADMIN,
                          "METRICS_LISTEN": f"127.0.0.1:{self.metrics_port}"},
            relayd_env={**common, "SHUTDOWN_DRAIN_MS": "200"})

    # -- what the machine says ---------------------------------------------------------------


    def cluster(self):
        """The cluster view of POST /api/admin/stats (docs/mesh.md "The cluster view")."""
        response = self.stack.relayd.api("POST", "/api/admin/stats", token=ADMIN)
        assert response.status == 200, response
        return json.loads(response.body)["cluster"]

    def log_times(self, message, **fields):
        """Wall-clock times (Unix seconds) of controld's log lines with this message and fields."""
        times = []
        for line in self.stack.controld.log_lines():
            if line.get("message") != message:
                continue
            if any(line.get(key) != value for key, value in fields.items()):
                continue
            stamp = line["timestamp"].replace("Z", "+00:00")
            times.append(datetime.datetime.fromisoformat(stamp).timestamp())
        return times

    # -- faults between this machine and another ------------------------------------------

    def cut_from(self, other, mode):
        """Everything `other` sends to this machine (links it dialed, questions, route checks,
        forwarded visitors) gets `mode` at this machine's proxy, now and for new connections."""
        self.proxy.set_mode(mode, source=other.address)


def visit(machine, hostname, ca_file, max_time="15"):
    """curl https://<hostname>/hello at the machine's public port, verified against the CA."""
    url = f"https://{hostname}:{machine.stack.relayd.tls_port}/hello"
    return rh.curl_url(url, ca_file, "--http1.1", "--max-time", max_time, timeout=30)


def cut(a, b, mode):
    """Both directions between a and b."""
    a.cut_from(b, mode)
    b.cut_from(a, mode)


def total(metrics, name):
    return sum(v for (metric, _), v in metrics.values.items() if metric == name)


def rows(cluster):
    """A cluster view's machines as this node sees them, by machine ID, without "self"."""
    return {row["machine"]: {key: value for key, value in row.items() if key != "self"}
            for row in cluster["machines"]}


def wait_views_equal(machines, bridges, timeout=30.0):
    """Until every machine's cluster view is complete and names the same machines with the same
    lives, sequences and counts, and each machine's bridge count is `bridges[name]` (what it
    really holds). Returns the agreed rows."""
    def equal():
        views = [rows(machine.cluster()) for machine in machines]
        if any(view != views[0] for view in views[1:]):
            return None
        if {name: row["bridges"] for name, row in views[0].items()} != bridges:
            return None
        return views[0]
    agreed = harness.wait_until(equal, timeout, "every machine's cluster view to agree")
    for machine in machines:
        cluster = machine.cluster()
        assert cluster["complete"] and cluster["peers_up"] == len(machines) - 1, cluster
        assert rows(cluster) == agreed
    return agreed


@contextlib.contextmanager
def cluster(workdir, database, names_and_addresses):
    """Machines (name -> loopback address), each peering with all the others through their
    proxies; yields them linked (every peer up), closes everything on exit."""
    proxies, machines = {}, []
    try:
        listen_ports = {}
        for name, address in names_and_addresses.items():
            listen_ports[name] = harness.free_port(address)
            proxies[name] = FaultProxy(listen_ports[name], upstream_host=address,
                                       listen_host=address, keep_source=True).start()
        for name, address in names_and_addresses.items():
            peers = [f"{names_and_addresses[other]}:{proxies[other].port}"
                     for other in names_and_addresses if other != name]
            machines.append(Machine(workdir, name, address, listen_ports[name], proxies[name],
                                    peers, database))
        for machine in machines:
            machine.wait_controld(
                lambda m: m.get("opentunnel_mesh_peers", state="up") == len(machines) - 1,
                "every peer linked")
        for machine in machines:
            machine.stack.relayd.wait_log("mesh table snapshot applied")
        yield machines
    finally:
        for machine in machines:
            machine.stack.close()
        for proxy in proxies.values():
            proxy.close()


class ServingBridge:
    """A raw bridge (bridge_client.BridgeClient) claiming `routes` of a tunnel, that serves its
    visitors itself as otunnel's http mode does: it terminates each visitor's TLS with the
    tunnel's certificate and answers any request with `hello from <name>`. otunnel always claims
    the bare route, so bridges that hold only named routes are made this way."""

    def __init__(self, machine, tunnel, routes, name):
        self.name = name
        self.client = bc.BridgeClient(machine.stack.relayd.tls_port, machine.stack.ca_file)
        assert self.client.upgrade(tunnel["id"]) == 101, self.client.body
        self.answer = self.client.attach(tunnel["token"], routes)
        self.served = []  # the route of every visitor answered
        self.thread = None
        if self.answer["type"] != "attached":
            return
        chain = Path(tunnel["key_path"]).with_suffix(".chain.pem")
        chain.write_text(tunnel["chain"])
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(chain), tunnel["key_path"])
        self.streams = {}
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def attached(self):
        return self.answer["type"] == "attached"

    def _serve(self):
        try:
            self._serve_until_closed()
        except OSError:
            if not self.stopping:
                raise
            # close() shut the socket under a write in flight: the bridge is going anyway.

    def _serve_until_closed(self):
        while not self.stopping:
            try:
                op, payload = self.client.recv_message(timeout=1.0)
            except TimeoutError:
                continue
            except (bc.Closed, OSError, AssertionError):
                return
            if op == bc.OP_CLOSE:
                return
            if op != bc.OP_BINARY:
                continue
            kind, conn_id, body = bc.parse_stream_frame(payload)
            if kind == bc.KIND_OPEN:
                route, _ = bc.parse_open(body)
                incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
                tls = self.context.wrap_bio(incoming, outgoing, server_side=True)
                self.streams[conn_id] = {"route": route, "tls": tls, "in": incoming,
                                         "out": outgoing, "request": b"", "done": False}
            elif kind == bc.KIND_DATA and conn_id in self.streams:
                self._visitor_bytes(conn_id, body)
            elif kind in (bc.KIND_END, bc.KIND_RESET):
                stream = self.streams.pop(conn_id, None)
                if kind == bc.KIND_END and stream and not stream["done"]:
                    self.client.send_binary(bc.stream_frame(bc.KIND_END, conn_id))

    def _visitor_bytes(self, conn_id, data):
        stream = self.streams[conn_id]
        if stream["done"]:
            return  # the visitor's close_notify after our answer and our end: nothing to send
        tls = stream["tls"]
        stream["in"].write(data)
        try:
            tls.do_handshake()
            while b"\r\n\r\n" not in stream["request"]:
                chunk = tls.read(65536)
                if not chunk:
                    break
                stream["request"] += chunk
        except ssl.SSLWantReadError:
            pass
        answered = b"\r\n\r\n" in stream["request"]
        if answered:
            body = f"hello from {self.name}\n".encode()
            tls.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            try:
                tls.unwrap()  # close_notify; the visitor's own is not waited for
            except (ssl.SSLWantReadError, ssl.SSLError):
                pass
            stream["done"] = True
            self.served.append(stream["route"])
        pending = stream["out"].read()
        for offset in range(0, len(pending), 16384):
            self.client.send_binary(bc.data_frame(conn_id, pending[offset:offset + 16384]))
        if answered:  # once: a second end on one connection is a protocol error
            self.client.send_binary(bc.stream_frame(bc.KIND_END, conn_id))

    def close(self):
        """Detaches: the relay sees the bridge's connection end."""
        self.stopping = True
        try:
            self.client.sock.shutdown(socket.SHUT_RDWR)  # wakes the serving thread's read
        except OSError:
            pass
        self.client.close()
        if self.thread is not None:
            self.thread.join(timeout=10)
