"""The fault proxy itself (tests/tools/fault_proxy.py), against a local echo server: each mode
does exactly what the resilience tests rely on, and the control socket drives it."""
import json
import socket
import threading
import time

import pytest

import resilience_harness as rz


@pytest.fixture
def echo():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)
            threading.Thread(target=pump, args=(conn,), daemon=True).start()

    def pump(conn):
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                conn.close()
                return
            conn.sendall(data)
    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


def _recv_exactly(sock, size, timeout=5.0):
    sock.settimeout(timeout)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _silent(sock, seconds=0.5):
    """True when nothing arrives within `seconds` (the mode under test forwards nothing)."""
    sock.settimeout(seconds)
    try:
        sock.recv(100)  # data, or b"" for a close: either way not silent
    except socket.timeout:
        return True
    return False


def test_fault_proxy_modes(echo):
    port, accepted = echo
    proxy = rz.FaultProxy(port, control_port=0).start()
    try:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        client.sendall(b"hello")
        assert _recv_exactly(client, 5) == b"hello"

        proxy.set_mode("freeze")
        client.sendall(b"held")
        assert _silent(client)
        proxy.set_mode("pass")  # what was held goes through, in order
        assert _recv_exactly(client, 4) == b"held"

        proxy.set_mode("trickle", bytes_per_interval=2, interval=0.1)
        started = time.monotonic()
        client.sendall(b"0123456789")
        assert _recv_exactly(client, 10) == b"0123456789"
        assert time.monotonic() - started >= 0.3  # 5 pieces up, paced

        proxy.set_mode("reset")
        client.settimeout(5)
        with pytest.raises(ConnectionResetError):
            client.recv(10)
        client.close()

        proxy.set_mode("pass")
        second = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        second.sendall(b"x")
        assert _recv_exactly(second, 1) == b"x"
        proxy.set_mode("drop", scope="existing")
        second.sendall(b"lost")
        assert _silent(second)
        proxy.set_mode("pass")  # a dropped connection never comes back
        assert _silent(second)
        states = proxy.connections()
        assert states[1]["mode"] == "drop" and not states[1]["closed"]

        proxy.set_mode("blackhole", scope="new")
        third = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        third.sendall(b"z" * 1000)
        assert _silent(third)
        uplinks = len(accepted)
        assert uplinks == 2  # the black hole never connected upstream

        control = socket.create_connection(("127.0.0.1", proxy.control_port), timeout=5)
        reader = control.makefile("r")
        control.sendall(b"status\n")
        status = json.loads(reader.readline())
        assert status["default"]["mode"] == "blackhole"
        assert [c["mode"] for c in status["connections"]] == ["reset", "drop", "blackhole"]
        assert status["connections"][2]["discarded"] == 1000
        control.sendall(b"mode pass new\n")
        assert reader.readline() == "ok\n"
        control.sendall(b"mode nonsense\n")
        assert reader.readline().startswith("error")
        fourth = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        fourth.sendall(b"back")
        assert _recv_exactly(fourth, 4) == b"back"
        for sock in (second, third, fourth, control):
            sock.close()
    finally:
        proxy.close()
