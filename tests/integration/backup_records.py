"""Backup files for test_backup.py and tests/bench/backup_bench.py: valid records written the way
controld's toJson writes them (same keys, same order, compact), with tokens we know, and the
offline `controld export` / `controld import` commands timed."""
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

DOMAIN = "tunnels.test"


def token_of(tunnel_id):
    return "tok-" + tunnel_id


def record(tunnel_id, n=0, last_connected=None, deleted_at=None):
    """A stored record as controld writes it (controld/store/tunnel_record.cc toJson)."""
    return {
        "id": tunnel_id,
        "hostname": f"{tunnel_id}.{DOMAIN}",
        "tokenHash": hashlib.sha256(token_of(tunnel_id).encode()).hexdigest(),
        "createdAt": 1_700_000_000_000 + n,
        "lastConnectedAt": last_connected,
        "certificate": {"id": "", "state": "none", "csr": "", "csrSha256": "", "identifiers": [],
                        "chain": "", "notAfter": 0, "requestedAt": 0, "error": ""},
        "renewAt": None,
        "deletedAt": deleted_at,
    }


def line(rec, revision=1):
    return json.dumps({"id": rec["id"], "revision": revision, "record": rec},
                      separators=(",", ":"))


def write_file(path, records):
    """records: (record, revision) pairs; the layout controld's BackupWriter uses."""
    with open(path, "w") as out:
        out.write('{"records":[\n')
        first = True
        for rec, revision in records:
            if not first:
                out.write(",\n")
            first = False
            out.write(line(rec, revision))
        out.write("\n]}\n")


def many(count, prefix="t"):
    """`count` valid records: every 10th deleted, every 7th connected once."""
    for n in range(count):
        tunnel_id = f"{prefix}{n:07d}"
        yield record(tunnel_id, n,
                     last_connected=1_700_000_500_000 + n if n % 7 == 0 else None,
                     deleted_at=1_700_000_900_000 + n if n % 10 == 0 else None), 1 + n % 3


def offline(controld, command, database_url, *args, domain=DOMAIN, check=True):
    """Runs `controld <command> ...` against database_url; (seconds, completed process)."""
    env = {"PATH": "/usr/bin:/bin", "DATABASE_URL": database_url, "OPENTUNNEL_DOMAIN": domain}
    started = time.monotonic()
    done = subprocess.run([str(controld), command, *map(str, args)], env=env,
                          capture_output=True, timeout=600)
    elapsed = time.monotonic() - started
    if check and done.returncode != 0:
        raise AssertionError(f"controld {command} exited {done.returncode}: "
                             f"{done.stderr.decode(errors='replace')[-2000:]}")
    return elapsed, done


def records_of(path):
    with open(path) as f:
        return json.load(f)["records"]


def size_mb(path):
    return os.path.getsize(path) / 1e6


def controld_binary():
    return Path(os.environ["OT_BUILD_DIR"]) / "controld" / "controld"
