"""ACME issuance end to end: controld with ISSUER=acme against Pebble and pebble-challtestsrv
(DNS-01), with relayd and otunnel for the visitor's view.

Pebble comes from the ctest fixture `pebble` (tests/services/pebble.sh; OT_PEBBLE_ENV_FILE names
its env file). By hand:
    tests/services/pebble.sh start /tmp/pebble
    OT_PEBBLE_ENV_FILE=/tmp/pebble/env /usr/bin/python3 -m pytest -q \
        tests/integration/test_acme_e2e.py
    tests/services/pebble.sh stop /tmp/pebble
Two-process tests use the MariaDB fixture when OT_TEST_MYSQL_URL_FILE is set (ctest), else a
shared SQLite file. Each test uses its own ACME account key, and counts what Pebble did from
Pebble's own log and management API (orders, issued certificates and their names), not only from
controld's logs and metrics.

Transient/permanent failures and Retry-After against a fake CA are unit tests
(tests/controld/acme_order_test.cc); CSR refusals at the API are in test_controld_api.py.
"""
import collections
import json
import os
import signal
import time
from datetime import datetime, timezone

import pytest

import acme_harness as ah
import harness
import relay_harness as rh

DOMAIN = "tunnels.test"  # controld-only tests; the tunnel test uses relay_harness.DOMAIN


@pytest.fixture(scope="session")
def pebble():
    path = os.environ.get("OT_PEBBLE_ENV_FILE")
    if not path:
        pytest.skip("OT_PEBBLE_ENV_FILE is not set (run under ctest, or start "
                    "tests/services/pebble.sh and point it at DIR/env)")
    return ah.Pebble.from_env_file(path)  # a missing file under ctest is a failure, not a skip


@pytest.fixture
def shared_database(workdir, request):
    """One database for two controlds: the MariaDB fixture's when available, else SQLite."""
    if harness.mysql_url_or_none() is not None:
        return request.getfixturevalue("mysql_database")
    return "sqlite:" + str(workdir / "shared.db")


@pytest.fixture
def processes(workdir):
    """controlds started here, optionally without waiting for /health (wait=False), which a test
    may SIGKILL: stopped after the test, every one not killed on purpose checked for exit 0."""
    started = []

    def start(name, wait=True, **kwargs):
        instance = harness.Controld(workdir / name, name=name, **kwargs)
        started.append(instance)
        return instance.start(wait=wait)

    yield start
    for instance in started:
        killed = instance.process.returncode == -signal.SIGKILL
        code = instance.stop()
        assert killed or code == 0, f"{instance.name} exited with {code}"


def metrics_env(pebble, jwk, **overrides):
    port = harness.free_port()
    return port, ah.acme_env(pebble, jwk, METRICS_LISTEN=f"127.0.0.1:{port}", **overrides)


def wait_log(controld, message, timeout=60.0, **fields):
    """Until controld logged `message` with these field values; returns the record."""
    def seen():
        if controld.process.poll() is not None:
            raise RuntimeError(f"{controld.name} exited with {controld.process.returncode}")
        for record in ah.log_records(controld, message=message):
            if all(record.get(k) == v for k, v in fields.items()):
                return record
        return None
    return harness.wait_until(seen, timeout, f"{controld.name} to log {message!r} {fields}")


def now_ms():
    return int(time.time() * 1000)


def iso_ms(text):
    """The API's timestamps ("2026-01-02T03:04:05.000Z") in ms since the epoch."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


# ---------------------------------------------------------------------------------------------

def test_otunnel_gets_a_pebble_certificate_that_a_visitor_verifies(pebble, stack, workdir):
    root = pebble.write_root(workdir / "pebble-root.pem")
    mark = pebble.log_mark()
    # The API domain's certificate comes from Pebble too (controld's server job), so the relay,
    # otunnel and the visitor all trust Pebble's root and nothing else.
    s = stack(controld_env=ah.acme_env(pebble, ah.account_key_jwk()), start_relayd=False)
    s.controld.ca_file = str(root)
    s.ca_file = str(root)
    relay = s.start_relayd({"SHUTDOWN_DRAIN_MS": "200"})  # waits for "API certificate installed"
    s.relayd = relay  # Stack.tunnel() connects otunnel to stack.relayd
    health = relay.api("GET", "/health")  # TLS to the API domain, verified against Pebble's root
    assert health.status == 200, health

    web = s.origin("web")
    api = s.origin("api")
    # A route makes otunnel ask for <id>.<domain> and *.<id>.<domain>: two DNS-01 authorizations
    # answered under one TXT name.
    client = s.tunnel(web.port, routes={"api": api.port})
    answer = rh.curl_url(client.url + "/hello", root)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout == "hello from web\n"
    routed = rh.curl_url(f"https://api.{client.hostname}:{relay.tls_port}/hello", root)
    assert routed.returncode == 0, routed.stderr
    assert routed.stdout == "hello from api\n"

    # What the visitor was served is the tunnel's Pebble certificate, for the client's own key.
    with rh.tls_connect(relay.tls_port, client.hostname, root) as tls:
        served = ah.x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))
    assert sorted(ah.dns_names(served)) == sorted([client.hostname, "*." + client.hostname])
    assert "Pebble Intermediate CA" in served.issuer.rfc4514_string()
    state = client.state()  # otunnel's saved tunnel: its token and its own key
    key = ah.serialization.load_pem_private_key(state["key"].encode(), None)
    info = relay.api("GET", f"/api/tunnel/{client.tunnel_id}/certificate", token=state["token"])
    assert info.status == 200, info
    body = info.json()
    assert body["state"] == "ready"
    leaf = ah.chain_certificates(body["chain"])[0]
    assert leaf.serial_number == served.serial_number
    assert ah.public_key_der(leaf) == ah.public_key_der(key)
    assert body["chain"] == state["chain"]

    # Pebble's view: exactly two certificates, the API domain's and the tunnel's.
    issued = sorted(pebble.issued_names_since(mark))
    assert issued == sorted([[rh.DOMAIN], sorted([client.hostname, "*." + client.hostname])]), \
        issued


def test_renewal_fires_from_the_alarm(pebble, controld, workdir):
    # A private Pebble whose certificates live 45 s (the shared one, `pebble`, only gates the
    # test): the renewal alarm is at notAfter - 15 s (a third of the validity), and the job
    # runner looks at alarms every minute.
    private = ah.Pebble.start_private(workdir / "pebble", validity_seconds=45)
    try:
        root = private.write_root(workdir / "root.pem")
        port, env = metrics_env(private, ah.account_key_jwk())
        c = controld(env=env)
        tunnel = ah.create_tunnel(c)
        csr, _ = ah.make_csr([tunnel["hostname"]])
        ah.bind_csr(c, tunnel, csr)
        first = ah.wait_certificate(c, tunnel)
        first_leaf = ah.chain_certificates(first["chain"])[0]
        validity = first_leaf.not_valid_after - first_leaf.not_valid_before
        assert 40 <= validity.total_seconds() <= 46, validity
        first_after = iso_ms(first["notAfter"])
        assert first_after == int(first_leaf.not_valid_after.replace(
            tzinfo=timezone.utc).timestamp() * 1000)
        renew_at_ms = first_after - int(validity.total_seconds() * 1000) // 3

        def renewed():
            body = ah.certificate(c, tunnel)
            assert body["state"] == "ready", body  # the old certificate serves meanwhile
            leaf = ah.chain_certificates(body["chain"])[0]
            return body if leaf.serial_number != first_leaf.serial_number else None
        second = harness.wait_until(renewed, 150, "a renewed certificate")
        second_leaf = ah.chain_certificates(second["chain"])[0]
        second_after = iso_ms(second["notAfter"])

        assert second_after > first_after
        # The renewal certifies the same CSR: same key, same names; the new chain verifies.
        assert ah.public_key_der(second_leaf) == ah.public_key_der(first_leaf)
        assert ah.dns_names(second_leaf) == [tunnel["hostname"]]
        verify = ah.verify_chain(workdir, second["chain"], root, tunnel["hostname"])
        assert verify.returncode == 0, verify.stdout + verify.stderr

        queued = wait_log(c, "certificate renewal queued", tunnel=tunnel["id"])
        assert queued["not_after_ms"] == first_after
        done = wait_log(c, "certificate renewed", tunnel=tunnel["id"])
        assert done["not_after_ms"] == second_after
        # Not before its time: the new certificate was made after the alarm was due.
        made_at = second_leaf.not_valid_before.replace(tzinfo=timezone.utc).timestamp() * 1000
        assert made_at >= renew_at_ms - 1000, (made_at, renew_at_ms)
        assert ah.acme_attempts(port, "renew", "success") >= 1
        assert ah.acme_attempts(port, "issue", "success") == 1
        assert ah.acme_attempts(port, "renew", "failed") == 0
    finally:
        private.stop()


def test_thirty_jobs_on_two_controlds_each_run_once(pebble, processes, shared_database, workdir):
    root = pebble.write_root(workdir / "root.pem")
    jwk = ah.account_key_jwk()  # one ACME account for the service, as in production
    mark = pebble.log_mark()
    port_a, env_a = metrics_env(pebble, jwk, CREATE_RATE_PER_HOUR=0)
    port_b, env_b = metrics_env(pebble, jwk, CREATE_RATE_PER_HOUR=0)
    # Started together on a fresh database: they also race to make the API domain's key and
    # to request its certificate, which Pebble must issue once.
    a = processes("a", database_url=shared_database, env=env_a, wait=False)
    b = processes("b", database_url=shared_database, env=env_b, wait=False)
    a.wait_healthy()
    b.wait_healthy()

    tunnels = []
    names = {}
    for i in range(30):
        tunnel = ah.create_tunnel(a if i % 2 else b)
        host = tunnel["hostname"]
        # Every third asks for its wildcard too (two authorizations under one TXT name).
        names[tunnel["id"]] = [host, "*." + host] if i % 3 == 0 else [host]
        csr, _ = ah.make_csr(names[tunnel["id"]])
        ah.bind_csr(a if i % 3 else b, tunnel, csr)
        tunnels.append(tunnel)
    assert len({t["hostname"] for t in tunnels}) == 30

    ready = {}
    for tunnel in tunnels:
        ready[tunnel["id"]] = ah.wait_certificate(a, tunnel, timeout=180)
    for tunnel in tunnels:
        body = ready[tunnel["id"]]
        assert ah.certificate(b, tunnel) == body  # both processes read the same record
        verify = ah.verify_chain(workdir, body["chain"], root, tunnel["hostname"])
        assert verify.returncode == 0, verify.stdout + verify.stderr
        leaf = ah.chain_certificates(body["chain"])[0]
        assert sorted(ah.dns_names(leaf)) == sorted(names[tunnel["id"]])

    # controld's view: 30 "certificate issued", one per tunnel, shared between the processes;
    # one attempt per job in all.
    # (The line is written just after the record is made ready: the last one may lag a moment.)
    def every_issue_logged():
        records = ah.log_records(a, b, message="certificate issued")
        return records if len(records) >= len(tunnels) else None

    issued = harness.wait_until(every_issue_logged, 10, "every certificate's log line")
    by_tunnel = collections.Counter(r["tunnel"] for r in issued)
    assert by_tunnel == collections.Counter({t["id"]: 1 for t in tunnels}), by_tunnel
    processes = collections.Counter(r["_process"] for r in issued)
    assert processes["a"] > 0 and processes["b"] > 0, processes
    attempts = collections.Counter(
        r["tunnel"] for r in ah.log_records(a, b, message="certificate issuance attempt"))
    assert attempts == by_tunnel, attempts
    success = (ah.acme_attempts(port_a, "issue", "success")
               + ah.acme_attempts(port_b, "issue", "success"))
    assert success == 30
    for outcome in ("retry", "failed", "refused", "abandoned"):
        assert ah.acme_attempts(port_a, "issue", outcome) == 0, outcome
        assert ah.acme_attempts(port_b, "issue", outcome) == 0, outcome
    jobs = ah.Database(shared_database).tunnel_jobs()
    assert len(jobs) == 30, jobs
    assert {(j["status"], int(j["attempts"])) for j in jobs} == {("done", 1)}, jobs

    # Pebble's view: exactly one certificate per tunnel, and the API domain's once.
    issued_names = collections.Counter(tuple(n) for n in pebble.issued_names_since(mark))
    expected = collections.Counter({tuple(sorted(n)): 1 for n in names.values()})
    expected[(DOMAIN,)] = 1
    assert issued_names == expected, issued_names
    domain = ah.log_records(a, b, message="domain certificate issued")
    assert len(domain) == 1, domain


def test_a_controld_killed_mid_order_is_resumed_by_the_other(pebble, controld, processes,
                                                             shared_database, workdir):
    root = pebble.write_root(workdir / "root.pem")
    jwk = ah.account_key_jwk()
    db = ah.Database(shared_database)
    b = controld(name="b", database_url=shared_database, env=ah.acme_env(pebble, jwk))
    wait_log(b, "domain certificate installed")  # so "a" has no domain job of its own
    # "a" answers its challenges, then waits a minute before polling (the longest pause). Its
    # lease is 20 s instead of 2 minutes so that b's wait below is short; the rule under test (b
    # waits the lease out, then resumes the order) is the same.
    a = processes("a", database_url=shared_database,
                  env=ah.acme_env(pebble, jwk, ACME_POLL_INTERVAL_MS=600000,
                                  ISSUANCE_LEASE_MS=20000))
    tunnel = ah.create_tunnel(a)
    csr, _ = ah.make_csr([tunnel["hostname"]])
    mark = pebble.log_mark()
    bound = ah.bind_csr(a, tunnel, csr)
    assert bound["state"] == "issuing"

    # Mid-order: "a" holds the job's lease, made the order and answered the DNS-01 challenge
    # (Pebble validated it), and has not finalized.
    job_id = _certificate_id(db, tunnel)

    def held_by_a():
        row = db.job(job_id)
        return row if row and row["lease_owner"] == "a" else None
    job = harness.wait_until(held_by_a, 30, "a to hold the job")
    harness.wait_until(lambda: tunnel["hostname"] in pebble.validations_since(mark), 30,
                       "Pebble to validate a's challenge")
    assert len(pebble.orders_since(mark)) == 1
    assert pebble.issued_since(mark) == []
    a.process.kill()
    assert a.process.wait(10) == -signal.SIGKILL
    killed_at = now_ms()

    job = db.job(job["id"])
    assert job["status"] == "pending" and job["lease_owner"] == "a", job
    lease_until = int(job["lease_until"])
    assert lease_until > killed_at  # the lease outlives its holder; b must wait it out
    assert ah.certificate(b, tunnel)["state"] == "issuing"

    # b claims the job once the lease has run out: on its next idle poll (30-60 s), or at once
    # when something wakes its runner, here another tunnel's bind.
    harness.wait_until(lambda: now_ms() > lease_until, 150, "a's lease to run out")
    other = ah.create_tunnel(b)
    other_csr, _ = ah.make_csr([other["hostname"]])
    ah.bind_csr(b, other, other_csr)
    body = ah.wait_certificate(b, tunnel, timeout=60)
    ah.wait_certificate(b, other, timeout=60)

    verify = ah.verify_chain(workdir, body["chain"], root, tunnel["hostname"])
    assert verify.returncode == 0, verify.stdout + verify.stderr
    issued = wait_log(b, "certificate issued", tunnel=tunnel["id"])
    assert issued["attempt"] == 2  # a's claim counted as the first
    assert not ah.log_records(a, message="certificate issued")
    job = db.job(job["id"])
    assert job["status"] == "done" and int(job["attempts"]) == 2, job
    # Pebble: a's order was never finalized; one certificate for the tunnel, b's.
    names = collections.Counter(tuple(n) for n in pebble.issued_names_since(mark))
    assert names == collections.Counter({(tunnel["hostname"],): 1, (other["hostname"],): 1}), names
    assert len(pebble.orders_since(mark)) >= 3  # a's abandoned order, b's two


def _certificate_id(db, tunnel):
    """The certificate ID (= the first-issuance job's ID) from the stored record."""
    rows = db.query(f"SELECT record FROM tunnels WHERE id = '{tunnel['id']}'")
    return json.loads(rows[0][0])["certificate"]["id"]


HOSTILE = {
    # name: (own name, victim's name) -> what the tampered record holds: the CSR's names, the
    # certificate's identifiers, and a replacement for the record's hostname (None: its own)
    "foreign_csr": lambda own, victim: ([victim], [victim], None),
    "own_csr_foreign_identifiers": lambda own, victim: ([own], [victim], None),
    "claims_to_be_the_victim": lambda own, victim: ([victim], [victim], victim),
    "domain_wildcard": lambda own, victim: ([own, "*." + DOMAIN], [own, "*." + DOMAIN], None),
    "api_domain": lambda own, victim: ([DOMAIN], [DOMAIN], None),
}


def test_a_hostile_record_is_refused_without_asking_the_ca(pebble, controld, workdir):
    database = "sqlite:" + str(workdir / "controld.db")
    port1, env1 = metrics_env(pebble, ah.account_key_jwk())
    first = harness.Controld(workdir / "first", name="first", database_url=database,
                             env=env1).start()
    try:
        wait_log(first, "domain certificate installed")  # the restart below needs no order
        victim = ah.create_tunnel(first)
        attackers = {name: ah.create_tunnel(first) for name in HOSTILE}
        # One that got its own certificate honestly; its renewal will ask for the victim's name.
        renewer = ah.create_tunnel(first)
        renewer_csr, _ = ah.make_csr([renewer["hostname"]])
        ah.bind_csr(first, renewer, renewer_csr)
        ah.wait_certificate(first, renewer)
    finally:
        assert first.stop() == 0

    # Rewrite the stored records as a compromised writer could: a first issuance in progress
    # (no job row: the reconcile at start-up queues the missing jobs) for names that are not the
    # tunnel's own; a due renewal of a certificate whose CSR now names the victim; and the API
    # domain's certificate due, with a CSR for a name outside the domain.
    db = ah.Database(database)

    def rewrite(tunnel, change, alarm_at=None):
        (record_json, revision), = db.query("SELECT record, revision FROM tunnels WHERE id = ?",
                                            (tunnel["id"],))
        record = json.loads(record_json)
        change(record)
        issuing = 1 if record["certificate"]["state"] == "issuing" else 0
        db.query("UPDATE tunnels SET record = ?, revision = ?, issuing = ?, alarm_at = ? "
                 "WHERE id = ?", (json.dumps(record, separators=(",", ":")), revision + 1,
                                  issuing, alarm_at, tunnel["id"]))

    for n, (name, tunnel) in enumerate(attackers.items()):
        csr_names, identifiers, hostname = HOSTILE[name](tunnel["hostname"], victim["hostname"])
        csr, _ = ah.make_csr(csr_names)

        def issuing(record, n=n, csr=csr, identifiers=identifiers, hostname=hostname):
            if hostname:
                record["hostname"] = hostname
            record["certificate"] = {
                "id": f"hostile{n}", "state": "issuing", "csr": csr,
                "csrSha256": ah.csr_der_sha256(csr), "identifiers": identifiers, "chain": "",
                "notAfter": 0, "requestedAt": now_ms(), "error": ""}
        rewrite(tunnel, issuing)

    due = now_ms() - 1000
    foreign_csr, _ = ah.make_csr([victim["hostname"]])

    def renewing(record):
        assert record["certificate"]["state"] == "ready"
        record["certificate"].update({"csr": foreign_csr,
                                      "csrSha256": ah.csr_der_sha256(foreign_csr),
                                      "identifiers": [victim["hostname"]]})
        record["renewAt"] = due
    rewrite(renewer, renewing, alarm_at=due)

    evil_csr, _ = ah.make_csr(["evil.example"])
    db.query("UPDATE server_certificates SET csr_pem = ?, chain_pem = '', not_after = 0 "
             "WHERE domain = ?", (evil_csr, DOMAIN))

    mark = pebble.log_mark()
    port, env = metrics_env(pebble, ah.account_key_jwk())
    c = controld(name="second", database_url=database, env=env)
    for name, tunnel in [*attackers.items(), ("renewal", renewer)]:
        body = ah.wait_certificate(c, tunnel, states=("failed",), timeout=60)
        assert body["error"].startswith("refused: "), (name, body)
        assert not body.get("chain"), (name, body)
    wait_log(c, "domain certificate request refused before issuance")

    assert ah.acme_attempts(port, "issue", "refused") == len(HOSTILE)
    assert ah.acme_attempts(port, "renew", "refused") == 1
    assert ah.acme_attempts(port, "server", "refused") >= 1
    for kind in ("issue", "renew", "server"):
        assert ah.acme_attempts(port, kind, "success") == 0, kind
    refused = ah.log_records(c, message="certificate request refused before issuance")
    assert sorted((r["tunnel"], r["kind"]) for r in refused) == sorted(
        [(t["id"], "issue") for t in attackers.values()] + [(renewer["id"], "renew")])
    assert not ah.log_records(c, message="certificate issuance attempt")
    assert not ah.log_records(c, message="domain certificate issuance attempt")
    jobs = [j for j in db.tunnel_jobs() if j["tunnel_id"] != renewer["id"] or
            j["kind"] == "renew"]
    assert sorted((j["tunnel_id"], j["status"]) for j in jobs
                  if j["tunnel_id"] in {t["id"] for t in [*attackers.values(), renewer]}) == \
        sorted((t["id"], "failed") for t in [*attackers.values(), renewer]), jobs
    # The CA heard nothing: no order, no validation, no certificate since the restart.
    assert pebble.orders_since(mark) == []
    assert pebble.validations_since(mark) == []
    assert pebble.issued_since(mark) == []
    # The victim's record is untouched.
    assert ah.certificate(c, victim)["state"] == "none"


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_create_rate_limit_is_shared_by_two_controlds(controld, workdir, backend, request):
    # test_controld_api.py covers one process (burst, Retry-After, the unix-socket header); here
    # the GCRA state lives in the shared database, so the budget is the address's, not a
    # process's. Both TCP listeners see the same client address, 127.0.0.1.
    url = ("sqlite:" + str(workdir / "shared.db") if backend == "sqlite"
           else request.getfixturevalue("mysql_database"))
    env = {"CREATE_RATE_BURST": "2", "CREATE_RATE_PER_HOUR": "1"}
    a = controld(name="a", database_url=url, env=env)
    b = controld(name="b", database_url=url, env=env)
    assert a.request("POST", "/api/tunnel").status == 201
    assert b.request("POST", "/api/tunnel").status == 201
    for instance in (a, b):
        limited = instance.request("POST", "/api/tunnel")
        assert limited.status == 429, limited
        assert limited.headers.get("Content-Type", "").startswith("application/json")
        body = limited.json()
        assert body["_tag"] == "RateLimitedError", body
        assert isinstance(body["message"], str) and body["message"]
        # One per hour: the next token is most of an hour away.
        assert 1800 <= int(limited.headers["Retry-After"]) <= 3600, limited.headers
