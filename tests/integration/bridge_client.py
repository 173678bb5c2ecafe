"""A raw bridge client written from docs/protocol.md alone: TLS to the API domain, the RFC 6455
upgrade, masked frames, the attach JSON, stream frames. Tests use it to break the rules on
purpose and check what relayd answers."""
import base64
import json
import os
import socket
import ssl
import struct
import time

import harness
import relay_harness as rh

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
KIND_OPEN, KIND_DATA, KIND_END, KIND_RESET, KIND_CREDIT = 1, 2, 3, 4, 5


class Closed(Exception):
    """The TCP/TLS connection ended without a close frame."""


def encode_frame(opcode, payload, fin=True, mask=True):
    header = bytearray([(0x80 if fin else 0) | opcode])
    length = len(payload)
    mask_bit = 0x80 if mask else 0
    if length < 126:
        header.append(mask_bit | length)
    elif length < 65536:
        header.append(mask_bit | 126)
        header += struct.pack(">H", length)
    else:
        header.append(mask_bit | 127)
        header += struct.pack(">Q", length)
    if not mask:
        return bytes(header) + payload
    key = os.urandom(4)
    header += key
    # XOR with the repeated key, fast: via int arithmetic on the whole buffer.
    repeated = (key * (length // 4 + 1))[:length]
    masked = (int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")).to_bytes(
        length, "little") if length else b""
    return bytes(header) + masked


def stream_frame(kind, conn_id, payload=b""):
    return struct.pack(">BI", kind, conn_id) + payload


def data_frame(conn_id, data):
    return stream_frame(KIND_DATA, conn_id, data)


def credit_frame(conn_id, increment):
    return stream_frame(KIND_CREDIT, conn_id, struct.pack(">I", increment))


def parse_stream_frame(payload):
    kind, conn_id = struct.unpack(">BI", payload[:5])
    return kind, conn_id, payload[5:]


def parse_open(body):
    route_len = body[0]
    route = body[1:1 + route_len].decode()
    addr_len = body[1 + route_len]
    address = body[2 + route_len:2 + route_len + addr_len].decode()
    return route, address


class BridgeClient:
    def __init__(self, port, ca_file, timeout=15, proxy_header=None):
        self.port = port
        self.ca_file = ca_file
        self.timeout = timeout
        if proxy_header is None:
            self.sock = rh.tls_connect(port, rh.DOMAIN, ca_file, timeout=timeout)
        else:  # a PROXY_PROTOCOL=true relay wants the header before the ClientHello
            raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            raw.sendall(proxy_header)
            self.sock = rh.client_context(ca_file).wrap_socket(raw, server_hostname=rh.DOMAIN)
        self.buffer = b""
        self.status = None
        self.headers = {}
        self.body = b""

    # -- HTTP upgrade ----------------------------------------------------------------------

    def upgrade(self, tunnel_id, method="GET", extra_headers=None, key=None):
        key = key if key is not None else base64.b64encode(os.urandom(16)).decode()
        headers = {
            "Host": rh.DOMAIN,
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": key,
            "Sec-WebSocket-Version": "13",
            "User-Agent": "otunnel-test/1",
        }
        headers.update(extra_headers or {})
        request = f"{method} /api/tunnel/{tunnel_id}/bridge HTTP/1.1\r\n"
        request += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        self.sock.sendall(request.encode())
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split(" ")[1])
        self.headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            self.headers[k.strip().lower()] = v.strip()
        if self.status != 101:
            length = int(self.headers.get("content-length", "0"))
            while len(self.buffer) < length:
                self._fill()
            self.body, self.buffer = self.buffer[:length], self.buffer[length:]
        return self.status

    def json_body(self):
        return json.loads(self.body)

    # -- frames ------------------------------------------------------------------------------

    def _fill(self, timeout=None):
        self.sock.settimeout(timeout if timeout is not None else self.timeout)
        try:
            data = self.sock.recv(262144)
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionResetError):
            data = b""
        if not data:
            raise Closed("connection closed")
        self.buffer += data

    def send_raw(self, data):
        self.sock.sendall(data)

    def send_frame(self, opcode, payload, fin=True):
        self.sock.sendall(encode_frame(opcode, payload, fin=fin))

    def send_text(self, text):
        self.send_frame(OP_TEXT, text.encode() if isinstance(text, str) else text)

    def send_json(self, value):
        self.send_text(json.dumps(value))

    def send_binary(self, payload):
        self.send_frame(OP_BINARY, payload)

    def recv_frame(self, timeout=None):
        """(fin, opcode, payload) of the next frame (relay frames are never masked)."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)

        def need(n):
            while len(self.buffer) < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no frame from the relay")
                self._fill(remaining)
        need(2)
        b0, b1 = self.buffer[0], self.buffer[1]
        assert b1 & 0x80 == 0, "relay frames must not be masked"
        length = b1 & 0x7F
        offset = 2
        if length == 126:
            need(4)
            length = struct.unpack(">H", self.buffer[2:4])[0]
            offset = 4
        elif length == 127:
            need(10)
            length = struct.unpack(">Q", self.buffer[2:10])[0]
            offset = 10
        need(offset + length)
        payload = self.buffer[offset:offset + length]
        self.buffer = self.buffer[offset + length:]
        return bool(b0 & 0x80), b0 & 0x0F, payload

    def recv_message(self, timeout=None, answer_pings=True):
        """(opcode, payload) of the next whole message; pings are answered, pongs dropped."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        parts = []
        opcode = None
        while True:
            fin, op, payload = self.recv_frame(max(0.01, deadline - time.monotonic()))
            if op == OP_PING:
                if answer_pings:
                    self.send_frame(OP_PONG, payload)
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                return op, payload
            if op != OP_CONT:
                opcode = op
            parts.append(payload)
            if fin:
                return opcode, b"".join(parts)

    def recv_json(self, timeout=None):
        op, payload = self.recv_message(timeout)
        assert op == OP_TEXT, (op, payload[:200])
        return json.loads(payload)

    def wait_close(self, timeout=None):
        """Reads past any other messages to the close frame: (code, reason)."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            op, payload = self.recv_message(max(0.01, deadline - time.monotonic()))
            if op == OP_CLOSE:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
                return code, payload[2:].decode(errors="replace")

    def attach(self, token, routes=None, **members):
        message = {"type": "attach", "token": token}
        if routes is not None:
            message["routes"] = routes
        message.update(members)
        self.send_json(message)
        return self.recv_json()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def create_ready_tunnel(relayd, workdir, tunnel_id=None, api=None):
    """A tunnel created through relayd's API (or `api`, e.g. Controld.request) with a
    certificate issued for a key we made."""
    api = api or relayd.api
    body = {"id": tunnel_id} if tunnel_id else None
    created = api("POST", "/api/tunnel", body=body)
    assert created.status == 201, created
    tunnel = created.json()
    names = [tunnel["hostname"], "*." + tunnel["hostname"]]
    csr, key_path = harness.make_csr(workdir, names)
    bound = api("PUT", f"/api/tunnel/{tunnel['id']}/certificate", body={"csr": csr},
                token=tunnel["token"])
    assert bound.status in (200, 202), bound

    def ready():
        r = api("GET", f"/api/tunnel/{tunnel['id']}/certificate", token=tunnel["token"])
        assert r.status == 200, r
        return r.json() if r.json()["state"] == "ready" else None
    certificate = harness.wait_until(ready, 30, "the certificate to be ready")
    tunnel["chain"] = certificate["chain"]
    tunnel["key_path"] = key_path
    return tunnel


def attached_bridge(relayd, tunnel, routes=None, proxy_header=None, **members):
    client = BridgeClient(relayd.tls_port, relayd.ca_file, proxy_header=proxy_header)
    assert client.upgrade(tunnel["id"]) == 101, client.body
    answer = client.attach(tunnel["token"], routes, **members)
    assert answer["type"] == "attached", answer
    return client, answer
