"""ACME issuance against Pebble for integration tests: the Pebble + challtestsrv pair that
tests/services/pebble.sh starts (the ctest fixture `pebble`, or a private one), controld's
settings for ISSUER=acme against it, keys and CSRs made the way a client makes them, and what
Pebble itself says it did (its log and its management API), so a test can count orders and
certificates from the CA's side, not only from controld's.

Built on harness.py and relay_harness.py (imported, never changed). Every wait polls with a
deadline; nothing sleeps for a fixed time.
"""
import json
import os
import re
import shutil
import ssl
import subprocess
import urllib.request
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import harness
import relay_harness

ROOT = Path(__file__).resolve().parents[2]
PEBBLE_SH = ROOT / "tests" / "services" / "pebble.sh"
ENV_KEYS = ("ACME_URL", "ACME_CA_BUNDLE", "ACME_EAB_KID", "ACME_EAB_HMAC_KEY", "CHALLTESTSRV_URL",
            "ACME_DNS_RESOLVER", "PEBBLE_MANAGEMENT_URL", "PEBBLE_DIR")


def read_env_file(path):
    values = {}
    for line in Path(path).read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    missing = [k for k in ENV_KEYS if k not in values]
    assert not missing, f"{path} lacks {missing}"
    return values


class Pebble:
    """One running Pebble + challtestsrv, described by pebble.sh's DIR/env."""

    def __init__(self, env, owned=False):
        self.env = env
        self.owned = owned  # started by this object (stop() stops it)
        self.dir = Path(env["PEBBLE_DIR"])
        self.log_path = self.dir / "pebble.log"
        self._root = None

    @classmethod
    def from_env_file(cls, path):
        return cls(read_env_file(path))

    @classmethod
    def start_private(cls, directory, validity_seconds=None):
        """A Pebble of our own (e.g. with a short certificate validity); stop() it."""
        env = dict(os.environ)
        if validity_seconds is not None:
            env["PEBBLE_CERT_VALIDITY_SECONDS"] = str(validity_seconds)
        subprocess.run([str(PEBBLE_SH), "start", str(directory)], check=True, env=env,
                       capture_output=True, timeout=120)
        return cls(read_env_file(Path(directory) / "env"), owned=True)

    def stop(self):
        if self.owned:
            subprocess.run([str(PEBBLE_SH), "stop", str(self.dir)], check=False, timeout=60)

    # -- the CA's roots -----------------------------------------------------------------------

    def _management_get(self, path):
        context = ssl.create_default_context(cafile=self.env["ACME_CA_BUNDLE"])
        with urllib.request.urlopen(self.env["PEBBLE_MANAGEMENT_URL"] + path, context=context,
                                    timeout=10) as response:
            return response.read().decode()

    def root_pem(self):
        """The root of everything this Pebble issues (its chains stop at the intermediate)."""
        if self._root is None:
            self._root = self._management_get("/roots/0")
        return self._root

    def write_root(self, path):
        Path(path).write_text(self.root_pem())
        return Path(path)

    def certificate_by_serial(self, serial_hex):
        """The certificate Pebble issued with this serial (its management API), parsed."""
        status = json.loads(self._management_get(f"/cert-status-by-serial/{serial_hex}"))
        return x509.load_pem_x509_certificate(status["Certificate"].encode())

    # -- what Pebble did, from its log --------------------------------------------------------

    def log_mark(self):
        """A position in Pebble's log; the *_since methods read what came after it."""
        return self.log_path.stat().st_size

    def log_since(self, mark):
        with open(self.log_path, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")

    def orders_since(self, mark):
        """IDs of the orders Pebble created after `mark`."""
        return re.findall(r'Added order "([^"]+)" to the db', self.log_since(mark))

    def issued_since(self, mark):
        """[(serial hex, order ID)] of the certificates Pebble issued after `mark`."""
        return re.findall(r"Issued certificate serial ([0-9a-f]+) for order (\S+)",
                          self.log_since(mark))

    def issued_names_since(self, mark):
        """[sorted SANs] of each certificate Pebble issued after `mark`, in order."""
        return [sorted(dns_names(self.certificate_by_serial(serial)))
                for serial, _ in self.issued_since(mark)]

    def validations_since(self, mark):
        """The identifiers Pebble's VA was asked to validate after `mark`."""
        return re.findall(r'Identifier:acme.Identifier\{Type:"dns", Value:"([^"]+)"\}',
                          self.log_since(mark))


def account_key_jwk():
    """A fresh ACME account key from controld itself (`controld account-key`)."""
    out = subprocess.run([str(harness.CONTROLD), "account-key"], check=True, capture_output=True,
                         text=True, timeout=30).stdout.strip()
    assert json.loads(out)["crv"] == "P-256", out
    return out


def acme_env(pebble, account_jwk, **overrides):
    """controld's environment for ISSUER=acme against `pebble` (strings; overrides win)."""
    env = {
        "ISSUER": "acme",
        "ACME_URL": pebble.env["ACME_URL"],
        "ACME_CA_BUNDLE": pebble.env["ACME_CA_BUNDLE"],
        "ACME_EAB_KID": pebble.env["ACME_EAB_KID"],
        "ACME_EAB_HMAC_KEY": pebble.env["ACME_EAB_HMAC_KEY"],
        "ACME_ACCOUNT_KEY_JWK": account_jwk,
        "DNS_PROVIDER": "challtestsrv",
        "CHALLTESTSRV_URL": pebble.env["CHALLTESTSRV_URL"],
        "ACME_DNS_RESOLVER": pebble.env["ACME_DNS_RESOLVER"],
        "ACME_DNS_PROPAGATION_TIMEOUT_MS": "10000",
        "ACME_POLL_INTERVAL_MS": "100",
        "ISSUANCE_RETRY_DELAY_MS": "1000",
    }
    env.update({k: str(v) for k, v in overrides.items()})
    return env


# -- keys, CSRs and certificates -------------------------------------------------------------

def make_csr(names, cn=None):
    """A P-256 key and a CSR with CN `cn` (default: the first name) and exactly `names` as SANs,
    as otunnel makes them. Returns (csr PEM, key PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn or names[0])]))
           .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                          critical=False)
           .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return csr.public_bytes(serialization.Encoding.PEM).decode(), key_pem


def csr_der_sha256(csr_pem):
    csr = x509.load_pem_x509_csr(csr_pem.encode())
    digest = hashes.Hash(hashes.SHA256())
    digest.update(csr.public_bytes(serialization.Encoding.DER))
    return digest.finalize().hex()


def chain_certificates(chain_pem):
    """Every certificate of a PEM chain, in order (Debian's cryptography 38 has no
    load_pem_x509_certificates)."""
    blocks = re.findall(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", chain_pem,
                        re.S)
    return [x509.load_pem_x509_certificate(block.encode()) for block in blocks]


def dns_names(certificate):
    san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return san.value.get_values_for_type(x509.DNSName)


def public_key_der(obj):
    return obj.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def verify_chain(workdir, chain_pem, root_path, hostname):
    """openssl verify of the chain's leaf against `root_path` (intermediates from the chain) for
    `hostname` as a TLS server; returns the CompletedProcess."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    chain = workdir / f"chain-{hostname.replace('*', 'star')}.pem"
    chain.write_text(chain_pem)
    leaf = workdir / f"leaf-{hostname.replace('*', 'star')}.pem"
    leaf.write_text(chain_certificates(chain_pem)[0].public_bytes(
        serialization.Encoding.PEM).decode())
    return subprocess.run(["openssl", "verify", "-CAfile", str(root_path), "-untrusted",
                           str(chain), "-purpose", "sslserver", "-verify_hostname", hostname,
                           str(leaf)], capture_output=True, text=True)


# -- controld: API, logs, metrics ------------------------------------------------------------

def create_tunnel(controld, **kwargs):
    response = controld.request("POST", "/api/tunnel", **kwargs)
    assert response.status == 201, response
    return response.json()


def bind_csr(controld, tunnel, csr_pem):
    response = controld.request("PUT", f"/api/tunnel/{tunnel['id']}/certificate",
                                body={"csr": csr_pem}, token=tunnel["token"])
    assert response.status == 202, response
    return response.json()


def certificate(controld, tunnel):
    response = controld.request("GET", f"/api/tunnel/{tunnel['id']}/certificate",
                                token=tunnel["token"])
    assert response.status == 200, response
    return response.json()


def wait_certificate(controld, tunnel, states=("ready",), timeout=60.0):
    """Polls GET .../certificate until its state is one of `states` (a failure while waiting for
    ready raises at once, with the error)."""
    def done():
        body = certificate(controld, tunnel)
        if body["state"] in states:
            return body
        assert body["state"] == "issuing", body
        return None
    return harness.wait_until(done, timeout, f"the certificate of {tunnel['id']} to be {states}")


def log_records(*controlds, message=None):
    """JSON log records of the given controlds (each tagged with "_process"), optionally only
    those whose message is exactly `message`."""
    records = []
    for instance in controlds:
        for record in instance.log_lines():
            if message is None or record.get("message") == message:
                records.append({**record, "_process": instance.name})
    return records


def metrics(port):
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert response.status == 200
        return relay_harness.Metrics(relay_harness.parse_metrics(response.read().decode()))
    finally:
        connection.close()


def acme_attempts(port, kind, outcome):
    return metrics(port).get("opentunnel_acme_attempts_total", kind=kind, outcome=outcome)


# -- the database underneath -----------------------------------------------------------------

class Database:
    """Direct access to a controld database (SQLite file or MariaDB URL) for what the API does
    not show: job rows, and tampering with stored records."""

    def __init__(self, url):
        self.url = url

    @property
    def is_sqlite(self):
        return self.url.startswith("sqlite:")

    def query(self, sql, params=()):
        """Rows as tuples of strings/ints (MariaDB: strings)."""
        if self.is_sqlite:
            import sqlite3
            connection = sqlite3.connect(self.url[len("sqlite:"):], timeout=30)
            try:
                with connection:
                    return connection.execute(sql, params).fetchall()
            finally:
                connection.close()
        assert not params, "MariaDB queries take no parameters here"
        rest = self.url[len("mysql://"):]
        userinfo, hostpath = rest.split("@", 1)
        user, password = userinfo.split(":", 1)
        hostport, database = hostpath.split("/", 1)
        host, port = hostport.split(":", 1)
        mariadb = shutil.which("mariadb") or "mysql"
        # -N -B -r: rows as tab-separated raw values (the record JSON is one line).
        command = [mariadb, f"-h{host}", f"-P{port}", f"-u{user}", f"-p{password}", "-N", "-B",
                   "-r", database, "-e", sql]
        out = subprocess.run(command, check=True, capture_output=True, text=True,
                             timeout=30).stdout
        return [tuple(line.split("\t")) for line in out.splitlines()]

    def job(self, job_id):
        """{column: value} of one jobs row, or None."""
        columns = ("id", "kind", "tunnel_id", "status", "attempts", "queued_at", "next_run_at",
                   "lease_owner", "lease_until", "last_error")
        quoted = job_id.replace("'", "''")
        rows = self.query(f"SELECT {', '.join(columns)} FROM jobs WHERE id = '{quoted}'")
        return dict(zip(columns, rows[0])) if rows else None

    def tunnel_jobs(self):
        columns = ("id", "kind", "tunnel_id", "status", "attempts", "lease_owner")
        rows = self.query(f"SELECT {', '.join(columns)} FROM jobs WHERE kind <> 'server'")
        return [dict(zip(columns, row)) for row in rows]
