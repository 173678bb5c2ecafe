"""Jobs run once across machines (docs/mesh.md "Events"; the reference's "runs 30 jobs on two
servers and checks each ran once"): three machines (controld + relayd on 127.0.0.53, .54, .55) on
one MariaDB database, linked by the mesh. Thirty tunnels bind a CSR on machine A, at once, so A
queues thirty first-issuance jobs (ISSUER=local: the built-in CA signs without a network). A's
job runner is woken directly; B's and C's only by the `job_enqueued` event A broadcasts over the
mesh (their idle polls are 30 s or more apart, later than the test lasts). Every runner races for
every job; the jobs table's leases decide.

Checked from three sides: the jobs table (thirty rows, all done, each claimed exactly once:
`attempts` counts claims), the controlds' logs (one issuance attempt and one issued certificate
per tunnel, over all three machines), and the issue metrics (thirty successes in total). And the
work is spread: B and C, which were never asked, ran some of it.
"""
import concurrent.futures
import subprocess
import urllib.parse
from collections import Counter

import pytest

import harness
from test_mesh_link import linked_mesh

JOBS = 30
ADDRESSES = {"machine-a": "127.0.0.53", "machine-b": "127.0.0.54", "machine-c": "127.0.0.55"}
# One first issuance at a time per machine (ISSUANCE_CONCURRENCY 2 keeps its last slot for
# renewals): the thirty jobs queue faster than one machine drains them, as under a real burst.
# The create and issuance limits are per client address, and the test is one address.
LIMITS = {"ISSUANCE_CONCURRENCY": "2", "CREATE_RATE_BURST": "100", "ISSUANCE_RATE_BURST": "100",
          "ISSUANCE_BACKLOG_LIMIT": "1000"}


@pytest.fixture
def three_machines(tmp_path, mysql_database):
    with linked_mesh(tmp_path, ADDRESSES, {**LIMITS, "DATABASE_URL": mysql_database}) as machines:
        yield machines, mysql_database


def query(url, sql):
    """Rows of `sql` on the test's database, with the mariadb client (tab-separated)."""
    parsed = urllib.parse.urlsplit(url)
    result = subprocess.run(
        ["mariadb", f"-h{parsed.hostname}", f"-P{parsed.port}", f"-u{parsed.username}",
         f"-p{urllib.parse.unquote(parsed.password or '')}", "-N", "-B",
         parsed.path.lstrip("/"), "-e", sql],
        capture_output=True, text=True, check=True, timeout=30)
    return [line.split("\t") for line in result.stdout.splitlines()]


def issue_attempts(machine):
    """Tunnel IDs of the issuance attempts and of the certificates issued, in machine's log."""
    attempts, issued = [], []
    for line in machine.stack.controld.log_lines():
        if line.get("message") == "certificate issuance attempt":
            attempts.append(line.get("tunnel"))
        elif line.get("message") == "certificate issued":
            issued.append(line.get("tunnel"))
    return attempts, issued


def test_thirty_jobs_queued_on_one_machine_run_once_each_across_three(three_machines, tmp_path):
    machines, database = three_machines
    a = machines[0]
    controld = a.stack.controld
    tunnels = []
    for _ in range(JOBS):
        created = controld.request("POST", "/api/tunnel")
        assert created.status == 201, created
        tunnels.append(created.json())
    (tmp_path / "csrs").mkdir()
    csrs = {t["id"]: harness.make_csr(tmp_path / "csrs", [t["hostname"]])[0] for t in tunnels}

    def bind(tunnel):
        response = controld.request("PUT", f"/api/tunnel/{tunnel['id']}/certificate",
                                    body={"csr": csrs[tunnel["id"]]}, token=tunnel["token"])
        return tunnel["id"], response.status

    # All thirty at once: the jobs are queued while the runners are already busy.
    with concurrent.futures.ThreadPoolExecutor(max_workers=JOBS) as pool:
        statuses = dict(pool.map(bind, tunnels))
    assert all(status in (200, 202) for status in statuses.values()), statuses

    def all_finished():
        rows = query(database, "SELECT status, COUNT(*) FROM jobs WHERE kind = 'issue'"
                               " GROUP BY status")
        counts = {status: int(count) for status, count in rows}
        return counts if counts.get("pending", 0) == 0 and sum(counts.values()) >= JOBS else None

    counts = harness.wait_until(all_finished, 60, "every job finished")
    assert counts == {"done": JOBS}, counts

    # (The API domain's own certificate is a job too, of kind server: not one of these.)
    rows = query(database, "SELECT tunnel_id, kind, attempts, lease_owner FROM jobs"
                           " WHERE kind <> 'server'")
    assert sorted(row[0] for row in rows) == sorted(csrs)
    for tunnel_id, kind, attempts, owner in rows:
        assert (kind, attempts, owner) == ("issue", "1", ""), (tunnel_id, kind, attempts, owner)

    # A runner logs "certificate issued" just after it finished the job's row (job_attempt.cc):
    # the last job can be done in the database a moment before its line is written.
    def logged():
        per_machine, attempts, issued = {}, Counter(), Counter()
        for machine in machines:
            tried, done = issue_attempts(machine)
            per_machine[machine.name] = len(tried)
            attempts.update(tried)
            issued.update(done)
        return (per_machine, attempts, issued) if sum(issued.values()) >= JOBS else None

    per_machine, attempts, issued = harness.wait_until(logged, 10, "every issue logged")
    print(f"\njobs run per machine: {per_machine}")
    assert dict(attempts) == {tunnel_id: 1 for tunnel_id in csrs}, attempts
    assert dict(issued) == {tunnel_id: 1 for tunnel_id in csrs}, issued
    successes = sum(machine.controld_metrics().get("opentunnel_acme_attempts_total",
                                                   kind="issue", outcome="success")
                    for machine in machines)
    assert successes == JOBS

    # B and C were never asked: what they ran, the job_enqueued event woke them for.
    assert per_machine["machine-b"] + per_machine["machine-c"] >= 1, per_machine

    # Every certificate is ready, whichever machine issued it, as A's API reads it.
    for tunnel in tunnels:
        response = controld.request("GET", f"/api/tunnel/{tunnel['id']}/certificate",
                                    token=tunnel["token"])
        assert response.status == 200 and response.json()["state"] == "ready", response
