"""Attacks on controld from one local user or one token holder (issue 10, docs/reliability.md
"Attacks"), as functions the tests in test_hardening_controld.py call:

- read_as_other_user: another local user tries to read controld's database (the local CA's and
  the API domain's private keys are in it) and to connect to its unix sockets.
- race_certificate_requests: one token holder binds N different CSRs to one tunnel at once.

Run from a shell, the CLI starts a real controld (SQLite, umask 000; an ACME directory that never
answers keeps the winning issuance in progress), runs both attacks and prints what they got and
controld's VmRSS before, during and after:

    OT_BUILD_DIR=$PWD/build python3 tests/integration/attacks_controld.py --requests 8
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import acme_harness  # noqa: E402
import harness  # noqa: E402
from resilience_harness import rss_kb  # noqa: E402

NOBODY = 65534


def mode_of(path):
    return os.stat(path).st_mode & 0o7777


def read_as_other_user(paths, sockets, uid=NOBODY):
    """From a child running as `uid` (needs root): tries to read each path and connect to each
    unix socket. Returns {path: "ok" | errno name}."""
    script = (
        "import errno, os, socket, sys\n"
        "for p in filter(None, sys.argv[1].split('\\n')):\n"
        "    try:\n"
        "        open(p, 'rb').read(16); print(p, 'ok')\n"
        "    except OSError as e:\n"
        "        print(p, errno.errorcode.get(e.errno, str(e.errno)))\n"
        "for p in filter(None, sys.argv[2].split('\\n')):\n"
        "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "    try:\n"
        "        s.connect(p); print(p, 'ok')\n"
        "    except OSError as e:\n"
        "        print(p, errno.errorcode.get(e.errno, str(e.errno)))\n"
        "    finally:\n"
        "        s.close()\n")

    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    out = subprocess.run([sys.executable, "-c", script, "\n".join(map(str, paths)),
                          "\n".join(map(str, sockets))], preexec_fn=drop, capture_output=True,
                         text=True, timeout=30, env={"PATH": "/usr/bin:/bin"}, cwd="/")
    assert out.returncode == 0, out.stderr
    result = {}
    for line in out.stdout.splitlines():
        path, outcome = line.rsplit(" ", 1)
        result[path] = outcome
    return result


class SilentAcme:
    """A TCP listener that accepts connections into its backlog and never answers: an ACME
    directory that keeps every issuance "in progress"."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/dir"

    def close(self):
        self.sock.close()


def stalled_acme_env(acme):
    """controld's settings for ISSUER=acme against `acme` (nothing is ever issued)."""
    return {
        "ISSUER": "acme",
        "ACME_URL": acme.url,
        "ACME_ACCOUNT_KEY_JWK": acme_harness.account_key_jwk(),
        "DNS_PROVIDER": "challtestsrv",
        "CHALLTESTSRV_URL": acme.url,
        "ISSUANCE_RETRY_DELAY_MS": "60000",
    }


def race_certificate_requests(controlds, tunnel, csrs):
    """Binds every CSR in `csrs` to `tunnel` at once (threads released together), spread over
    `controlds` in turn. Returns [(status, body as JSON or text)] in the order of `csrs`."""
    results = [None] * len(csrs)
    barrier = threading.Barrier(len(csrs))

    def bind(i):
        barrier.wait(timeout=30)
        response = controlds[i % len(controlds)].request(
            "PUT", f"/api/tunnel/{tunnel['id']}/certificate", body={"csr": csrs[i]},
            token=tunnel["token"])
        try:
            results[i] = (response.status, response.json())
        except ValueError:
            results[i] = (response.status, response.body)

    threads = [threading.Thread(target=bind, args=(i,)) for i in range(len(csrs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def tunnel_csrs(tunnel, count):
    host = tunnel["hostname"]
    return [acme_harness.make_csr([host])[0] for _ in range(count)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=8, help="different CSRs bound at once")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ot-attack-controld-"))
    os.chmod(workdir, 0o755)  # only controld's own modes stand between another user and its files
    acme = SilentAcme()
    controld = harness.Controld(workdir / "c", env={
        **stalled_acme_env(acme),
        "DATABASE_URL": f"sqlite:{workdir}/state/controld.db",
        "API_SOCKET": f"{workdir}/run/api.sock",
        "CONTROL_SOCKET": f"{workdir}/run/control.sock"})
    controld.api_socket = f"{workdir}/run/api.sock"
    try:
        controld.start(umask=0)
        pid = controld.process.pid
        print(f"controld VmRSS before: {rss_kb(pid)} kB")
        controld.request("POST", "/api/tunnel")  # a write, so -wal and -shm exist
        db = workdir / "state" / "controld.db"
        for path in (workdir / "state", db, Path(f"{db}-wal"), Path(f"{db}-shm"),
                     workdir / "run", workdir / "run" / "api.sock",
                     workdir / "run" / "control.sock"):
            print(f"  {oct(mode_of(path))} {path}")
        if os.geteuid() == 0:
            seen = read_as_other_user([db, f"{db}-wal"], [controld.api_socket,
                                                         f"{workdir}/run/control.sock"])
            for path, outcome in seen.items():
                print(f"  as uid {NOBODY}: {outcome} {path}")
        tunnel = controld.request("POST", "/api/tunnel").json()
        results = race_certificate_requests([controld], tunnel,
                                            tunnel_csrs(tunnel, args.requests))
        print(f"controld VmRSS during: {rss_kb(pid)} kB")
        statuses = sorted(status for status, _ in results)
        print(f"{args.requests} different CSRs at once: statuses {statuses}")
        database = acme_harness.Database(controld.env["DATABASE_URL"])
        jobs = [j for j in database.tunnel_jobs() if j["tunnel_id"] == tunnel["id"]]
        charged = database.query("SELECT full_at FROM rate_limits WHERE k = ?",
                                 (f"issue:{tunnel['id']}",))
        ahead_ms = int(charged[0][0]) - int(time.time() * 1000) if charged else 0
        interval_ms = 24 * 3600 * 1000 // 5  # ISSUANCE_RATE_PER_DAY=5: one charge moves it this far
        print(f"issuance jobs queued: {len(jobs)}; budget charged {ahead_ms / interval_ms:.2f} "
              f"times (full_at {ahead_ms} ms ahead, one charge = {interval_ms} ms)")
        print(f"controld VmRSS after: {rss_kb(pid)} kB")
    finally:
        controld.stop()
        acme.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
