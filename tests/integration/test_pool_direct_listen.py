"""Direct mode, the origin's side only (docs/pools-direct.md "The origin's side"), with the real
controld + relayd + otunnel: otunnel listens (`--profile direct=listen:127.0.27.1:PORT`) and a
stand-in for the relay's dialer opens the TCP connections to it and splices each one to relayd's
TLS port, so from the first byte on relayd runs its normal inbound path on a connection that
otunnel did not open. The links attach under the profile, carry visitors and show in
`otunnel status`; a peer that is not the relay gets a ClientHello and nothing else.
(The end-to-end test with relayd's own dialer is test_pool_direct.py, after the merge.)"""
import socket
import subprocess
import threading

import harness
import pool_harness as ph
import relay_harness as rh

LISTEN = "127.0.27.1"  # this file's loopback range


class Splice:
    """One dialed connection: TCP to otunnel's listening port, bytes copied to and from relayd."""

    def __init__(self, origin_port, relay_port):
        self.origin = socket.create_connection((LISTEN, origin_port), timeout=10)
        self.relay = socket.create_connection(("127.0.0.1", relay_port), timeout=10)
        for sock in (self.origin, self.relay):
            sock.settimeout(None)
        self.threads = [threading.Thread(target=self._copy, args=(a, b), daemon=True)
                        for a, b in ((self.origin, self.relay), (self.relay, self.origin))]
        for thread in self.threads:
            thread.start()

    @staticmethod
    def _copy(source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        for sock in (self.origin, self.relay):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self.threads:
            thread.join(timeout=10)
        self.origin.close()
        self.relay.close()


def _status_table(client):
    done = subprocess.run([str(rh.OTUNNEL), "--state-dir", str(client.state_dir), "status"],
                          capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout


def _wait_direct(client, predicate, what):
    def check():
        client._alive()
        code, document = ph.otunnel_status(client.state_dir)
        if code != 0 or not document["tunnels"]:
            return None
        profile = document["tunnels"][0]["profiles"][0]
        return profile if predicate(profile) else None
    return harness.wait_until(check, 30, what)


def test_a_listening_profile_attaches_over_connections_the_relay_side_opened(stack):
    s = stack()
    web = s.origin("web")
    port = harness.free_port(LISTEN)
    client = s.tunnel(web.port, wait=False, name="direct", extra_args=[
        "--origin", "web-1", "--profile", f"direct=listen:{LISTEN}:{port},links=2"])
    url = client.wait_url()
    profile = _wait_direct(client, lambda p: p.get("listen") is True, "the listening profile")
    assert (profile["name"], profile["index"], profile["port"]) == ("direct", 0, port)
    assert profile["addresses"][0]["address"] == f"listen {LISTEN}"
    assert profile["addresses"][0]["wanted"] == 2
    assert profile["addresses"][0]["attached"] == 0

    # A peer that is not the relay: otunnel speaks first (a TLS handshake record, its
    # ClientHello), and the garbage it gets back ends the connection; no link comes of it.
    with socket.create_connection((LISTEN, port), timeout=10) as stranger:
        first = stranger.recv(5)
        assert first[:1] == b"\x16", first
        stranger.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
        stranger.settimeout(10)
        while stranger.recv(65536):
            pass

    splices = [Splice(port, s.relayd.tls_port) for _ in range(2)]
    try:
        profile = _wait_direct(client, lambda p: p["addresses"][0]["attached"] == 2,
                               "both accepted links attached")
        assert profile["refused"] == 0
        for _ in range(5):
            done = rh.curl_url(url + "/hello", s.ca_file)
            assert done.returncode == 0, done.stderr
            assert done.stdout == "hello from web\n"
        # The status report rides the accepted links to the relay: the owner sees the profile.
        tid, token = client.tunnel_id, client.state()["token"]

        def reported():
            answer = s.relayd.api("GET", f"/api/tunnel/{tid}/status", token=token)
            assert answer.status == 200, answer
            body = answer.json()
            origin = next((o for o in body["origins"] if o["name"] == "web-1"), None)
            if origin is None or not origin.get("reported"):
                return None
            direct = origin["profiles"][0]
            return direct if direct["linksUp"] == 2 else None
        direct = harness.wait_until(reported, 30, "the relay's status shows the direct links")
        assert (direct["name"], direct["index"], direct["links"], direct["linksWanted"]) == \
            ("direct", 0, 2, 2)
        code, table = _status_table(client)
        assert code == 0
        assert "0:direct" in table and f"listen {LISTEN} port {port}" in table and "2/2" in table
    finally:
        for splice in splices:
            splice.close()
    # The links end with their connections; otunnel does not dial anything in their place.
    _wait_direct(client, lambda p: p["addresses"][0]["attached"] == 0, "the links gone")
