"""Pools of origins, controld's part (docs/pools-origins.md), with real controld and relayd: the
tunnel's owner adds an origin through the API and gets its derived credential; a bridge attaches
with it under that origin's name only; a rotation and a removal stop it. Whether relayd also
closes bridges that are already attached is relayd's part, not checked here."""
import bridge_client as bc
import harness


def attach_answer(s, tunnel_id, token, **members):
    """The relay's first answer to an attach with `token`: ("attached", None) or
    ("attach_error", code). The bridge is closed either way."""
    client = bc.BridgeClient(s.relayd.tls_port, s.ca_file)
    try:
        assert client.upgrade(tunnel_id) == 101, client.body
        answer = client.attach(token, **members)
        return answer["type"], answer.get("code")
    finally:
        client.close()


ATTACHED = ("attached", None)
BAD_TOKEN = ("attach_error", "bad_token")


def test_origin_credentials_attach_under_their_own_name_until_rotated_or_removed(stack,
                                                                                 tmp_path):
    # Refused attaches from one address would otherwise run into the failure limit.
    s = stack(relayd_env={"AUTH_FAILURE_LIMIT": "1000"})
    tunnel = bc.create_ready_tunnel(s.relayd, tmp_path)
    tid, token = tunnel["id"], tunnel["token"]
    api = s.relayd.api

    added = api("POST", f"/api/tunnel/{tid}/origins", body={"name": "web-1"}, token=token)
    assert added.status == 201, added
    credential = added.json()["credential"]
    assert credential.startswith("oc_") and added.json()["generation"] == 0
    listed = api("GET", f"/api/tunnel/{tid}/origins", token=token)
    assert listed.status == 200
    assert [o["credential"] for o in listed.json()["origins"]] == [credential]
    # A credential is not an API token.
    assert api("GET", f"/api/tunnel/{tid}/origins", token=credential).status == 401

    # Under its own name only; the tunnel token under any name, as before.
    harness.wait_until(
        lambda: attach_answer(s, tid, credential, origin="web-1") == ATTACHED, 15,
        "the origin's credential to attach")
    assert attach_answer(s, tid, credential, origin="web-2") == BAD_TOKEN
    assert attach_answer(s, tid, credential) == BAD_TOKEN
    assert attach_answer(s, tid, token, origin="web-2") == ATTACHED
    assert attach_answer(s, tid, token, origin="web-1", profile="v6", profile_index=1) == ATTACHED

    rotated = api("POST", f"/api/tunnel/{tid}/origins/rotate", token=token)
    assert rotated.status == 200, rotated
    assert rotated.json()["generation"] == 1
    fresh = rotated.json()["origins"][0]["credential"]
    assert fresh != credential
    harness.wait_until(
        lambda: attach_answer(s, tid, credential, origin="web-1") == BAD_TOKEN, 15,
        "the rotated-away credential to be refused")
    assert attach_answer(s, tid, fresh, origin="web-1") == ATTACHED

    removed = api("DELETE", f"/api/tunnel/{tid}/origins/web-1", token=token)
    assert removed.status == 204, removed
    harness.wait_until(
        lambda: attach_answer(s, tid, fresh, origin="web-1") == BAD_TOKEN, 15,
        "the removed origin's credential to be refused")
    assert api("DELETE", f"/api/tunnel/{tid}/origins/web-1", token=token).status == 404
    assert attach_answer(s, tid, token, origin="web-1") == ATTACHED

    balanced = api("PUT", f"/api/tunnel/{tid}/balancing",
                   body={"mode": "priority", "stickyHoldMs": 2500}, token=token)
    assert balanced.status == 200, balanced
    assert (balanced.json()["balancing"], balanced.json()["stickyHoldMs"]) == ("priority", 2500)


def test_every_controld_on_one_database_derives_the_same_credentials(stack, tmp_path,
                                                                     mysql_database):
    # Two machines without a mesh, sharing one MariaDB database: the secret in its meta table is
    # made once, so a credential shown by one controld attaches through the other's relay.
    env = {"DATABASE_URL": mysql_database}
    a = stack(controld_env={**env, "MACHINE_ID": "pool-a"})
    b = stack(controld_env={**env, "MACHINE_ID": "pool-b"})
    tunnel = bc.create_ready_tunnel(a.relayd, tmp_path)
    tid, token = tunnel["id"], tunnel["token"]
    added = a.relayd.api("POST", f"/api/tunnel/{tid}/origins", body={"name": "eu-1"}, token=token)
    assert added.status == 201, added
    credential = added.json()["credential"]
    shown_by_b = b.relayd.api("GET", f"/api/tunnel/{tid}/origins", token=token)
    assert shown_by_b.status == 200, shown_by_b
    assert shown_by_b.json()["origins"][0]["credential"] == credential
    assert attach_answer(b, tid, credential, origin="eu-1") == ATTACHED
    assert attach_answer(b, tid, credential, origin="eu-2") == BAD_TOKEN
