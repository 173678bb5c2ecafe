"""Issue 16, usage per origin (docs/pools-usage.md), against real controld and relayd processes:
three named origins attach raw bridges with the tunnel token; visitors from 127.0.22.N send a
known number of bytes and each origin answers a known number, so the bytes every origin carried
are known exactly. The usage read back through GET /api/tunnel/{id}/usage (24h and 30d) and
`otctl usage` equals them per origin and in total; a tunnel served by an unnamed client counts in
its total only."""
import concurrent.futures
import json
import socket
import ssl
import struct
import subprocess
import threading

import bridge_client as bc
import harness

ORIGINS = ("alpha", "bravo", "charlie")
# Each origin answers with its name and then this many bytes more, so their shares differ.
ANSWER_PAD = {"alpha": 3000, "bravo": 7001, "charlie": 12345, "": 999}
VISITORS = 60
OTCTL = harness.BUILD_DIR / "otctl" / "otctl"


def source_address(i):
    """This file's visitor addresses: 127.0.22.1-60."""
    return f"127.0.22.{1 + i}"


def client_hello(hostname):
    """The first flight of a TLS client for `hostname`: all the relay needs to route."""
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=hostname)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


class OriginBridges:
    """One origin's links (name "" for an unnamed client). Each stream: the visitor's hello, then
    a 4-byte length and that many bytes; once all of it is in, the answer (the origin's name and
    ANSWER_PAD zeros), then the end."""

    def __init__(self, relay, tunnel, name, hello_len, links=2):
        self.name = name
        self.hello_len = hello_len
        self.clients = []
        self.threads = []
        for link in range(links):
            members = {"origin": name, "profile": "p0", "profile_index": 0} if name else {}
            client, answer = bc.attached_bridge(relay, tunnel, **members)
            assert answer.get("protocol") == 2, answer
            self.clients.append(client)
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def answer(self):
        return self.name.encode() + b"\0" * ANSWER_PAD[self.name]

    def _serve(self, client):
        received = {}
        try:
            while True:
                op, payload = client.recv_message(timeout=3600)
                if op == bc.OP_CLOSE:
                    return
                if op != bc.OP_BINARY:
                    continue
                kind, conn_id, body = bc.parse_stream_frame(payload)
                if kind == bc.KIND_OPEN:
                    received[conn_id] = b""
                elif kind == bc.KIND_DATA and conn_id in received:
                    received[conn_id] += body
                    data = received[conn_id]
                    header = self.hello_len + 4
                    if len(data) < header:
                        continue
                    (length,) = struct.unpack(">I", data[self.hello_len:header])
                    if len(data) < header + length:
                        continue
                    del received[conn_id]
                    client.send_raw(
                        bc.encode_frame(bc.OP_BINARY, bc.data_frame(conn_id, self.answer()))
                        + bc.encode_frame(bc.OP_BINARY, bc.stream_frame(bc.KIND_END, conn_id)))
        except (bc.Closed, OSError, TimeoutError, ValueError):
            return

    def close(self):
        for client in self.clients:
            try:
                client.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            client.close()
        for thread in self.threads:
            thread.join(10)


def visit(port, source, hello, size):
    """One visitor: sends the hello and `size` bytes (length-prefixed), reads the answer to the
    end. Returns (origin name, bytes sent, bytes received)."""
    body = struct.pack(">I", size) + bytes((i * 7) & 0xFF for i in range(size))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(15)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        sock.sendall(hello + body)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    name = data.split(b"\0", 1)[0].decode()
    assert len(data) == len(name) + ANSWER_PAD[name], (name, len(data))
    return name, len(hello) + len(body), len(data)


def usage(relay, tunnel, query=""):
    got = relay.api("GET", f"/api/tunnel/{tunnel['id']}/usage{query}", token=tunnel["token"])
    assert got.status == 200, got
    return got.json()


def otctl_usage(stack, tunnel_id, *args):
    sock = stack.controld.control_socket.replace("control.sock", "admin.sock")
    done = subprocess.run([str(OTCTL), "--socket", sock, "usage", tunnel_id, *args],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_usage_per_origin_equals_the_bytes_each_origin_carried(stack, tmp_path):
    # relayd reports every 10 s; controld writes what it got every 0.5 s.
    s = stack(controld_env={"USAGE_FLUSH_INTERVAL_MS": "500"})
    relay = s.relayd
    tunnel = bc.create_ready_tunnel(relay, tmp_path)
    hello = client_hello(tunnel["hostname"])
    pools = {name: OriginBridges(relay, tunnel, name, len(hello)) for name in ORIGINS}
    plain_tunnel = bc.create_ready_tunnel(relay, tmp_path)
    plain_hello = client_hello(plain_tunnel["hostname"])
    plain = OriginBridges(relay, plain_tunnel, "", len(plain_hello))
    try:
        expected = {name: [0, 0, 0] for name in ORIGINS}  # bytes in, bytes out, connections
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            visits = list(pool.map(
                lambda i: visit(relay.tls_port, source_address(i), hello, 500 + 97 * i),
                range(VISITORS)))
        for name, sent, received in visits:
            expected[name][0] += sent
            expected[name][1] += received
            expected[name][2] += 1
        print(f"\nvisitors per origin: { {n: e[2] for n, e in expected.items()} }")
        for name in ORIGINS:  # 60 addresses hashed over 3 origins: each gets some
            assert expected[name][2] > 0, expected
        total = [sum(e[i] for e in expected.values()) for i in range(3)]
        _, plain_sent, plain_received = visit(relay.tls_port, source_address(0), plain_hello, 4321)

        def arrived():
            body = usage(relay, tunnel)
            t = body["total"]
            return body if [t["bytesIn"], t["bytesOut"], t["connections"]] == total else None
        body = harness.wait_until(arrived, 60, "the usage of every visitor to be stored")

        def shares(series_list):
            return {o["origin"]: [o["total"]["bytesIn"], o["total"]["bytesOut"],
                                  o["total"]["connections"]] for o in series_list}
        # Per origin, exactly the bytes each carried; counted once: the shares add up to the total.
        assert shares(body["origins"]) == expected
        assert [o["origin"] for o in body["origins"]] == sorted(ORIGINS)
        for series in body["origins"]:
            assert len(series["buckets"]) == 24
            assert series["buckets"][-1]["start"] == body["buckets"][-1]["start"]
        month = usage(relay, tunnel, "?range=30d")
        assert month["period"] == "30d"
        assert shares(month["origins"]) == expected
        assert [month["total"][k] for k in ("bytesIn", "bytesOut", "connections")] == total

        # The unnamed client's tunnel: its total only.
        def plain_arrived():
            b = usage(relay, plain_tunnel)
            return b if b["total"]["connections"] == 1 else None
        plain_body = harness.wait_until(plain_arrived, 60, "the unnamed client's usage")
        assert plain_body["total"] == {"bytesIn": plain_sent, "bytesOut": plain_received,
                                       "connections": 1}
        assert plain_body["origins"] == []

        # otctl reads the same through the admin socket.
        human = otctl_usage(s, tunnel["id"])
        print(human)
        lines = {line.split()[0]: line.split()[1:] for line in human.splitlines()[2:]}
        assert lines["(total)"] == [str(v) for v in total]
        for name in ORIGINS:
            assert lines[name] == [str(v) for v in expected[name]]
        assert "(unnamed)" not in lines
        parsed = json.loads(otctl_usage(s, tunnel["id"], "--range", "30d", "--json"))
        assert parsed["range"] == "30d"
        assert len(parsed["total"]["buckets"]) == 30
        assert {o["origin"]: [int(o["bytes_in"]), int(o["bytes_out"]), int(o["connections"])]
                for o in parsed["origins"]} == expected
        plain_lines = otctl_usage(s, plain_tunnel["id"]).splitlines()[2:]
        assert [line.split()[0] for line in plain_lines] == ["(total)", "(unnamed)"]
    finally:
        for bridges in pools.values():
            bridges.close()
        plain.close()
