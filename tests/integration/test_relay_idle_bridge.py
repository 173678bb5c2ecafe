"""Issue 12 item 4: what a connection gives back when it becomes a bridge. Its HTTP-only state
(the per-source API connection slot among it) is freed at the upgrade, so bridges from one address
never count against MAX_API_CONNECTIONS_PER_SOURCE, and the bridges keep working."""
import time

import bridge_client as bc

PER_SOURCE = 2


def _attach_soon(relay, tunnel, seconds=5.0):
    """An attached bridge; a 429 (an API connection of ours not yet seen closed by relayd) is
    retried until `seconds` pass. A slot a bridge never gave back stays taken: that fails."""
    deadline = time.monotonic() + seconds
    while True:
        client = bc.BridgeClient(relay.tls_port, relay.ca_file)
        status = client.upgrade(tunnel["id"])
        if status == 101:
            answer = client.attach(tunnel["token"])
            assert answer["type"] == "attached", answer
            return client
        client.close()
        assert status == 429 and time.monotonic() < deadline, f"upgrade answered {status}"
        time.sleep(0.1)


def test_bridges_from_one_address_hold_no_api_connection_slot(stack):
    relay = stack(relayd_env={"MAX_API_CONNECTIONS_PER_SOURCE": str(PER_SOURCE)}).relayd
    tunnel = bc.create_ready_tunnel(relay, relay.workdir)
    bridges = [_attach_soon(relay, tunnel) for _ in range(PER_SOURCE + 2)]
    try:
        # Every bridge still answers (a ping gets its pong), and the API still serves this address.
        for client in bridges:
            client.send_frame(bc.OP_PING, b"idle")
            deadline = time.monotonic() + 10
            while True:
                _, opcode, payload = client.recv_frame(max(0.01, deadline - time.monotonic()))
                if opcode == bc.OP_PONG and payload == b"idle":
                    break
        assert relay.api("GET", "/api/tunnel/" + tunnel["id"], token=tunnel["token"]).status == 200
    finally:
        for client in bridges:
            client.close()
