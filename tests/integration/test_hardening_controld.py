"""controld against one local user or one token holder (issue 10; docs/reliability.md
"Attacks"). The attacks are in attacks_controld.py.

- Its state is private whatever the umask: the database directory 0700, the database and its
  -wal/-shm 0600, the sockets 0660 in a 0750 directory; another user reads none of it, and a
  database file others can read stops start-up with the chmod that fixes it.
"""
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

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
