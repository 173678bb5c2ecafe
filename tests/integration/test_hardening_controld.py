"""controld against one local user or one token holder (issue 10; docs/reliability.md
"Attacks"). The attacks are in attacks_controld.py.

- Its state is private whatever the umask: the database directory 0700, the database and its
  -wal/-shm 0600, the sockets 0660 in a 0750 directory; another user reads none of it, and a
  database file others can read stops start-up with the chmod that fixes it.
- Different CSRs bound to one tunnel at once: one wins, the others get 409 without spending the
  tunnel's issuance budget, on SQLite and across two controlds sharing MariaDB.
"""
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import acme_harness
import attacks_controld
import harness

NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")


def private_controld(workdir, **env):
    """A controld whose database and sockets live in directories it must create itself."""
    c = harness.Controld(workdir / "c", env={
        "DATABASE_URL": f"sqlite:{workdir}/state/controld.db",
        "API_SOCKET": f"{workdir}/run/api.sock",
        "CONTROL_SOCKET": f"{workdir}/run/control.sock",
        **env})
    c.api_socket = f"{workdir}/run/api.sock"
    return c


def test_state_and_sockets_are_private_under_umask_000(workdir):
    c = private_controld(workdir)
    try:
        c.start(umask=0)
        assert c.request("POST", "/api/tunnel").status == 201  # a write: -wal and -shm exist
        db = workdir / "state" / "controld.db"
        modes = {str(p): attacks_controld.mode_of(p) for p in (
            workdir / "state", db, Path(f"{db}-wal"), Path(f"{db}-shm"), workdir / "run",
            workdir / "run" / "api.sock", workdir / "run" / "control.sock",
            workdir / "run" / "control.sock.lock")}
        assert modes == {
            str(workdir / "state"): 0o700,
            str(db): 0o600,
            f"{db}-wal": 0o600,
            f"{db}-shm": 0o600,
            str(workdir / "run"): 0o750,
            str(workdir / "run" / "api.sock"): 0o660,
            str(workdir / "run" / "control.sock"): 0o660,
            str(workdir / "run" / "control.sock.lock"): 0o600,
        }, {k: oct(v) for k, v in modes.items()}
        assert stat.S_ISSOCK(os.stat(workdir / "run" / "control.sock").st_mode)
        # Still served after the modes changed: relayd's side of both sockets works.
        assert c.request("GET", "/health", unix=True).status == 200
        # The CA certificate is public and stays readable.
        assert attacks_controld.mode_of(c.ca_file) & 0o044 == 0o044
    finally:
        assert c.stop() == 0


@NEEDS_ROOT
def test_another_user_reads_no_state_and_reaches_no_socket():
    # A directory of its own in /tmp, open to everyone, so that only the modes controld sets
    # stand between the other user and its files (pytest's tmp_path is under a 0700 directory).
    workdir = Path(tempfile.mkdtemp(prefix="ot-hardening-"))
    os.chmod(workdir, 0o755)
    c = private_controld(workdir)
    try:
        c.start(umask=0)
        assert c.request("POST", "/api/tunnel").status == 201
        db = workdir / "state" / "controld.db"
        # The control: the other user does reach what is meant to be public.
        assert attacks_controld.read_as_other_user([c.ca_file], []) == {c.ca_file: "ok"}
        seen = attacks_controld.read_as_other_user(
            [db, f"{db}-wal", f"{db}-shm"], [c.api_socket, f"{workdir}/run/control.sock"])
        assert seen == {str(db): "EACCES", f"{db}-wal": "EACCES", f"{db}-shm": "EACCES",
                        c.api_socket: "EACCES", f"{workdir}/run/control.sock": "EACCES"}, seen
    finally:
        assert c.stop() == 0
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_a_database_others_can_read_stops_start_up(workdir, suffix):
    (workdir / "state").mkdir(mode=0o700)
    db = workdir / "state" / "controld.db"
    # An empty file is a new database to SQLite; the -wal/-shm cases have a private database.
    db.touch(mode=0o600)
    os.chmod(db, 0o600)
    exposed = Path(f"{db}{suffix}")
    exposed.touch()
    os.chmod(exposed, 0o644)
    c = private_controld(workdir)
    c.start(wait=False)
    assert c.process.wait(30) == 1
    log = c.log_path.read_text()
    assert f"{exposed} has mode 0644" in log, log
    assert f"chmod 600 {exposed}" in log, log
    assert attacks_controld.mode_of(exposed) == 0o644  # reported, not silently changed
    assert not (workdir / "run" / "api.sock").exists()  # it never served


def _race(controlds, database_url, requests=8):
    tunnel = controlds[0].request("POST", "/api/tunnel").json()
    csrs = attacks_controld.tunnel_csrs(tunnel, requests)
    results = attacks_controld.race_certificate_requests(controlds, tunnel, csrs)
    statuses = sorted(status for status, _ in results)
    assert statuses == [202] + [409] * (requests - 1), results
    winner = next(i for i, (status, _) in enumerate(results) if status == 202)
    for status, body in results:
        if status == 409:
            assert body["_tag"] == "ConflictError", body
            assert "another certificate request" in body["message"], body
    # The winner's CSR is the one bound; binding it again is free and changes nothing.
    database = acme_harness.Database(database_url)
    again = controlds[-1].request("PUT", f"/api/tunnel/{tunnel['id']}/certificate",
                                  body={"csr": csrs[winner]}, token=tunnel["token"])
    assert again.status == 202, again
    loser = controlds[-1].request("PUT", f"/api/tunnel/{tunnel['id']}/certificate",
                                  body={"csr": csrs[(winner + 1) % requests]},
                                  token=tunnel["token"])
    assert loser.status == 409, loser
    jobs = [j for j in database.tunnel_jobs() if j["tunnel_id"] == tunnel["id"]]
    assert len(jobs) == 1, jobs
    # One charge only: GCRA's full_at is one interval (a day / ISSUANCE_RATE_PER_DAY) ahead.
    rows = database.query(f"SELECT full_at FROM rate_limits WHERE k = 'issue:{tunnel['id']}'")
    assert len(rows) == 1, rows
    interval_ms = 24 * 3600 * 1000 // 5
    ahead = int(rows[0][0]) - int(time.time() * 1000)
    assert 0 < ahead <= interval_ms, (ahead, interval_ms)
    stored = database.query(f"SELECT record FROM tunnels WHERE id = '{tunnel['id']}'")
    assert acme_harness.csr_der_sha256(csrs[winner]) in stored[0][0]


def test_different_csrs_at_once_one_wins_the_others_get_409_sqlite(workdir):
    acme = attacks_controld.SilentAcme()
    c = harness.Controld(workdir / "c", env={**attacks_controld.stalled_acme_env(acme),
                                             "ISSUANCE_RATE_PER_DAY": "5",
                                             "ISSUANCE_RATE_BURST": "5"})
    try:
        c.start()
        _race([c], c.env["DATABASE_URL"])
    finally:
        assert c.stop() == 0
        acme.close()


def test_different_csrs_at_once_across_two_controlds_on_mariadb(workdir, mysql_database):
    url = mysql_database
    acme = attacks_controld.SilentAcme()
    env = {**attacks_controld.stalled_acme_env(acme), "ISSUANCE_RATE_PER_DAY": "5",
           "ISSUANCE_RATE_BURST": "5"}
    a = harness.Controld(workdir / "a", database_url=url, env=env, name="a")
    b = harness.Controld(workdir / "b", database_url=url, env=env, name="b")
    try:
        a.start()
        b.start()
        for _ in range(3):  # a few rounds: the race between the two processes varies
            _race([a, b], url)
    finally:
        assert a.stop() == 0
        assert b.stop() == 0
        acme.close()


def test_otunnel_told_another_request_is_in_progress_stops_at_once(workdir):
    """otunnel with a saved tunnel but a new key, while another key's certificate is being issued
    for that tunnel: it is refused (409), says so and exits, without waiting or retrying."""
    acme = attacks_controld.SilentAcme()
    c = harness.Controld(workdir / "c", env=attacks_controld.stalled_acme_env(acme))
    try:
        c.start()
        tunnel = c.request("POST", "/api/tunnel").json()
        csr, _ = acme_harness.make_csr([tunnel["hostname"]])
        first = c.request("PUT", f"/api/tunnel/{tunnel['id']}/certificate", body={"csr": csr},
                          token=tunnel["token"])
        assert first.status == 202, first
        server = f"http://127.0.0.1:{c.port}"
        state_dir = workdir / "otunnel"
        state_dir.mkdir(mode=0o700)
        state = state_dir / f"127.0.0.1_{c.port}.json"
        state.write_text(json.dumps({"server": server, "id": tunnel["id"],
                                     "hostname": tunnel["hostname"], "url": tunnel["url"],
                                     "token": tunnel["token"], "key": "", "csr": "",
                                     "chain": ""}))
        os.chmod(state, 0o600)
        started = time.monotonic()
        run = subprocess.run(
            [str(harness.BUILD_DIR / "client" / "otunnel"), "--server", server, "--state-dir",
             str(state_dir), "--provision-only", "--issue-timeout", "15", "http", "3000"],
            capture_output=True, text=True, timeout=60,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        elapsed = time.monotonic() - started
        assert run.returncode == 1, run
        assert f"another certificate request for tunnel {tunnel['id']} is in progress" in \
            run.stderr, run.stderr
        assert "HTTP 409" in run.stderr, run.stderr
        assert elapsed < 10, elapsed  # told at once, not after --issue-timeout
        # The first request is untouched.
        database = acme_harness.Database(c.env["DATABASE_URL"])
        stored = database.query(f"SELECT record FROM tunnels WHERE id = '{tunnel['id']}'")
        assert acme_harness.csr_der_sha256(csr) in stored[0][0]
    finally:
        assert c.stop() == 0
        acme.close()
