"""Live status of a pooled tunnel (docs/pools-status.md) with real controld + relayd + two otunnel
origins, one of them with a second profile nobody listens on (127.0.20.x): the API and
`otctl status` show the links per origin and profile and the dialer's error and wait for the
dead profile; with every otunnel stopped "no links attached"; with relayd stopped "relay
unreachable"."""
import glob
import json
import subprocess
import urllib.request

import harness
import relay_harness as rh

BAD_ADDRESS = "127.0.20.1"  # this file's loopback range: nothing listens here
OTCTL = rh.OTUNNEL.parent.parent / "otctl" / "otctl"


def _token(client):
    for path in glob.glob(str(client.state_dir / "*.json")):
        with open(path) as f:
            document = json.load(f)
        if document.get("token"):
            return document["token"]
    raise AssertionError("no tunnel state with a token")


def _status(s, tunnel_id, token):
    request = urllib.request.Request(
        f"http://127.0.0.1:{s.controld.port}/api/tunnel/{tunnel_id}/status",
        headers={"Authorization": f"Bearer {token}", "Host": rh.DOMAIN})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def _wait(s, tunnel_id, token, predicate, what):
    def check():
        body = _status(s, tunnel_id, token)
        return body if predicate(body) else None
    return harness.wait_until(check, 40, what)


def _origin(body, name):
    return next(o for o in body["origins"] if o["name"] == name)


def test_status_shows_links_per_origin_and_the_dead_profile(stack):
    s = stack()
    web = s.origin("web")
    dead_port = harness.free_port(BAD_ADDRESS)
    relay = f"{rh.DOMAIN}:{s.relayd.tls_port}"
    first = s.tunnel(web.port, wait=False, name="first", extra_args=[
        "--origin", "web-1", "--profile", f"good={relay},links=2",
        "--profile", f"bad={BAD_ADDRESS}:{dead_port},links=2"])
    first.wait_url()
    tid, token = first.tunnel_id, _token(first)
    # A second origin of the same tunnel: the same state (token), its own name and profile.
    second = rh.Otunnel(s.workdir / "second", s.relayd.server_url, s.ca_file, port=web.port,
                        name="second", state_dir=first.state_dir,
                        extra_args=["--origin", "web-2", "--profile", f"main={relay},links=3"])
    s.tunnels.append(second)  # stopped by the stack's close, whatever happens here
    second.start()

    def settled(body):
        try:
            good = _origin(body, "web-1")["profiles"]
            other = _origin(body, "web-2")["profiles"]
        except StopIteration:
            return False
        # The relay's own counts, and each origin's report sent after its last link attached
        # (up to a tick later: the counts alone come first).
        return (other[0]["links"] == 3 and other[0]["linksWanted"] == 3
                and other[0]["linksUp"] == 3 and len(good) == 2 and good[0]["links"] == 2
                and good[0]["linksUp"] == 2 and good[1]["lastError"] != ""
                and good[1]["nextTryMs"] > 0)
    body = _wait(s, tid, token, settled, "web-1's good profile up, its bad one reported")
    assert body["health"] == "healthy"
    assert body["summary"] == "healthy (5 links up)"
    assert body["links"] == 5
    web2 = _origin(body, "web-2")
    assert web2["links"] == 3
    assert [(p["name"], p["links"], p["linksWanted"], p["lastError"]) for p in web2["profiles"]] \
        == [("main", 3, 3, "")]
    web1 = _origin(body, "web-1")
    assert web1["reported"] is True
    good, bad = web1["profiles"]
    assert (good["name"], good["index"], good["links"], good["linksWanted"], good["linksUp"]) == \
        ("good", 0, 2, 2, 2)
    assert (bad["name"], bad["index"], bad["links"], bad["linksWanted"], bad["linksUp"]) == \
        ("bad", 1, 0, 2, 0)
    assert "refused" in bad["lastError"]

    done = subprocess.run([str(OTCTL), "--socket",
                           s.controld.control_socket.replace("control.sock", "admin.sock"),
                           "status", tid], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "healthy (5 links up)" in done.stdout
    assert "refused" in done.stdout

    first.stop()
    second.stop()
    body = _wait(s, tid, token, lambda b: b["links"] == 0, "no links once otunnel stopped")
    assert body["health"] == "no_links"
    assert body["summary"] == "no links attached"

    s.relayd.stop()
    body = _wait(s, tid, token, lambda b: b["health"] == "relay_unreachable",
                 "relay unreachable once relayd stopped")
    assert body["summary"] == "relay unreachable"
