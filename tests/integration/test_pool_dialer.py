"""otunnel's dialing side of pools (docs/pools-dialer.md) with real controld + relayd + otunnel:
two profiles, one reaching the relay and one an address nothing listens on (127.0.9.1); the
good one attaches its links and carries visitors while the bad one stays in backoff, and
`otunnel status --json` shows both. Then the credential: otunnel attaching with one follows the
relay's bridge protocol (attaches on a protocol 2 relay, stops with a clear message on an older
one)."""
import json
import signal
import subprocess
import time

import bridge_client as bc
import harness
import relay_harness as rh

BAD_ADDRESS = "127.0.9.1"  # this file's loopback range: nothing listens here


def _status(state_dir, json_output=True):
    args = [str(rh.OTUNNEL), "--state-dir", str(state_dir), "status"]
    if json_output:
        args.append("--json")
    done = subprocess.run(args, capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL)
    return done.returncode, (json.loads(done.stdout) if json_output else done.stdout)


def _wait_status(client, predicate, what):
    def check():
        client._alive()
        code, document = _status(client.state_dir)
        if code == 0 and document["tunnels"] and predicate(document["tunnels"][0]):
            return document["tunnels"][0]
        return None
    return harness.wait_until(check, 30, what)


def _provisioned(s, web, name):
    """otunnel run once with the tunnel token, so the state directory holds the tunnel."""
    client = s.tunnel(web.port, name=name, extra_args=["--origin", "web-1"])
    client.stop()
    return client


def test_an_unreachable_profile_backs_off_while_the_good_one_carries_visitors(stack):
    s = stack()
    web = s.origin("web")
    dead_port = harness.free_port(BAD_ADDRESS)  # bound and released: refused from now on
    relay_port = s.relayd.tls_port
    client = s.tunnel(web.port, wait=False, name="pooled", extra_args=[
        "--origin", "web-1",
        "--profile", f"good={rh.DOMAIN}:{relay_port},links=3",
        "--profile", f"bad={BAD_ADDRESS}:{dead_port},links=2"])
    url = client.wait_url()

    def settled(tunnel):
        good, bad = tunnel["profiles"]
        return (good["addresses"] and good["addresses"][0]["attached"] == 3
                and bad["addresses"] and bad["addresses"][0]["lastError"]
                and bad["addresses"][0]["nextTryMs"] > 0)
    tunnel = _wait_status(client, settled, "the good profile attached, the bad one backing off")
    assert tunnel["running"] is True
    assert tunnel["origin"] == "web-1"
    assert tunnel["tunnelId"] == client.tunnel_id
    good, bad = tunnel["profiles"]
    assert (good["name"], good["index"], good["port"]) == ("good", 0, relay_port)
    assert good["addresses"] == [{"address": "127.0.0.1", "wanted": 3, "attached": 3,
                                  "streams": 0, "nextTryMs": 0, "lastError": ""}]
    assert (bad["name"], bad["index"], bad["port"]) == ("bad", 1, dead_port)
    assert len(bad["addresses"]) == 1
    assert bad["addresses"][0]["address"] == BAD_ADDRESS
    assert bad["addresses"][0]["wanted"] == 2
    assert bad["addresses"][0]["attached"] == 0
    assert "refused" in bad["addresses"][0]["lastError"]

    # Visitors go through the good profile while the bad one keeps failing.
    for _ in range(10):
        done = rh.curl_url(url + "/hello", s.ca_file)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "hello from web\n"

    # Still backing off, never attached, and the good links untouched.
    tunnel = _wait_status(client, lambda t: t["profiles"][0]["addresses"][0]["attached"] == 3,
                          "the good links still attached")
    assert tunnel["profiles"][1]["addresses"][0]["attached"] == 0

    code, table = _status(client.state_dir, json_output=False)
    assert code == 0
    assert "origin web-1 (tunnel token): running" in table
    assert "0:good" in table and "1:bad" in table and "3/3" in table and "0/2" in table

    # A killed otunnel leaves a file that goes stale; `status` then says "not running".
    client.process.send_signal(signal.SIGKILL)
    client.process.wait(timeout=10)
    status_file = client.state_dir / f"{client.tunnel_id}.status.json"
    document = json.loads(status_file.read_text())
    document["updatedUnixMs"] = int(time.time() * 1000) - 20_000
    status_file.write_text(json.dumps(document))
    code, table = _status(client.state_dir, json_output=False)
    assert code == 1
    assert "not running" in table
    code, document = _status(client.state_dir)
    assert code == 1 and document["running"] is False


def test_a_stopped_otunnel_removes_its_status(stack):
    s = stack()
    web = s.origin("web")
    client = s.tunnel(web.port, name="plain", extra_args=["--origin", "web-1"])
    _wait_status(client, lambda t: t["profiles"][0]["addresses"][0]["attached"] == 4,
                 "the default profile's 4 links attached")
    client.stop()
    code, table = _status(client.state_dir, json_output=False)
    assert code == 1
    assert "not running" in table


def _relay_protocol(s, state):
    """What the relay says in `attached`: 1 when it names no protocol (it predates pools)."""
    bridge = bc.BridgeClient(s.relayd.tls_port, s.ca_file)
    try:
        assert bridge.upgrade(state["id"]) == 101, bridge.body
        answer = bridge.attach(state["token"], origin="probe", profile="probe")
        assert answer["type"] == "attached", answer
        return answer.get("protocol", 1)
    finally:
        bridge.close()


def test_a_second_origin_with_a_credential_and_a_copied_state_file(stack):
    s = stack()
    web = s.origin("web")
    owner = _provisioned(s, web, "owner")
    state = owner.state()
    protocol = _relay_protocol(s, state)
    # The second machine gets the owner's state file without its token (docs/pools-dialer.md).
    origin_dir = s.workdir / "origin2-state"
    origin_dir.mkdir(mode=0o700)
    state_file = next(p for p in owner.state_dir.glob("*.json")
                      if not p.name.endswith(".status.json"))
    copy = dict(state)
    del copy["token"]
    (origin_dir / state_file.name).write_text(json.dumps(copy))
    # The derived credential is not computable here yet (controld's part): the tunnel token
    # stands in for it, which the relay accepts under any origin name.
    client = rh.Otunnel(s.workdir / "origin2", s.relayd.server_url, s.ca_file, port=web.port,
                        links=2, name="origin2", state_dir=origin_dir,
                        extra_args=["--origin", "web-2", "--credential", state["token"]])
    s.tunnels.append(client)
    client.start()
    url = client.wait_url()
    assert url == owner.url
    if protocol >= 2:
        tunnel = _wait_status(client, lambda t: t["profiles"][0]["addresses"][0]["attached"] == 2,
                              "the credential's links attached")
        assert tunnel["credential"] is True and tunnel["origin"] == "web-2"
        done = rh.curl_url(url + "/hello", s.ca_file)
        assert done.returncode == 0 and done.stdout == "hello from web\n", done.stderr
    else:
        code = client.process.wait(timeout=60)
        assert code == 1
        assert ("this relay speaks bridge protocol 1 and does not know origins; upgrade it or "
                "use the tunnel token") in client.stderr_text()

    # Without the copied file, a credential origin says what it needs.
    empty = s.workdir / "origin3-state"
    empty.mkdir(mode=0o700)
    lonely = rh.Otunnel(s.workdir / "origin3", s.relayd.server_url, s.ca_file, port=web.port,
                        name="origin3", state_dir=empty,
                        extra_args=["--credential", state["token"]])
    s.tunnels.append(lonely)
    lonely.start()
    assert lonely.process.wait(timeout=30) == 1
    assert "copied from the owner's machine (without its token)" in lonely.stderr_text()
