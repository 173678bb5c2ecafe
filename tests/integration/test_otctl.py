"""otctl against a real controld + relayd with a live otunnel bridge (docs/admin.md): stats, list,
show, bridges, reset (the bridges close and the client reconnects), delete, jobs, certs, mesh,
--json parsed, the exit codes, reflection on the admin socket, and the TCP listener with TLS and
the bearer token (a wrong token exits 4; TCP without TLS keeps controld from starting)."""
import http.client
import json
import subprocess
from pathlib import Path

import grpc

import harness

OTCTL = harness.BUILD_DIR / "otctl" / "otctl"
TOKEN = "an-operator-token-for-otctl-tests"
# This file's loopback range (others use 127.0.0.1 and 127.0.0.11-13).
TCP_HOST = "127.0.1.1"


def admin_socket(stack):
    # ADMIN_SOCKET's default: beside CONTROL_SOCKET, "control.sock" turned into "admin.sock".
    return stack.controld.control_socket.replace("control.sock", "admin.sock")


def otctl(*args, socket=None, env=None, timeout=60):
    command = [str(OTCTL)]
    if socket:
        command += ["--socket", socket]
    command += [str(a) for a in args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})


def ok_json(*args, socket):
    done = otctl(*args, "--json", socket=socket)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def bridge_ids(socket, tunnel_id):
    return {b["bridge"]["bridge_id"] for b in ok_json("bridges", tunnel_id, socket=socket)}


def test_otctl_on_the_admin_socket(stack):
    s = stack()
    web = s.origin()
    tunnel = s.tunnel(web.port, links=2)
    sock = admin_socket(s)
    tid = tunnel.tunnel_id

    # stats: the HTTP admin route's JSON, one gatherer for both.
    harness.wait_until(lambda: ok_json("stats", socket=sock)["bridges"] == 2, 30,
                       "both bridges in the stats")
    stats = ok_json("stats", socket=sock)
    assert stats["tunnels"] == 1
    assert stats["machine"]["id"] == "controld"
    human = otctl("stats", socket=sock)
    assert human.returncode == 0 and "bridges (here)" in human.stdout

    listed = ok_json("tunnels", "list", socket=sock)
    assert [t["tunnel_id"] for t in listed] == [tid]
    assert listed[0]["bridges"] == 2
    assert ok_json("tunnels", "list", "--online", socket=sock)[0]["tunnel_id"] == tid
    assert ok_json("tunnels", "list", "--prefix", "zzz", socket=sock) == []
    table = otctl("tunnels", "list", socket=sock)
    assert table.returncode == 0 and tid in table.stdout and "online" in table.stdout

    shown = ok_json("tunnels", "show", tid, socket=sock)
    assert shown["summary"]["hostname"] == tunnel.hostname
    assert json.loads(shown["record_json"])["id"] == tid
    assert otctl("tunnels", "show", "nosuchtunnel", socket=sock).returncode == 3
    assert otctl("tunnels", "show", "NOT_AN_ID", socket=sock).returncode == 2

    before = bridge_ids(sock, tid)
    assert len(before) == 2
    assert {b["machine_id"] for b in ok_json("bridges", tid, socket=sock)} == {"controld"}

    # The local CA issues for 90 days: in a year's window, not in a day's.
    harness.wait_until(lambda: [t["tunnel_id"] for t in ok_json("certs", "--within", "365d",
                                                                 socket=sock)] == [tid],
                       30, "the certificate in certs --within 365d")
    assert ok_json("certs", "--within", "1d", socket=sock) == []
    assert otctl("certs", "--within", "soon", socket=sock).returncode == 2

    jobs = ok_json("jobs", "list", socket=sock)
    assert isinstance(jobs, list)
    assert otctl("jobs", "retry", "no-such-job", socket=sock).returncode == 3

    mesh = ok_json("mesh", socket=sock)
    assert mesh["complete"] is True and mesh["machines"][0]["self"] is True

    # export / import over the Admin service, through the same Backup as the HTTP routes.
    backup = Path(s.workdir) / "backup.json"

    def export_then_dry_run():
        exported = otctl("export", backup, socket=sock)
        assert exported.returncode == 0, exported.stderr
        assert not Path(str(backup) + ".partial").exists()
        dry = ok_json("import", backup, "--dry-run", socket=sock)
        # A record controld updated itself between the export and the dry run (the attach's
        # bookkeeping runs after `attached`) is reported "skipped": export again.
        return dry if int(dry.get("skipped", "0")) == 0 else None

    dry = harness.wait_until(export_then_dry_run, 30, "an export that imports back unchanged")
    records = json.loads(backup.read_text())["records"]
    assert [r["id"] for r in records] == [tid]
    # 64-bit counts are strings in protobuf's JSON mapping (docs/admin.md).
    assert (int(dry["inserted"]), int(dry["unchanged"]), dry["rejected"]) == (0, 1, []), dry
    hostile = dict(records[0], id="other")  # a record for another ID than its hostname's
    bad = Path(s.workdir) / "hostile.json"
    bad.write_text('{"records":[\n' + json.dumps(hostile) + "\n]}\n")
    refused = otctl("import", bad, "--json", socket=sock)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    body = json.loads(refused.stdout)
    assert int(body["inserted"]) == 0 and [r["tunnel_id"] for r in body["rejected"]] == ["other"], body
    assert otctl("tunnels", "show", "other", socket=sock).returncode == 3

    # reset: relayd closes both bridges; otunnel reconnects with new ones and serves again.
    connected = tunnel.connected_count()
    reset = otctl("reset", tid, socket=sock)
    assert reset.returncode == 0, reset.stderr
    assert "2 bridge(s) closed" in reset.stdout
    tunnel.wait_connected(count=connected + 1, timeout=60)
    harness.wait_until(lambda: len(bridge_ids(sock, tid)) == 2 and not
                       (bridge_ids(sock, tid) & before), 30, "two new bridges after the reset")

    # delete: as the API's DELETE; the record stays, deleted; the list leaves it out.
    deleted = otctl("tunnels", "delete", tid, socket=sock)
    assert deleted.returncode == 0, deleted.stderr
    assert ok_json("tunnels", "show", tid, socket=sock)["summary"]["deleted"] is True
    assert ok_json("tunnels", "list", socket=sock) == []
    assert [t["tunnel_id"] for t in ok_json("tunnels", "list", "--only-deleted",
                                            socket=sock)] == [tid]
    harness.wait_until(lambda: ok_json("bridges", tid, socket=sock) == [], 30,
                       "the deleted tunnel's bridges to close")

    # Usage and reachability.
    assert otctl("tunnels", socket=sock).returncode == 2
    assert otctl("no-such-command", socket=sock).returncode == 2
    assert otctl("stats", socket=str(Path(sock).parent / "missing.sock")).returncode == 4


def test_otctl_shows_direct_targets(stack):
    """Direct mode's API against a real controld (docs/pools-direct.md): the routes, the target in
    `otctl tunnels show` and in an export, which imports back unchanged."""
    s = stack(start_relayd=False)
    sock = admin_socket(s)
    api = s.controld.request
    created = api("POST", "/api/tunnel")
    assert created.status == 201, created
    tid, token = created.json()["id"], created.json()["token"]
    origins = f"/api/tunnel/{tid}/origins"
    added = api("POST", origins, token=token,
                body={"name": "web-1", "direct": {"address": "origin.example.com:8443"}})
    assert added.status == 201, added
    assert added.json()["direct"] == {"address": "origin.example.com:8443", "links": 4}
    assert api("POST", origins, body={"name": "web-2"}, token=token).status == 201
    assert api("PUT", f"{origins}/web-2/direct", body={"address": "[2001:db8::7]:443"},
               token=token).status == 200
    assert api("PUT", f"{origins}/web-2/direct", body={"address": "[2001:db8::7]:443",
                                                       "links": 2}, token=token).status == 200
    bad = api("PUT", f"{origins}/web-1/direct", body={"address": "2001:db8::7:443"}, token=token)
    assert bad.status == 400 and bad.json()["_tag"] == "BadRequestError", bad
    assert api("PUT", f"{origins}/nope/direct", body={"address": "a.example:1"},
               token=token).status == 404
    assert api("POST", origins, body={"name": "web-3"}, token=token).status == 201
    listed = api("GET", origins, token=token).json()["origins"]
    assert [o["direct"] for o in listed] == [
        {"address": "origin.example.com:8443", "links": 4},
        {"address": "[2001:db8::7]:443", "links": 2}, None]

    shown = otctl("tunnels", "show", tid, socket=sock)
    assert shown.returncode == 0, shown.stderr
    lines = [line.split() for line in shown.stdout.splitlines()]
    assert ["origins", "web-1", "(direct:", "relays", "dial", "origin.example.com:8443,", "4",
            "links", "each)"] in lines, shown.stdout
    assert ["web-2", "(direct:", "relays", "dial", "[2001:db8::7]:443,", "2", "links",
            "each)"] in lines, shown.stdout
    assert ["web-3", "(dials", "the", "relays)"] in lines, shown.stdout

    backup = Path(s.workdir) / "direct-backup.json"
    assert otctl("export", backup, socket=sock).returncode == 0
    record = json.loads(backup.read_text())["records"][0]["record"]
    assert [o.get("direct") for o in record["origins"]] == [
        {"address": "origin.example.com:8443", "links": 4},
        {"address": "[2001:db8::7]:443", "links": 2}, None]
    dry = ok_json("import", backup, "--dry-run", socket=sock)
    assert (int(dry["inserted"]), int(dry["unchanged"]), dry["rejected"]) == (0, 1, []), dry

    # Off again: 204, also the second time.
    assert api("DELETE", f"{origins}/web-1/direct", token=token).status == 204
    assert api("DELETE", f"{origins}/web-1/direct", token=token).status == 204
    assert api("GET", origins, token=token).json()["origins"][0]["direct"] is None
    shown = otctl("tunnels", "show", tid, socket=sock)
    assert ["origins", "web-1", "(dials", "the", "relays)"] in [
        line.split() for line in shown.stdout.splitlines()], shown.stdout


def relayd_health(relay):
    connection = http.client.HTTPConnection("127.0.0.1", relay.http_port, timeout=10)
    try:
        connection.request("GET", "/health")
        response = connection.getresponse()
        return response.status, json.loads(response.read())["status"]
    finally:
        connection.close()


def test_otctl_drain_and_undo(stack):
    s = stack()
    web = s.origin()
    tunnel = s.tunnel(web.port, links=2)
    sock = admin_socket(s)
    tid = tunnel.tunnel_id
    harness.wait_until(lambda: len(bridge_ids(sock, tid)) == 2, 30, "both bridges")
    connected = tunnel.connected_count()

    # drain: relayd drains as on SIGTERM (bridges told, /health not serving) but keeps running.
    drained = otctl("drain", socket=sock)
    assert drained.returncode == 0, drained.stderr
    assert "draining" in drained.stdout
    harness.wait_until(lambda: relayd_health(s.relayd)[1] == "draining", 15, "/health: draining")
    assert relayd_health(s.relayd)[0] == 503
    harness.wait_until(lambda: bridge_ids(sock, tid) == set(), 30, "the bridges drained away")
    assert s.relayd.process.poll() is None

    # undo: serving again; otunnel, refused while draining, attaches again on its own.
    undone = otctl("drain", "--undo", socket=sock)
    assert undone.returncode == 0, undone.stderr
    harness.wait_until(lambda: relayd_health(s.relayd) == (200, "ok"), 15, "/health: ok")
    tunnel.wait_connected(count=connected + 1, timeout=90)
    harness.wait_until(lambda: len(bridge_ids(sock, tid)) == 2, 30, "both bridges back")


def test_reflection_lists_the_admin_service(stack):
    s = stack(start_relayd=False)
    channel = grpc.insecure_channel("unix:" + admin_socket(s))
    info = channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=lambda b: b, response_deserializer=lambda b: b)
    # ServerReflectionRequest{list_services: "*"}: field 7, length-delimited.
    answers = list(info(iter([b"\x3a\x01*"]), timeout=10))
    channel.close()
    assert len(answers) == 1
    assert b"opentunnel.admin.v1.Admin" in answers[0]


def make_certificate(directory):
    cert, key = directory / "admin-cert.pem", directory / "admin-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=otctl-test",
                    "-addext", f"subjectAltName=IP:{TCP_HOST}", "-keyout", str(key), "-out",
                    str(cert)], check=True, capture_output=True)
    return cert, key


def test_otctl_over_tcp_needs_tls_and_the_token(stack, workdir):
    cert, key = make_certificate(Path(workdir))
    port = harness.free_port(TCP_HOST)
    s = stack(start_relayd=False, controld_env={
        "ADMIN_LISTEN": f"{TCP_HOST}:{port}", "ADMIN_TLS_CERT": str(cert),
        "ADMIN_TLS_KEY": str(key), "ADMIN_TOKEN": TOKEN})
    address = ["--address", f"{TCP_HOST}:{port}", "--ca", str(cert)]
    good = otctl(*address, "--token", TOKEN, "stats", "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["machine"]["id"] == "controld"
    # The token from the environment, as ADMIN_TOKEN.
    assert otctl(*address, "tunnels", "list", env={"ADMIN_TOKEN": TOKEN}).returncode == 0
    wrong = otctl(*address, "--token", "not-the-token", "stats")
    assert wrong.returncode == 4
    assert "credentials" in wrong.stderr
    assert otctl(*address, "stats").returncode == 2  # --address without a token: usage
    # A certificate otctl does not trust: cannot reach (the handshake fails).
    other_dir = Path(workdir) / "other"
    other_dir.mkdir()
    other, _ = make_certificate(other_dir)
    assert otctl("--address", f"{TCP_HOST}:{port}", "--ca", str(other), "--token", TOKEN,
                 "stats").returncode == 4
    # The unix socket still needs no token.
    assert otctl("stats", socket=admin_socket(s)).returncode == 0


def test_controld_refuses_tcp_without_tls_or_token(workdir):
    port = harness.free_port(TCP_HOST)
    for extra, needle in (({}, "ADMIN_LISTEN needs TLS"),
                          ({"ADMIN_TLS_CERT": "/nonexistent/c.pem",
                            "ADMIN_TLS_KEY": "/nonexistent/k.pem"}, "ADMIN_LISTEN needs ADMIN_TOKEN")):
        controld = harness.Controld(Path(workdir) / f"refused{len(extra)}", env={
            "ADMIN_LISTEN": f"{TCP_HOST}:{port}", **extra})
        controld.start(wait=False)
        assert controld.process.wait(30) == 2
        controld.log.close()
        assert needle in controld.log_path.read_text()
