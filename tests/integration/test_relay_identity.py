"""MACHINE_ID, REGION and STATE_DIR (docs/architecture.md, Settings both daemons share): without
MACHINE_ID controld and relayd take the ID kept in STATE_DIR/machine-id, made on the first start;
a restarted controld keeps it and so takes back the job leases its previous life held at once;
an explicit MACHINE_ID wins; every log line of both daemons ends with machine and region."""
import json
import signal
import sqlite3
import time

import pytest

import harness
import relay_harness as rh

REGION = "test-eu"


def json_lines(path):
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    assert lines
    return [json.loads(line) for line in lines]


def assert_every_line_names(path, machine):
    for record in json_lines(path):
        assert record.get("machine") == machine, record
        assert record.get("region") == REGION, record
        # machine and region come last, after the record's own fields.
        assert list(record)[-2:] == ["machine", "region"], record


@pytest.mark.waits
def test_machine_id_is_kept_in_the_state_dir_and_leases_come_back(tmp_path):
    state = tmp_path / "state"
    controld = harness.Controld(tmp_path / "controld", name="controld",
                                env={"OPENTUNNEL_DOMAIN": rh.DOMAIN, "STATE_DIR": str(state),
                                     "REGION": REGION})
    del controld.env["MACHINE_ID"]
    relay = rh.Relayd(tmp_path / "relayd", controld, name="relayd",
                      env={"STATE_DIR": str(state), "REGION": REGION, "LOG_FORMAT": "json"})
    del relay.env["MACHINE_ID"]
    try:
        controld.start()
        machine = (state / "machine-id").read_text().strip()
        assert machine.startswith("m-")
        relay.start(wait=False)  # the same STATE_DIR: the same machine
        relay.wait_log("API certificate installed")  # JSON lines: not the harness's text probe
        assert_every_line_names(relay.log_path, machine)
        assert relay.stop() == 0
        assert controld.stop() == 0
        assert_every_line_names(controld.log_path, machine)

        # A lease the previous life held when it died (a crash leaves it until it expires).
        database = tmp_path / "controld" / "controld.db"
        far = int(time.time() * 1000) + 3_600_000
        with sqlite3.connect(database) as db:
            db.execute("INSERT INTO jobs (id, kind, tunnel_id, status, attempts, queued_at,"
                       " next_run_at, lease_owner, lease_until, last_error) VALUES"
                       " ('renew:leased', 'renew', 'leased', 'pending', 1, 0, ?, ?, ?, '')",
                       (far, machine, far))
        db.close()

        controld.start()
        assert (state / "machine-id").read_text().strip() == machine
        assert_every_line_names(controld.log_path, machine)

        def lease_taken_back():
            with sqlite3.connect(database, timeout=10) as reader:
                row = reader.execute(
                    "SELECT lease_owner FROM jobs WHERE id = 'renew:leased'").fetchone()
            reader.close()
            return row[0] == ""
        harness.wait_until(lease_taken_back, 30, "controld to take its old lease back")
        assert controld.stop() == 0

        # An explicit MACHINE_ID wins over the kept one, which stays as it was.
        controld.env["MACHINE_ID"] = "explicit-1"
        controld.log_path = tmp_path / "controld" / "explicit.log"
        controld.start()
        assert controld.stop() == 0
        assert_every_line_names(controld.log_path, "explicit-1")
        assert (state / "machine-id").read_text().strip() == machine
    finally:
        relay.stop(signal.SIGKILL)
        controld.stop(signal.SIGKILL)
