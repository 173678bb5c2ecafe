"""otunnel's provisioning against the real controld (plain-TCP API, local CA): a tunnel, a key
and CSR made by the client, the certificate issued for them, the state kept between runs, and
exit code 2 for bad input. `--provision-only` stops before the bridges, so no relay is needed.
"""
import json
import os
import re
import stat
import subprocess
from pathlib import Path

import harness

OTUNNEL = harness.BUILD_DIR / "client" / "otunnel"
DOMAIN = "tunnels.test"


def run_otunnel(args, timeout=60, env=None):
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    full_env.update(env or {})
    return subprocess.run([str(OTUNNEL), *args], capture_output=True, text=True, timeout=timeout,
                          env=full_env)


def provision(c, state_dir, *args, mode="http", port="3000", after=()):
    return run_otunnel(["--server", f"http://127.0.0.1:{c.port}", "--state-dir", str(state_dir),
                        "--provision-only", "--issue-timeout", "30", *args, mode, port, *after])


def state_file(c, state_dir):
    return Path(state_dir) / f"127.0.0.1_{c.port}.json"


def load_state(c, state_dir):
    return json.loads(state_file(c, state_dir).read_text())


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def openssl(*args, data=None):
    return subprocess.run(["openssl", *args], input=data, capture_output=True, text=True,
                          check=True).stdout


def san_of(chain_path):
    text = openssl("x509", "-in", str(chain_path), "-noout", "-ext", "subjectAltName")
    return sorted(re.findall(r"DNS:([^,\s]+)", text))


def test_provision_only_issues_a_certificate_and_keeps_the_state(controld, tmp_path):
    c = controld()
    state_dir = tmp_path / "state" / "otunnel"
    first = provision(c, state_dir)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert len(lines) == 1, first.stdout
    match = re.fullmatch(rf"https://([a-z0-9-]+)\.{re.escape(DOMAIN)}:{c.port}", lines[0])
    assert match, lines[0]
    tunnel_id = match.group(1)
    assert f"otunnel: created tunnel {tunnel_id}" in first.stderr
    assert "otunnel: issuing certificate..." in first.stderr

    path = state_file(c, state_dir)
    assert mode_of(path) == 0o600
    assert mode_of(state_dir) == 0o700
    state = load_state(c, state_dir)
    assert state["id"] == tunnel_id
    assert state["hostname"] == f"{tunnel_id}.{DOMAIN}"
    assert state["server"] == f"http://127.0.0.1:{c.port}"
    assert state["token"]
    assert state["key"].startswith("-----BEGIN PRIVATE KEY-----")
    assert state["csr"].startswith("-----BEGIN CERTIFICATE REQUEST-----")
    assert state["chain"].startswith("-----BEGIN CERTIFICATE-----")

    # The chain verifies against controld's local CA, names exactly the tunnel and is for the key.
    chain = tmp_path / "chain.pem"
    chain.write_text(state["chain"])
    verified = subprocess.run(["openssl", "verify", "-CAfile", c.ca_file, "-untrusted",
                               str(chain), str(chain)], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert san_of(chain) == [state["hostname"]]
    cert_key = openssl("x509", "-in", str(chain), "-noout", "-pubkey")
    own_key = openssl("pkey", "-pubout", data=state["key"])
    assert cert_key == own_key

    info = c.request("GET", f"/api/tunnel/{tunnel_id}", token=state["token"])
    assert info.status == 200
    assert info.json()["certificate"]["state"] == "ready"

    # A second run reuses the tunnel, the key and the certificate: nothing new is created.
    second = provision(c, state_dir)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert "created tunnel" not in second.stderr
    assert "issuing certificate" not in second.stderr
    again = load_state(c, state_dir)
    assert again["id"] == tunnel_id
    assert again["token"] == state["token"]
    assert again["key"] == state["key"]
    assert again["csr"] == state["csr"]
    assert again["chain"] == state["chain"]


def test_a_deleted_tunnel_is_replaced_and_said_so(controld, tmp_path):
    c = controld()
    state_dir = tmp_path / "state"
    first = provision(c, state_dir)
    assert first.returncode == 0, first.stderr
    old = load_state(c, state_dir)
    deleted = c.request("DELETE", f"/api/tunnel/{old['id']}", token=old["token"])
    assert deleted.status == 200

    second = provision(c, state_dir)
    assert second.returncode == 0, second.stderr
    new = load_state(c, state_dir)
    assert new["id"] != old["id"]
    assert new["key"] != old["key"]
    assert f"the saved tunnel {old['id']} is no longer usable" in second.stderr
    assert f"otunnel: created tunnel {new['id']}" in second.stderr
    assert second.stdout.strip() == f"https://{new['id']}.{DOMAIN}:{c.port}"


def test_wanted_id_routes_and_tls_mode(controld, tmp_path):
    c = controld()
    state_dir = tmp_path / "state"
    result = provision(c, state_dir, "--id", "myapp", mode="tls", port="8443",
                       after=["--route", "api=4000"])
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"https://myapp.{DOMAIN}:{c.port}\n"
    state = load_state(c, state_dir)
    assert state["id"] == "myapp"

    # Named routes are <route>.<hostname>: the certificate covers them with the wildcard.
    key_file = state_dir / "myapp.key.pem"
    chain_file = state_dir / "myapp.chain.pem"
    assert f"otunnel: key {key_file}" in result.stderr
    assert f"otunnel: certificate chain {chain_file}" in result.stderr
    assert mode_of(key_file) == 0o600
    assert mode_of(chain_file) == 0o600
    assert key_file.read_text() == state["key"]
    assert chain_file.read_text() == state["chain"]
    assert san_of(chain_file) == sorted([f"myapp.{DOMAIN}", f"*.myapp.{DOMAIN}"])

    # Without routes the wildcard certificate still serves: no new issuance.
    plain = provision(c, state_dir, mode="http")
    assert plain.returncode == 0, plain.stderr
    assert "issuing certificate" not in plain.stderr
    assert load_state(c, state_dir)["chain"] == state["chain"]

    # The ID is taken now: another state directory asking for it gets the server's message.
    taken = provision(c, tmp_path / "other", "--id", "myapp")
    assert taken.returncode == 1
    assert taken.stdout == ""
    assert "cannot create a tunnel" in taken.stderr
    assert "409 ConflictError" in taken.stderr


def test_bad_input_exits_2_without_touching_the_server(tmp_path):
    state_dir = tmp_path / "state"
    server = "http://127.0.0.1:9"  # nothing may be contacted; a refused port would say so anyway
    cases = [
        ["http", "0"],
        ["http", "70000"],
        ["http", "web"],
        ["http", "3000", "--route", "api"],
        ["http", "3000", "--route", "API=4000"],
        ["http", "3000", "--route", "api=0"],
        ["http", "3000", "--route", "api=4000", "--route", "api=4001"],
        ["--id", "-bad", "http", "3000"],
        ["--links", "0", "http", "3000"],
        ["ftp", "3000"],
        [],
    ]
    many = []
    for i in range(128):
        many += ["--route", f"r{i}=4000"]
    cases.append(["http", "3000", *many])
    for args in cases:
        result = run_otunnel(["--server", server, "--state-dir", str(state_dir),
                              "--provision-only", *args])
        assert result.returncode == 2, (args, result.stderr)
        assert result.stdout == "", args
        assert result.stderr.strip(), args
    bad_url = run_otunnel(["--server", "ftp://x", "--state-dir", str(state_dir), "http", "3000"])
    assert bad_url.returncode == 2
    assert bad_url.stderr.startswith("otunnel: server URL \"ftp://x\"")
    route = run_otunnel(["--state-dir", str(state_dir), "http", "3000", "--route", "a=b=c"])
    assert route.returncode == 2
    assert route.stderr == 'otunnel: --route a: port "b=c" must be a number from 1 to 65535\n'
    assert not state_dir.exists()


def test_server_errors_exit_1_with_a_message(controld, tmp_path):
    unreachable = run_otunnel(["--server", f"http://127.0.0.1:{harness.free_port()}",
                               "--state-dir", str(tmp_path / "s"), "--provision-only", "http",
                               "3000"])
    assert unreachable.returncode == 1
    assert unreachable.stdout == ""
    assert unreachable.stderr.startswith("otunnel: cannot create a tunnel: cannot reach "
                                         "http://127.0.0.1:")

    # A corrupt state file is reported, not replaced: the token in it may be the only copy.
    c = controld()
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    corrupt = state_file(c, state_dir)
    corrupt.write_text("{not json")
    result = provision(c, state_dir)
    assert result.returncode == 1
    assert f"the saved tunnel {corrupt} is corrupt" in result.stderr
    assert corrupt.read_text() == "{not json"
