"""The HTTP API of a real controld process, over real sockets (TCP and the unix socket)."""
import json
import time
import subprocess
import threading

import pytest

import harness


def create(controld, **kwargs):
    response = controld.request("POST", "/api/tunnel", **kwargs)
    assert response.status == 201, response
    return response.json()


def wait_ready(controld, tunnel):
    def ready():
        r = controld.request("GET", f"/api/tunnel/{tunnel['id']}/certificate", token=tunnel["token"])
        assert r.status == 200, r
        body = r.json()
        assert body["state"] in ("issuing", "ready"), body
        return body if body["state"] == "ready" else None
    return harness.wait_until(ready, 30, "the certificate to be ready")


def test_tunnel_lifecycle_and_local_ca_chain_verifies(controld, workdir):
    c = controld()
    tunnel = create(c)
    assert tunnel["hostname"] == f"{tunnel['id']}.tunnels.test"
    assert len(tunnel["token"]) >= 40

    info = c.request("GET", f"/api/tunnel/{tunnel['id']}", token=tunnel["token"])
    assert info.status == 200
    assert info.json()["state"] == "offline"
    assert info.json()["certificate"]["state"] == "none"

    names = [tunnel["hostname"], "*." + tunnel["hostname"]]
    csr, _ = harness.make_csr(workdir, names)
    bound = c.request("PUT", f"/api/tunnel/{tunnel['id']}/certificate", body={"csr": csr},
                      token=tunnel["token"])
    assert bound.status == 202, bound
    assert bound.json()["state"] == "issuing"

    certificate = wait_ready(c, tunnel)
    chain = workdir / "chain.pem"
    chain.write_text(certificate["chain"])
    verify = subprocess.run(["openssl", "verify", "-CAfile", c.ca_file, "-purpose", "sslserver",
                             "-verify_hostname", "x." + tunnel["hostname"], str(chain)],
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr

    # Binding the same CSR again answers as before and queues nothing new.
    again = c.request("PUT", f"/api/tunnel/{tunnel['id']}/certificate", body={"csr": csr},
                      token=tunnel["token"])
    assert again.status == 200, again
    assert again.json()["state"] == "ready"

    deleted = c.request("DELETE", f"/api/tunnel/{tunnel['id']}", token=tunnel["token"])
    assert deleted.status == 200, deleted
    gone = c.request("GET", f"/api/tunnel/{tunnel['id']}", token=tunnel["token"])
    assert gone.status == 404
    assert gone.json()["_tag"] == "NotFoundError"


def test_every_error_status_with_a_json_body(controld, workdir):
    c = controld(env={"CREATE_RATE_BURST": "3", "CREATE_RATE_PER_HOUR": "1"})
    tunnel = create(c, body={"id": "fixed-name"})
    assert tunnel["id"] == "fixed-name"

    def error(response, status, tag):
        assert response.status == status, response
        assert response.headers.get("Content-Type", "").startswith("application/json")
        body = response.json()
        assert body["_tag"] == tag, body
        assert isinstance(body["message"], str) and body["message"]
        return response

    error(c.request("POST", "/api/tunnel", raw=b"{not json", headers={
        "Content-Type": "application/json"}), 400, "BadRequestError")
    error(c.request("POST", "/api/tunnel", body={"id": "Not A Label"}), 400, "BadRequestError")
    error(c.request("GET", "/api/tunnel/fixed-name"), 401, "UnauthorizedError")
    error(c.request("GET", "/api/tunnel/fixed-name", token="wrong"), 401, "UnauthorizedError")
    error(c.request("GET", "/api/tunnel/nosuchtunnel", token="x"), 404, "NotFoundError")
    error(c.request("GET", "/api/nothing-here"), 404, "NotFoundError")
    error(c.request("PATCH", "/api/tunnel/fixed-name", token=tunnel["token"]), 405,
          "MethodNotAllowedError")
    error(c.request("POST", "/api/tunnel", body={"id": "fixed-name"}), 409, "ConflictError")
    error(c.request("POST", "/api/tunnel", raw=b"{}" + b" " * (64 * 1024), headers={
        "Content-Type": "application/json"}), 413, "PayloadTooLargeError")
    error(c.request("POST", "/api/tunnel", raw=b"id=x", headers={
        "Content-Type": "application/x-www-form-urlencoded"}), 415, "UnsupportedMediaTypeError")
    # The burst is 3: fixed-name, the taken ID (charged before the conflict) and one more.
    create(c)
    limited = error(c.request("POST", "/api/tunnel"), 429, "RateLimitedError")
    assert int(limited.headers["Retry-After"]) > 0

    # Hostile CSRs never reach the issuer: another tunnel's name, the domain's wildcard.
    for names in (["other.tunnels.test"], ["fixed-name.tunnels.test", "*.tunnels.test"]):
        csr, _ = harness.make_csr(workdir, names, cn="fixed-name.tunnels.test")
        error(c.request("PUT", "/api/tunnel/fixed-name/certificate", body={"csr": csr},
                        token=tunnel["token"]), 400, "BadRequestError")
    error(c.request("PUT", "/api/tunnel/fixed-name/certificate", body={"csr": "garbage"},
                    token=tunnel["token"]), 400, "BadRequestError")
    error(c.request("PUT", "/api/tunnel/fixed-name/certificate", body={"nocsr": 1},
                    token=tunnel["token"]), 400, "BadRequestError")


def test_storage_down_answers_503(controld, workdir):
    # A MySQL URL on a port where nothing listens: controld must not start serving at all.
    port = harness.free_port()
    c = harness.Controld(workdir / "down", name="down", database_url=f"mysql://u:p@127.0.0.1:{port}/x",
                         env={"STARTUP_DB_TIMEOUT_MS": "1500"})
    started = time.monotonic()
    c.start(wait=False)
    assert c.process.wait(30) == 1
    elapsed = time.monotonic() - started
    log = c.log_path.read_text()
    assert "the database is not available" in log
    assert "p@" not in log  # the password never reaches the log
    # The wait ends at the deadline (the last sleep is cut to it), not a whole backoff step
    # later: with 200, 400, 800 ms sleeps the next one would end at 3000 ms.
    waited = [line["waited_ms"] for line in c.log_lines()
              if line.get("message", "").startswith("the database is not available")]
    assert len(waited) == 1 and 1500 <= waited[0] < 1500 + 500, waited
    assert elapsed < 1.5 + 1.0, elapsed


def test_client_address_header_trusted_only_on_the_unix_socket(controld):
    c = controld(env={"CREATE_RATE_BURST": "1", "CREATE_RATE_PER_HOUR": "1"})
    spoof = {"X-OpenTunnel-Client-Address": "203.0.113.7"}
    # Over TCP the header is ignored: both requests count against 127.0.0.1.
    assert c.request("POST", "/api/tunnel", headers=spoof).status == 201
    assert c.request("POST", "/api/tunnel", headers={
        "X-OpenTunnel-Client-Address": "203.0.113.8"}).status == 429
    # On the unix socket (relayd's), each named address has its own budget.
    assert c.request("POST", "/api/tunnel", headers=spoof, unix=True).status == 201
    assert c.request("POST", "/api/tunnel", headers=spoof, unix=True).status == 429
    assert c.request("POST", "/api/tunnel", unix=True, headers={
        "X-OpenTunnel-Client-Address": "2001:db8::1"}).status == 201
    # Same /64: same budget.
    assert c.request("POST", "/api/tunnel", unix=True, headers={
        "X-OpenTunnel-Client-Address": "2001:db8::2"}).status == 429


def test_openapi_describes_exactly_the_served_routes(controld):
    c = controld()
    document = c.request("GET", "/openapi.json")
    assert document.status == 200
    spec = document.json()
    assert spec["openapi"].startswith("3.")
    methods = {"get", "put", "post", "delete", "patch"}
    documented = set()
    for path, item in spec["paths"].items():
        for method in item:
            if method in methods:
                documented.add((method.upper(), path))
    assert ("POST", "/api/tunnel") in documented
    assert ("GET", "/health") in documented
    # Every documented operation is routed (never the router's own 404/405)...
    for method, path in documented:
        concrete = path.replace("{id}", "some-tunnel")
        r = c.request(method, concrete, token="t",
                      body={} if method in ("POST", "PUT") else None)
        if r.status in (404, 405):
            tag = r.json()["_tag"]
            assert not (r.status == 405 or "route" in r.json()["message"].lower()), (method, path, r)
            assert tag == "NotFoundError"
    # ...and every other method on a documented path is a 405.
    for method, path in documented:
        for other in methods - {m.lower() for m, p in documented if p == path}:
            r = c.request(other.upper(), path.replace("{id}", "x"))
            assert r.status == 405, (other, path, r)


def test_metrics_pass_promtool(controld):
    port = harness.free_port()
    c = controld(env={"METRICS_LISTEN": f"127.0.0.1:{port}", "CREATE_RATE_BURST": "1"})
    tunnel = create(c)
    # The second create from this address is over the burst of one.
    limited = c.request("POST", "/api/tunnel")
    assert limited.status == 429, limited
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    text = response.read()
    assert response.status == 200
    assert b"opentunnel_process_open_fds" in text
    lines = text.decode().splitlines()
    assert 'opentunnel_db_query_duration_seconds_bucket{operation="insertTunnel",le="+Inf"} 1' \
        in lines, text
    assert 'opentunnel_db_errors_total{operation="insertTunnel"} 0' in lines, text
    assert any(line.startswith('opentunnel_certificate_jobs{status="pending"} ') for line in lines)
    assert any(line.startswith('opentunnel_certificate_jobs{status="failed"} ') for line in lines)
    assert 'opentunnel_requests_limited_total{limit="create_rate"} 1' in lines, text
    assert 'opentunnel_requests_limited_total{limit="issuance_rate"} 0' in lines, text
    assert 'opentunnel_requests_limited_total{limit="issuance_backlog"} 0' in lines, text
    # No label carries a tunnel ID.
    assert tunnel["id"].encode() not in text
    assert b'opentunnel_db_pool_connections{state="in_use"}' in text
    assert b'opentunnel_db_pool_connections{state="idle"}' in text
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_two_controlds_on_one_database_race_on_one_tunnel(controld, workdir, backend, request):
    url = ("sqlite:" + str(workdir / "shared.db") if backend == "sqlite"
           else request.getfixturevalue("mysql_database"))
    a = controld(name="a", database_url=url)
    b = controld(name="b", database_url=url)
    tunnel = create(a)
    keys = {}
    csrs = []
    for i in range(6):
        (workdir / f"k{i}").mkdir()
        csr, key = harness.make_csr(workdir / f"k{i}", [tunnel["hostname"]])
        csrs.append(csr)
        keys[csr] = public_key(["openssl", "pkey", "-in", str(key), "-pubout"])
    results = []

    def bind(instance, csr):
        r = instance.request("PUT", f"/api/tunnel/{tunnel['id']}/certificate", body={"csr": csr},
                             token=tunnel["token"])
        results.append((r.status, csr))

    threads = [threading.Thread(target=bind, args=(a if i % 2 else b, csr))
               for i, csr in enumerate(csrs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(s for s, _ in results)
    # Every answer is a success or a refusal (another CSR's issuance in progress, the rate, a
    # lost race); never a 500.
    assert set(statuses) <= {202, 409, 429, 503}, statuses
    accepted = {keys[csr] for status, csr in results if status == 202}
    assert accepted
    # Both processes end up with one record, whose certificate is for a key of an accepted bind:
    # no write was lost underneath another.
    final_a = wait_ready(a, tunnel)
    final_b = wait_ready(b, tunnel)
    assert final_a == final_b
    leaf = workdir / "leaf.pem"
    leaf.write_text(final_a["chain"])
    assert public_key(["openssl", "x509", "-in", str(leaf), "-noout", "-pubkey"]) in accepted


def public_key(command):
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()
