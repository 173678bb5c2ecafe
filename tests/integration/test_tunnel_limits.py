"""The bridge limits of docs/protocol.md and relayd's connection limits, against the real relayd:
visitors over MAX_CONNS_PER_BRIDGE / MAX_CONNS_PER_TUNNEL, and a raw bridge client that breaks
each rule of the upgrade, the attach and the frames on purpose."""
import json
import socket
import ssl
import time

import pytest

import bridge_client as bc
import relay_harness as rh


# ---------------------------------------------------------------------------------------------
# Visitors per bridge and per tunnel

def _hold_visitor(port, hostname, ca_file):
    """A visitor whose TLS handshake completed (so otunnel took it), kept open."""
    return rh.tls_connect(port, hostname, ca_file, timeout=15)


def _refused(port, hostname, ca_file):
    """True when the relay closes the visitor before any TLS handshake completes."""
    try:
        sock = rh.tls_connect(port, hostname, ca_file, timeout=15)
    except (ssl.SSLError, ConnectionError, OSError) as error:
        if isinstance(error, socket.timeout):
            raise
        return True
    sock.close()
    return False


def _get(sock, hostname, path="/hello"):
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {hostname}\r\n\r\n".encode())
    return rh.read_http_response(sock.makefile("rb"))


def test_visitors_over_the_bridge_and_tunnel_limits_are_closed_and_counted(stack):
    s = stack(relayd_env={"MAX_CONNS_PER_BRIDGE": "2", "MAX_CONNS_PER_TUNNEL": "3"})
    web = s.origin("web")
    port = s.relayd.tls_port

    # One link: the bridge takes 2 at once, the third visitor is turned away.
    one = s.tunnel(web.port, links=1, name="one")
    held = [_hold_visitor(port, one.hostname, s.ca_file) for _ in range(2)]
    assert _refused(port, one.hostname, s.ca_file)
    metrics = s.relayd.wait_metric(lambda m: m.visitors("rejected_too_many_connections") >= 1,
                                   what="the rejection counted")
    assert metrics.visitors("rejected_too_many_connections") == 1
    for sock in held:
        status, _, body = _get(sock, one.hostname)
        assert (status, body) == (200, b"hello from web\n")
    # A slot freed is a slot taken again.
    held.pop().close()
    s.relayd.wait_metric(lambda m: m.get("opentunnel_visitor_connections_open") == 1,
                         what="the closed visitor to be released")
    again = _hold_visitor(port, one.hostname, s.ca_file)
    assert _get(again, one.hostname)[0] == 200
    held.append(again)
    for sock in held:
        sock.close()
    s.relayd.wait_metric(lambda m: m.get("opentunnel_visitor_connections_open") == 0,
                         what="all visitors released")

    # Two links of 2 each, but the tunnel takes 3: the fourth visitor is turned away.
    two = s.tunnel(web.port, links=2, name="two")
    held = [_hold_visitor(port, two.hostname, s.ca_file) for _ in range(3)]
    assert _refused(port, two.hostname, s.ca_file)
    metrics = s.relayd.wait_metric(lambda m: m.visitors("rejected_too_many_connections") >= 2,
                                   what="the second rejection counted")
    assert metrics.visitors("rejected_too_many_connections") == 2
    assert metrics.get("opentunnel_visitor_connections_open") == 3
    for sock in held:
        assert _get(sock, two.hostname)[0] == 200
        sock.close()


# ---------------------------------------------------------------------------------------------
# The upgrade

def _bridge(s):
    return bc.BridgeClient(s.relayd.tls_port, s.ca_file)


def test_upgrade_errors_are_json(stack, tmp_path):
    s = stack()
    tunnel = bc.create_ready_tunnel(s.relayd, tmp_path)

    def error(client, status, tag):
        assert client.status == status, (client.status, client.body)
        assert client.headers["content-type"].startswith("application/json")
        body = client.json_body()
        assert body["_tag"] == tag, body
        assert isinstance(body["message"], str) and body["message"]
        client.close()
        return client

    c = _bridge(s)
    c.upgrade("nosuchtunnel")
    error(c, 404, "NotFoundError")
    c = _bridge(s)
    c.upgrade("Not_A_Label")
    error(c, 404, "NotFoundError")
    c = _bridge(s)
    c.upgrade(tunnel["id"], method="POST")
    error(c, 405, "MethodNotAllowedError")
    c = _bridge(s)
    c.upgrade(tunnel["id"], key="short")
    error(c, 400, "BadRequestError")
    c = _bridge(s)
    c.upgrade(tunnel["id"], extra_headers={"Sec-WebSocket-Version": "8"})
    error(c, 426, "UpgradeRequiredError")
    assert c.headers["sec-websocket-version"] == "13"

    c = _bridge(s)
    assert c.upgrade(tunnel["id"]) == 101
    assert c.headers["upgrade"].lower() == "websocket"
    assert "sec-websocket-extensions" not in c.headers
    c.close()


# ---------------------------------------------------------------------------------------------
# attach

def test_attach_errors_with_their_codes_and_close_codes(stack, tmp_path):
    s = stack()
    tunnel = bc.create_ready_tunnel(s.relayd, tmp_path)

    def refused(token, routes, code, close_code, **members):
        c = _bridge(s)
        assert c.upgrade(tunnel["id"]) == 101
        answer = c.attach(token, routes, **members)
        assert answer["type"] == "attach_error", answer
        assert answer["code"] == code, answer
        assert c.wait_close()[0] == close_code
        c.close()

    refused("tk_wrong", None, "bad_token", 1008)
    refused("has space", None, "bad_token", 1008)
    refused(tunnel["token"], ["-bad"], "invalid_route", 1008)
    refused(tunnel["token"], ["a.b"], "invalid_route", 1008)
    refused(tunnel["token"], [], "invalid_route", 1008)
    refused(tunnel["token"], [""] + [7], "invalid_route", 1008)
    # The token before the routes: a wrong token is bad_token whatever the routes.
    refused("tk_wrong", ["-bad"], "bad_token", 1008)
    refused("tk_wrong", [7], "bad_token", 1008)
    # 129 routes fail before anything else is looked at, even a bad token.
    refused("tk_wrong", [f"r{i}" for i in range(129)], "too_many_routes", 1008)
    refused(tunnel["token"], [f"r{i}" for i in range(129)], "too_many_routes", 1008)

    metrics = s.relayd.metrics()
    assert metrics.attaches("bad_token") == 4
    assert metrics.attaches("invalid_route") == 4
    assert metrics.attaches("too_many_routes") == 2
    assert metrics.attaches("ok") == 0

    # Exactly 128 routes (uppercase folded, duplicates dropped) attach.
    routes = [f"R{i}" for i in range(128)] + ["r0"]
    c, attached = bc.attached_bridge(s.relayd, tunnel, routes[:128])
    assert attached["limits"]["max_payload"] == 32768
    assert attached["limits"]["window"] == 524288
    assert attached["heartbeat_ms"] == 15000
    assert 1 <= len(attached["bridge_id"]) <= 128
    c.close()


def test_routes_per_tunnel_are_limited_to_256_across_bridges(stack, tmp_path):
    s = stack()
    tunnel = bc.create_ready_tunnel(s.relayd, tmp_path)
    first, _ = bc.attached_bridge(s.relayd, tunnel, [f"a{i}" for i in range(128)])
    second, _ = bc.attached_bridge(s.relayd, tunnel, [f"b{i}" for i in range(128)])
    third = _bridge(s)
    assert third.upgrade(tunnel["id"]) == 101
    answer = third.attach(tunnel["token"], ["c0"])
    assert answer["type"] == "attach_error" and answer["code"] == "too_many_routes", answer
    assert third.wait_close()[0] == 1008
    assert s.relayd.metrics().attaches("too_many_routes") == 1
    for c in (first, second, third):
        c.close()


def test_malformed_attach_is_a_protocol_error(stack, tmp_path):
    s = stack()
    tunnel = bc.create_ready_tunnel(s.relayd, tmp_path)
    for message in ('["attach"]', '{"type":"attach"}', '{"type":"attach","token":5}',
                    '{"type":"attach","token":"t","window":16.0}',
                    '{"type":"attach","token":"t","window":1024}', 'not json'):
        c = _bridge(s)
        assert c.upgrade(tunnel["id"]) == 101
        c.send_text(message)
        op, payload = c.recv_message()
        if op == bc.OP_TEXT:
            answer = json.loads(payload)
            assert (answer["type"], answer["code"]) == ("attach_error", "error"), answer
            code, _ = c.wait_close()
        else:
            assert op == bc.OP_CLOSE
            code = int.from_bytes(payload[:2], "big")
        assert code == 1002, message
        c.close()


# ---------------------------------------------------------------------------------------------
# Message sizes and phases

def test_message_over_64k_before_attach_closes_1009(stack, tmp_path):
    s = stack()
    tunnel = bc.create_ready_tunnel(s.relayd, tmp_path)
    c = _bridge(s)
    assert c.upgrade(tunnel["id"]) == 101
    c.send_text(b"a" * 65537)
    assert c.wait_close()[0] == 1009
    c.close()


def test_message_over_32773_after_attach_closes_1009(stack, tmp_path):
    s = stack()
    tunnel = bc.create_ready_tunnel(s.relayd, tmp_path)
    c, _ = bc.attached_bridge(s.relayd, tunnel)
    c.send_binary(bc.data_frame(1, b"x" * 32769))  # 5 + 32769 = 32774 bytes
    assert c.wait_close()[0] == 1009
    c.close()
    # A 64 KiB text before attach is within the limit: it fails as a bad attach, not as a size.
    c = _bridge(s)
    assert c.upgrade(tunnel["id"]) == 101
    c.send_text(b'{"type":"attach","token":"' + b"a" * (65536 - 28) + b'"}')
    code, _ = c.wait_close()
    assert code in (1002, 1008), code
    c.close()


def test_binary_before_attach_closes_1002(stack, tmp_path):
    s = stack()
    tunnel = bc.create_ready_tunnel(s.relayd, tmp_path)
    c = _bridge(s)
    assert c.upgrade(tunnel["id"]) == 101
    c.send_binary(bc.data_frame(1, b"hi"))
    assert c.wait_close()[0] == 1002
    c.close()


@pytest.mark.waits
def test_no_attach_within_10_s_closes_1008(stack, tmp_path):
    s = stack()
    tunnel = bc.create_ready_tunnel(s.relayd, tmp_path)
    c = _bridge(s)
    assert c.upgrade(tunnel["id"]) == 101
    started = time.monotonic()
    code, _ = c.wait_close(timeout=20)
    waited = time.monotonic() - started
    assert code == 1008
    assert 9.0 <= waited <= 13.0, waited
    c.close()


def test_data_beyond_credit_closes_the_bridge_1002(stack, tmp_path):
    s = stack()
    tunnel = bc.create_ready_tunnel(s.relayd, tmp_path)
    c, attached = bc.attached_bridge(s.relayd, tunnel)
    window = attached["limits"]["window"]

    # A visitor that sends its ClientHello and then never reads.
    hello, _ = rh.client_hello_bytes(tunnel["hostname"])
    visitor = socket.create_connection(("127.0.0.1", s.relayd.tls_port), timeout=10)
    visitor.sendall(hello)
    kind, conn_id, body = bc.parse_stream_frame(c.recv_message()[1])
    assert kind == bc.KIND_OPEN and conn_id == 1, (kind, conn_id)
    route, address = bc.parse_open(body)
    assert route == ""
    assert address == f"127.0.0.1:{visitor.getsockname()[1]}"
    received = b""
    while len(received) < len(hello):
        kind, conn_id, body = bc.parse_stream_frame(c.recv_message()[1])
        assert (kind, conn_id) == (bc.KIND_DATA, 1)
        received += body
    assert received == hello

    # Send far more than the window without waiting for credit; the relay grants only what the
    # visitor's socket took, which a visitor that never reads keeps small.
    chunk = bc.data_frame(1, b"z" * 32768)
    sent = 0
    close_code = None
    while sent < window + 32 * 1024 * 1024:
        try:
            c.send_binary(chunk)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            break
        sent += 32768
        if sent % (16 * 32768) == 0:
            try:
                op, payload = c.recv_message(timeout=0.01)
            except TimeoutError:
                continue
            except bc.Closed:
                break
            if op == bc.OP_CLOSE:
                close_code = int.from_bytes(payload[:2], "big")
                break
    if close_code is None:
        close_code = c.wait_close()[0]
    assert close_code == 1002
    assert sent > window
    # Closing the bridge aborts the visitor's connection.
    rh.wait_closed(visitor, 10)
    visitor.close()
    c.close()
