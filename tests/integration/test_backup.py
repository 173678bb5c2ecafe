"""Export and import (docs/backup.md): a round trip SQLite -> MariaDB -> SQLite of 100,000 tunnels
over HTTP and the offline commands, hostile records refused over HTTP, an import racing API
writes, and an export that answers before the table is read. Machines on 127.0.2.x."""
import http.client
import json
import re
import subprocess
import threading
import time

import pytest

import backup_records as br
import harness

ADMIN = "admin-secret-token"
HOST = "127.0.2.1"


def start_controld(workdir, name, database_url=None, host=HOST):
    port = harness.free_port(host)
    metrics_port = harness.free_port(host)
    env = {"ADMIN_TOKEN": ADMIN, "HTTP_LISTEN": f"{host}:{port}",
           "METRICS_LISTEN": f"{host}:{metrics_port}", "OPENTUNNEL_DOMAIN": br.DOMAIN}
    c = harness.Controld(workdir / name, database_url=database_url, env=env, name=name)
    c.port = port
    c.host = host
    c.metrics_port = metrics_port
    c.start(wait=False)

    def healthy():
        if c.process.poll() is not None:
            raise RuntimeError(f"{name} exited: " + c.log_path.read_text(errors="replace")[-3000:])
        try:
            return request(c, "GET", "/health")[0] == 200
        except OSError:
            return False
    harness.wait_until(healthy, 60, f"{name} to answer /health")
    return c


def request(c, method, path, body=None, token=None, timeout=30):
    conn = http.client.HTTPConnection(c.host, c.port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def http_export(c, path):
    started = time.monotonic()
    conn = http.client.HTTPConnection(c.host, c.port, timeout=120)
    conn.request("POST", "/api/admin/export", headers={"Authorization": f"Bearer {ADMIN}"})
    response = conn.getresponse()
    assert response.status == 200
    assert response.getheader("Transfer-Encoding") == "chunked"
    with open(path, "wb") as out:
        while True:
            block = response.read(1 << 16)
            if not block:
                break
            out.write(block)
    conn.close()
    return time.monotonic() - started


def http_import(c, path, dry_run=False):
    """Streams the file as the body (chunked, no Content-Length)."""
    started = time.monotonic()
    conn = http.client.HTTPConnection(c.host, c.port, timeout=300)

    def pieces():
        with open(path, "rb") as f:
            while True:
                block = f.read(1 << 16)
                if not block:
                    return
                yield block
    target = "/api/admin/import" + ("?dry_run=1" if dry_run else "")
    conn.request("POST", target, body=pieces(), encode_chunked=True,
                 headers={"Authorization": f"Bearer {ADMIN}", "Transfer-Encoding": "chunked"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    assert response.status == 200, body
    return time.monotonic() - started, json.loads(body)


def metric(c, name, operation):
    conn = http.client.HTTPConnection(c.host, c.metrics_port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    pattern = re.compile(rf'^{name}\{{[^}}]*operation="{operation}"[^}}]*\}} (\S+)$', re.M)
    found = pattern.search(text)
    return float(found.group(1)) if found else 0.0


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def list_with_otctl(c):
    """`otctl tunnels list --json` over c's admin socket: (seconds, tunnels listed, controld's RSS
    growth in MB)."""
    socket = c.control_socket.replace("control.sock", "admin.sock")
    before = rss_mb(c.process.pid)
    started = time.monotonic()
    done = subprocess.run([str(harness.BUILD_DIR / "otctl" / "otctl"), "--socket", socket,
                           "tunnels", "list", "--json"], capture_output=True, text=True,
                          timeout=600, env={"PATH": "/usr/bin:/bin"})
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return elapsed, len(json.loads(done.stdout)), rss_mb(c.process.pid) - before


@pytest.fixture
def stop_all():
    started = []
    yield started
    for c in started:
        assert c.stop() == 0, f"{c.name} did not exit cleanly"


def test_round_trip_100k_sqlite_mariadb_sqlite(workdir, mysql_database, stop_all):
    controld = br.controld_binary()
    source = workdir / "source.json"
    br.write_file(source, br.many(100_000))
    expected = br.records_of(source)

    # 1. Into SQLite offline, out of it over HTTP.
    sqlite1 = "sqlite:" + str(workdir / "one.db")
    t_import1, done = br.offline(controld, "import", sqlite1, source)
    report = json.loads(done.stdout)
    assert report["inserted"] == 100_000 and report["rejected"] == []
    one = start_controld(workdir, "one", sqlite1)
    stop_all.append(one)
    stage1 = workdir / "stage1.json"
    t_export1 = http_export(one, stage1)
    assert br.records_of(stage1) == expected

    # 2. Into MariaDB over HTTP (the body streamed), out of it offline.
    two = start_controld(workdir, "two", mysql_database, host="127.0.2.2")
    stop_all.append(two)
    t_import2, report = http_import(two, stage1)
    assert report["inserted"] == 100_000 and report["rejected"] == []
    stage2 = workdir / "stage2.json"
    t_export2, _ = br.offline(controld, "export", mysql_database, stage2)

    # otctl lists all of them page by page (keyset pages from storage): controld never holds the
    # table, so its memory barely moves while 100,000 tunnels stream out.
    t_list, listed, rss_growth_mb = list_with_otctl(two)
    counts = json.loads(request(two, "POST", "/api/admin/stats", token=ADMIN)[1])
    assert listed == counts["tunnels"] > 0, (listed, counts)
    assert rss_growth_mb < 32, rss_growth_mb

    # 3. Into a new SQLite offline and out again: the same bytes as every stage before.
    sqlite3 = "sqlite:" + str(workdir / "three.db")
    t_import3, _ = br.offline(controld, "import", sqlite3, stage2)
    stage3 = workdir / "stage3.json"
    t_export3, _ = br.offline(controld, "export", sqlite3, stage3)
    assert stage1.read_bytes() == stage2.read_bytes() == stage3.read_bytes()
    assert stage1.read_bytes() == source.read_bytes()

    # Importing it again changes nothing.
    _, again = br.offline(controld, "import", sqlite3, stage3)
    assert json.loads(again.stdout)["unchanged"] == 100_000
    mb = br.size_mb(stage1)
    print(f"\n100000 tunnels: SQLite offline import {t_import1:.1f} s, HTTP export "
          f"{t_export1:.1f} s ({mb:.0f} MB); MariaDB HTTP import {t_import2:.1f} s, offline "
          f"export {t_export2:.1f} s; SQLite offline import {t_import3:.1f} s, offline export "
          f"{t_export3:.1f} s; otctl tunnels list {t_list:.1f} s ({listed} tunnels, controld RSS "
          f"+{rss_growth_mb:.1f} MB)")


def test_hostile_records_over_http(workdir, stop_all):
    c = start_controld(workdir, "hostile", host="127.0.2.3")
    stop_all.append(c)
    good = br.record("good")
    evil_host = br.record("evilhost")
    evil_host["hostname"] = "www.bank.example"
    apex = br.record("apex")
    apex["hostname"] = br.DOMAIN
    clear_token = br.record("cleartoken")
    clear_token["tokenHash"] = "hunter2"
    foreign_ids = br.record("foreignids")
    foreign_ids["certificate"]["identifiers"] = ["*." + br.DOMAIN]
    bad_state = br.record("badstate")
    bad_state["certificate"]["state"] = "owned"
    not_label = br.record("x")
    not_label["id"] = not_label["hostname"] = "a.b"
    path = workdir / "hostile.json"
    br.write_file(path, [(r, 1) for r in (good, evil_host, apex, clear_token, foreign_ids,
                                          bad_state, not_label)])
    text = path.read_text().replace("\n]}", ',\n{"id":"junk","revision":1,"record":"nope"}\n]}')
    path.write_text(text)

    assert request(c, "POST", "/api/admin/import", body=text.encode())[0] == 401
    assert request(c, "POST", "/api/admin/import", body=text.encode(), token="wrong")[0] == 401
    _, report = http_import(c, path)
    assert report["inserted"] == 1
    reasons = {r["id"]: r["reason"] for r in report["rejected"]}
    assert set(reasons) == {"evilhost", "apex", "cleartoken", "foreignids", "badstate", "a.b",
                            "junk"}, reasons
    assert "hostname" in reasons["evilhost"] and "hostname" in reasons["apex"]
    assert "SHA-256" in reasons["cleartoken"]
    assert "identifier" in reasons["foreignids"]
    assert "state" in reasons["badstate"]
    assert "DNS label" in reasons["a.b"]
    exported = workdir / "after.json"
    http_export(c, exported)
    assert [r["id"] for r in br.records_of(exported)] == ["good"]
    # A body that is not a backup file: 400, and what came before it stays written.
    status, body = request(c, "POST", "/api/admin/import", body=b'{"records":[' + b"x",
                           token=ADMIN)
    assert status == 400, body


def test_import_while_the_api_writes(workdir, mysql_database, stop_all):
    """Refreshing 20,000 imported rows while the API deletes 300 of them: every delete stays."""
    c = start_controld(workdir, "race", mysql_database, host="127.0.2.4")
    stop_all.append(c)
    count = 20_000
    first = workdir / "first.json"
    br.write_file(first, ((br.record(f"r{n:06d}", n), 1) for n in range(count)))
    _, report = http_import(c, first)
    assert report["inserted"] == count
    # The same tunnels, newer: rows still as imported are refreshed.
    second = workdir / "second.json"
    br.write_file(second, ((br.record(f"r{n:06d}", n, last_connected=1_800_000_000_000), 1)
                           for n in range(count)))
    # From the highest ID down while the import goes up: deletes land both before the import
    # reaches their row (which it must then skip) and after it refreshed it (the delete's
    # revision check fails, 503, and the retry deletes the refreshed row).
    victims = [f"r{n:06d}" for n in range(count - 1, 0, -(count // 300))]
    deleted = []
    errors = []

    def import_running():
        status, body = request(c, "GET", "/api/tunnel/r000000", token=br.token_of("r000000"))
        return status == 200 and json.loads(body).get("lastConnectedAt") is not None

    def delete_all():
        harness.wait_until(import_running, 120, "the import's first batch")
        for tunnel_id in victims:
            for _ in range(50):
                status, body = request(c, "DELETE", f"/api/tunnel/{tunnel_id}",
                                       token=br.token_of(tunnel_id))
                if status in (200, 204):
                    deleted.append(tunnel_id)
                    break
                if status != 503:  # a conflict with the import answers 503: retry
                    errors.append((tunnel_id, status, body))
                    break
    writer = threading.Thread(target=delete_all)
    writer.start()
    _, report = http_import(c, second)
    writer.join(120)
    assert not errors, errors[:5]
    assert sorted(deleted) == sorted(victims)
    assert report["refreshed"] + report["skipped"] == count
    assert report["rejected"] == []
    final = workdir / "final.json"
    http_export(c, final)
    by_id = {r["id"]: r["record"] for r in br.records_of(final)}
    for tunnel_id in victims:
        assert by_id[tunnel_id]["deletedAt"] is not None, tunnel_id
    refreshed = [r for i, r in by_id.items() if i not in set(victims)]
    assert all(r["lastConnectedAt"] == 1_800_000_000_000 for r in refreshed)
    print(f"\nimport racing deletes: refreshed {report['refreshed']}, skipped "
          f"{report['skipped']}")


def test_export_answers_before_the_table_is_read(workdir, stop_all):
    controld = br.controld_binary()
    database = "sqlite:" + str(workdir / "big.db")
    source = workdir / "big.json"
    br.write_file(source, br.many(100_000))
    br.offline(controld, "import", database, source)
    c = start_controld(workdir, "early", database, host="127.0.2.5")
    stop_all.append(c)
    before = metric(c, "opentunnel_db_query_duration_seconds_count", "exportTunnels")
    conn = http.client.HTTPConnection(c.host, c.port, timeout=60)
    conn.request("POST", "/api/admin/export", headers={"Authorization": f"Bearer {ADMIN}"})
    response = conn.getresponse()
    assert response.status == 200
    head = response.read(100)
    assert head.startswith(b'{"records":[')
    # Not reading: the server fills its buffer and the socket, then waits. Wait until the page
    # count stops moving (two equal readings 200 ms apart, at most 20 s).
    last, stable_since = -1.0, time.monotonic()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pages = metric(c, "opentunnel_db_query_duration_seconds_count", "exportTunnels") - before
        if pages != last:
            last, stable_since = pages, time.monotonic()
        elif time.monotonic() - stable_since > 1.0:
            break
        time.sleep(0.2)
    assert 0 < last < 100, f"{last} pages read with the client not reading"
    rest = response.read()
    conn.close()
    records = json.loads(head + rest)["records"]
    assert len(records) == 100_000
    assert metric(c, "opentunnel_db_query_duration_seconds_count", "exportTunnels") - before \
        == 201
    print(f"\nexport held at {int(last)} of 201 pages while the client did not read")
