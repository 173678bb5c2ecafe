"""relayd's internal listener (INTERNAL_LISTEN, docs/mesh.md "How it is wired"): the first line of
each connection decides. A liveness question (OPENTUNNEL-ALIVE/2) is answered by relayd itself,
signed over the asker's nonce; a mesh link or an HTTP request line is handed to controld over
MESH_HANDOFF_SOCKET with the socket itself (SCM_RIGHTS); anything else is closed and counted.

To check exactly what relayd hands over, the test plays controld's part of the handoff: it
listens on the SOCK_SEQPACKET socket relayd is told about and checks what arrives, then uses the
descriptor it received to talk to the peer, which proves it is the peer's own connection
(test_mesh_link.py runs the real controld on the other end). The
peer's side of each proof is computed here with Python's hmac, as the wire format in
docs/mesh.md defines it.
"""
import hashlib
import hmac
import os
import re
import shutil
import socket
import struct
import tempfile
import time
from pathlib import Path

import pytest

import harness
import relay_harness as rh

TOKEN = "a-mesh-secret-of-at-least-32-bytes-for-tests"
MACHINE = "machine-a"
ADDRESS = "127.0.0.11"


def mesh_mac(secret, *fields):
    message = b"".join(struct.pack(">I", len(f)) + f for f in fields)
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def alive_question(asker, asked, nonce, secret=TOKEN, when_ms=None):
    when = str(when_ms if when_ms is not None else int(time.time() * 1000))
    proof = mesh_mac(secret, b"OPENTUNNEL-ALIVE/2", b"ask", asker.encode(), asked.encode(),
                     when.encode(), nonce.encode())
    return f"OPENTUNNEL-ALIVE/2 {asker} {asked} {when} {nonce} {proof}\n".encode()


def forward_header(sender, receiver, tunnel="t1", route="-", visitor="198.51.100.7:4000"):
    when = str(int(time.time() * 1000))
    nonce = os.urandom(16).hex()
    fields = [b"OPENTUNNEL-FORWARD/2", sender.encode(), receiver.encode(), when.encode(),
              nonce.encode(), tunnel.encode(), route.encode(), visitor.encode()]
    proof = mesh_mac(TOKEN, *fields)
    return b" ".join(fields) + b" " + proof.encode() + b"\n"


def check_alive_answer(line, asker, asked, nonce):
    """The state the answer carries, after checking its signature over our nonce."""
    fields = line.decode().rstrip("\n").split(" ")
    assert len(fields) == 6 and fields[0] == "OPENTUNNEL-ALIVE/2", line
    _, sender, receiver, when, state, proof = fields
    assert (sender, receiver) == (asked, asker)
    assert abs(int(when) - time.time() * 1000) < 30_000
    expected = mesh_mac(TOKEN, b"OPENTUNNEL-ALIVE/2", b"answer", asked.encode(), asker.encode(),
                        when.encode(), nonce.encode(), state.encode())
    assert hmac.compare_digest(proof, expected), "the answer's proof does not check out"
    return state


def read_line(sock, timeout=10.0):
    sock.settimeout(timeout)
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def closed_without_answer(sock, timeout=10.0):
    sock.settimeout(timeout)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True


class HandoffReceiver:
    """The SOCK_SEQPACKET socket controld listens on for handed-off connections."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.sock.settimeout(10)
        self.channel = None

    def receive(self):
        """(kind, peer, local, prefix, a socket object on the received descriptor)."""
        if self.channel is None:
            self.channel, _ = self.sock.accept()
            self.channel.settimeout(10)
        message, fds, _, _ = socket.recv_fds(self.channel, 70 * 1024, 4)
        assert len(fds) == 1, fds
        assert message[:4] == b"OTH1"
        kind = message[4]
        offset = 5
        fields = []
        for width in (2, 2):
            (length,) = struct.unpack_from(">H", message, offset)
            offset += 2
            fields.append(message[offset:offset + length].decode())
            offset += length
        (length,) = struct.unpack_from(">I", message, offset)
        offset += 4
        prefix = message[offset:offset + length]
        assert offset + length == len(message)
        return kind, fields[0], fields[1], prefix, socket.socket(fileno=fds[0])

    def close(self):
        if self.channel is not None:
            self.channel.close()
        self.sock.close()


@pytest.fixture
def mesh_stack(tmp_path):
    # A unix socket path must fit in 108 bytes: pytest's per-test directories may not.
    short = Path(tempfile.mkdtemp(prefix="oth-", dir="/tmp"))
    handoff = short / "handoff.sock"
    stack = rh.Stack(tmp_path, relayd_env={
        "INTERNAL_LISTEN": f"{ADDRESS}:0",
        "INTERNAL_TOKEN": TOKEN,
        "MESH_HANDOFF_SOCKET": str(handoff),
        "MACHINE_ID": MACHINE,
        "SHUTDOWN_DRAIN_MS": "200",
    })
    match = re.search(r"internal listener up .*port=(\d+)", stack.relayd.log_text())
    assert match, "relayd did not log its internal port"
    stack.internal_port = int(match.group(1))
    stack.handoff_path = handoff
    try:
        yield stack
    finally:
        stack.close()
        shutil.rmtree(short, ignore_errors=True)


def connect(stack, source=None):
    sock = socket.create_connection((ADDRESS, stack.internal_port), timeout=10,
                                    source_address=(source, 0) if source else None)
    return sock


def refused(stack, reason):
    return stack.relayd.metrics().get("opentunnel_mesh_internal_refused_total", reason=reason)


def test_a_liveness_question_gets_a_signed_answer(mesh_stack):
    nonce = os.urandom(16).hex()
    with connect(mesh_stack) as sock:
        sock.sendall(alive_question("machine-b", MACHINE, nonce))
        answer = read_line(sock)
    assert check_alive_answer(answer, "machine-b", MACHINE, nonce) == "serving"
    # The answer is bound to our nonce: checked against another, it fails.
    with pytest.raises(AssertionError):
        check_alive_answer(answer, "machine-b", MACHINE, os.urandom(16).hex())
    assert mesh_stack.relayd.metrics().get("opentunnel_mesh_internal_connections_total",
                                           kind="alive") == 1


def test_questions_without_the_secret_or_for_another_machine_get_no_answer(mesh_stack):
    cases = [
        (alive_question("machine-b", MACHINE, os.urandom(16).hex(),
                        secret="another-secret-of-at-least-32-bytes-long!"), "bad_proof"),
        (alive_question("machine-b", "machine-c", os.urandom(16).hex()), "not_for_us"),
        (alive_question("machine-b", MACHINE, os.urandom(16).hex(),
                        when_ms=int(time.time() * 1000) - 120_000), "stale"),
    ]
    for line, reason in cases:
        with connect(mesh_stack) as sock:
            sock.sendall(line)
            assert closed_without_answer(sock), reason
        assert refused(mesh_stack, reason) == 1


def test_a_restarting_control_plane_is_reported_as_control_down(mesh_stack):
    mesh_stack.controld.stop()
    mesh_stack.relayd.wait_metric(lambda m: m.get("opentunnel_control_connected") == 0,
                                  what="relayd to see its control session end")
    nonce = os.urandom(16).hex()
    with connect(mesh_stack) as sock:
        sock.sendall(alive_question("machine-b", MACHINE, nonce))
        answer = read_line(sock)
    assert check_alive_answer(answer, "machine-b", MACHINE, nonce) == "control_down"


def test_mesh_links_and_http_requests_are_handed_to_controld_with_their_socket(mesh_stack):
    receiver = HandoffReceiver(mesh_stack.handoff_path)
    try:
        first = b"OPENTUNNEL-MESH/2 machine-b " + os.urandom(16).hex().encode() + b"\n"
        with connect(mesh_stack, source="127.0.0.12") as peer:
            peer.sendall(first)
            kind, peer_address, local_address, prefix, handed = receiver.receive()
            with handed:
                assert kind == 1
                assert peer_address.startswith("127.0.0.12:")
                assert local_address == f"{ADDRESS}:{mesh_stack.internal_port}"
                assert prefix == first
                # The descriptor is the peer's connection: what we write, the peer reads.
                handed.sendall(b"OPENTUNNEL-MESH/2 machine-a answer\n")
                assert read_line(peer) == b"OPENTUNNEL-MESH/2 machine-a answer\n"
        request = (b"GET /internal/tunnel/abc/routes HTTP/1.1\r\nHost: x\r\n"
                   b"x-opentunnel-auth: y\r\n\r\n")
        with connect(mesh_stack) as peer:
            peer.sendall(request)
            kind, _, _, prefix, handed = receiver.receive()
            with handed:
                assert kind == 2
                assert prefix == request
        metrics = mesh_stack.relayd.metrics()
        assert metrics.get("opentunnel_mesh_internal_connections_total", kind="mesh") == 1
        assert metrics.get("opentunnel_mesh_internal_connections_total", kind="http") == 1
    finally:
        receiver.close()


def test_without_controld_taking_them_mesh_links_are_closed(mesh_stack):
    # Nothing listens on the handoff socket.
    with connect(mesh_stack) as sock:
        sock.sendall(b"OPENTUNNEL-MESH/2 machine-b " + os.urandom(16).hex().encode() + b"\n")
        assert closed_without_answer(sock)
    assert refused(mesh_stack, "control_unavailable") == 1


def test_other_first_lines_are_closed_and_counted(mesh_stack):
    cases = [
        (b"HELLO there\n", "unknown_line"),
        (b"x" * 1100, "line_too_long"),
        (b"OPENTUNNEL-FORWARD/2 machine-b machine-a 1 2 3 4 5 6\n", "bad_nonce"),
        # Well-formed and signed, but no controld here feeds relayd's route table, so it names no
        # linked peer (docs/mesh.md "The control-session feed", "Forwarding in relayd"): refused.
        (forward_header("machine-b", MACHINE), "not_linked"),
    ]
    for data, reason in cases:
        with connect(mesh_stack) as sock:
            sock.sendall(data)
            assert closed_without_answer(sock), reason
        assert refused(mesh_stack, reason) == 1
    # The listener still answers after all of them.
    nonce = os.urandom(16).hex()
    with connect(mesh_stack) as sock:
        sock.sendall(alive_question("machine-b", MACHINE, nonce))
        assert check_alive_answer(read_line(sock), "machine-b", MACHINE, nonce) == "serving"


def test_at_most_256_connections_wait_for_their_first_line(mesh_stack):
    waiting = []
    try:
        for _ in range(256):
            waiting.append(connect(mesh_stack))
        # relayd accepts in the order connections arrived, so this one comes after the 256.
        extra = connect(mesh_stack)
        with extra:
            assert closed_without_answer(extra)
        assert refused(mesh_stack, "too_many_waiting") >= 1
    finally:
        for sock in waiting:
            sock.close()
    # Once they are gone, the listener takes new connections again.
    def answered():
        nonce = os.urandom(16).hex()
        with connect(mesh_stack) as sock:
            sock.sendall(alive_question("machine-b", MACHINE, nonce))
            line = read_line(sock)
        return line and check_alive_answer(line, "machine-b", MACHINE, nonce) == "serving"
    harness.wait_until(answered, 10, "the listener to take connections again")
