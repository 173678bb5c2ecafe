"""The website on the API domain (docs/website.md), served by controld with WEBSITE_DIR=website
through relayd: curl checks of the pages (200, strong ETags and 304s, HEAD, content types, the
redirects, the API's 404 JSON, the Content-Security-Policy) over HTTP/1.1 and HTTP/2, and the
status page in headless Chromium, driven over the DevTools protocol (browser.py): the visitor
pastes a tunnel's ID and token, and the graph must show the bytes this test pushed through the
tunnel. Screenshots of both pages go to <build>/test-output/website/ (paths printed).

relayd listens on 127.0.0.1 like every stack of relay_harness.py (otunnel reaches names under
.localhost there); everything else binds port 0 or a free port."""
import base64
import hashlib
import json
import re
import urllib.parse
from pathlib import Path

import pytest

import browser
import harness
import relay_harness as rh

WEBSITE_DIR = Path(__file__).resolve().parents[2] / "website"
OUTPUT_DIR = harness.BUILD_DIR / "test-output" / "website"
PUSHED_BYTES = 3_000_000  # downloaded by a visitor through the tunnel: bytesOut
UPLOADED_BYTES = 400_000  # uploaded by a visitor: bytesIn


def site_curl(relay, path, *args, http="--http1.1"):
    """curl https://opentunnel.localhost:<port><path>, verifying the local CA; headers and body."""
    url = f"{relay.server_url}{path}"
    dump = () if "-I" in args else ("-D", "-")  # -I prints the head by itself
    got = rh.curl_url(url, relay.ca_file, http, *dump, *args)
    assert got.returncode == 0, got.stderr
    # Text mode: curl's CRLFs arrive as plain newlines.
    head, _, body = got.stdout.partition("\n\n")
    lines = head.split("\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return status, headers, body


@pytest.fixture
def site(stack):
    return stack(controld_env={"WEBSITE_DIR": str(WEBSITE_DIR),
                               # relayd reports usage every 10 s; controld writes it at once.
                               "USAGE_FLUSH_INTERVAL_MS": "500"})


@pytest.mark.parametrize("http", ["--http1.1", "--http2"])
def test_pages_etags_and_the_api_404(site, http):
    relay = site.relayd
    index = (WEBSITE_DIR / "index.html").read_text()

    status, headers, body = site_curl(relay, "/", http=http)
    assert status == 200
    assert body == index
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert headers["cache-control"] == "public, max-age=0, must-revalidate"
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "default-src 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    etag = headers["etag"]
    assert re.fullmatch(r'"[0-9a-f]{32}"', etag), etag  # strong: no W/
    assert etag == '"' + hashlib.sha256(index.encode()).hexdigest()[:32] + '"'

    # Conditional GET: 304 without a body for the current tag (also weakly named, in a list).
    for condition in (etag, f'"stale", W/{etag}', "*"):
        status, headers304, body = site_curl(relay, "/", "-H", f"If-None-Match: {condition}",
                                             http=http)
        assert (status, body) == (304, ""), condition
        assert headers304["etag"] == etag
    status, _, body = site_curl(relay, "/", "-H", 'If-None-Match: "stale"', http=http)
    assert (status, body) == (200, index)

    # HEAD: the GET's headers, its Content-Length, no body.
    status_page = (WEBSITE_DIR / "status.html").read_bytes()
    status, headers, body = site_curl(relay, "/status", "-I", http=http)
    assert status == 200 and body == ""
    assert int(headers["content-length"]) == len(status_page)
    assert headers["etag"] == '"' + hashlib.sha256(status_page).hexdigest()[:32] + '"'

    for path, content_type in (("/status.js", "text/javascript; charset=utf-8"),
                               ("/site.js", "text/javascript; charset=utf-8"),
                               ("/style.css", "text/css; charset=utf-8")):
        status, headers, body = site_curl(relay, path, http=http)
        assert status == 200, path
        assert headers["content-type"] == content_type
        assert body == (WEBSITE_DIR / path[1:]).read_text()

    # /index.html and /status.html redirect to the canonical paths, keeping the query.
    status, headers, _ = site_curl(relay, "/index.html", http=http)
    assert (status, headers["location"]) == (307, "/")
    status, headers, _ = site_curl(relay, "/status.html?x=1", http=http)
    assert (status, headers["location"]) == (307, "/status?x=1")

    # Anything else is the API's own 404, in JSON; other methods on a page get 405.
    for path in ("/nope", "/api/nope", "/status/", "/.git/config"):
        status, headers, body = site_curl(relay, path, http=http)
        assert status == 404, path
        assert headers["content-type"] == "application/json"
        assert json.loads(body)["_tag"] == "NotFoundError"
    status, headers, _ = site_curl(relay, "/status", "-X", "POST", http=http)
    assert (status, headers["allow"]) == (405, "GET, HEAD")
    # The API is where it was.
    status, _, body = site_curl(relay, "/health", http=http)
    assert (status, json.loads(body)) == (200, {"status": "ok"})


def site_spki_hash(relay):
    """base64(SHA-256(SubjectPublicKeyInfo)) of the certificate relayd serves for the API
    domain (verified against the local CA here), for Chromium to accept that one alone."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    with rh.tls_connect(relay.tls_port, rh.DOMAIN, relay.ca_file) as connection:
        der = connection.getpeercert(binary_form=True)
    certificate = x509.load_der_x509_certificate(der)
    spki = certificate.public_key().public_bytes(serialization.Encoding.DER,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


def test_status_page_shows_the_tunnel_and_the_traffic_it_carried(site, workdir):
    relay = site.relayd
    origin = site.origin("web")
    tunnel = site.tunnel(origin.port, links=2)
    token = tunnel.state()["token"]

    # Traffic through the tunnel: a download and an upload by visitors (counted when their
    # connections end, which they do when curl exits).
    got = rh.curl_url(f"{tunnel.url}/bytes?n={PUSHED_BYTES}&seed=web", relay.ca_file,
                      "--http1.1", "-o", "/dev/null", "-w", "%{size_download}")
    assert got.returncode == 0 and got.stdout == str(PUSHED_BYTES), got.stderr
    upload = workdir / "upload.bin"
    rh.write_pattern_file(upload, UPLOADED_BYTES, "up")
    got = rh.curl_url(f"{tunnel.url}/upload", relay.ca_file, "--http1.1",
                      "--data-binary", f"@{upload}")
    assert got.returncode == 0, got.stderr

    # The API has it once relayd reported it (every 10 s) and controld wrote it.
    def usage_arrived():
        response = relay.api("GET", f"/api/tunnel/{tunnel.tunnel_id}/usage?period=24h",
                             token=token)
        assert response.status == 200, response.body
        total = response.json()["total"]
        return total if total["bytesOut"] >= PUSHED_BYTES else None
    total = harness.wait_until(usage_arrived, 60, "the usage API to show the download")
    assert total["bytesIn"] >= UPLOADED_BYTES

    OUTPUT_DIR.mkdir(parents=True, exist_ok=True)
    site_url = relay.server_url
    origin_of = urllib.parse.urlsplit(site_url)
    chromium = browser.Browser(workdir / "chromium", extra_flags=(
        "--host-resolver-rules=MAP opentunnel.localhost 127.0.0.1",
        f"--ignore-certificate-errors-spki-list={site_spki_hash(relay)}",
    ))
    try:
        chromium.open_page()
        chromium.navigate(site_url + "/")
        assert chromium.evaluate("document.title").startswith("OpenTunnel")
        # site.js wrote this deployment's address into the commands.
        assert chromium.evaluate("document.querySelector('.origin').textContent") == site_url
        index_png = chromium.screenshot(OUTPUT_DIR / "index.png")

        chromium.navigate(site_url + "/status")
        chromium.type_into("#tunnel-id", tunnel.tunnel_id)
        chromium.type_into("#tunnel-token", token)
        chromium.click("#show")
        chromium.wait_for("document.getElementById('graph').dataset.ready === 'true'", 30,
                          "the status page to draw the graph")

        shown = chromium.evaluate("""(() => {
            const buckets = [...document.querySelectorAll('#usage-svg g.bucket')];
            const sum = (key) => buckets.reduce((n, g) => n + Number(g.dataset[key]), 0);
            const tallest = Math.max(...[...document.querySelectorAll('#usage-svg rect.bar-out')]
                                     .map((r) => Number(r.getAttribute('height'))));
            return {
              buckets: buckets.length, bytesOut: sum('out'), bytesIn: sum('in'),
              tallestOut: tallest,
              totalOut: document.getElementById('total-out').textContent,
              state: document.getElementById('state').textContent,
              links: document.getElementById('links').textContent,
              certState: document.getElementById('cert-state').textContent,
              names: document.getElementById('cert-names').textContent,
              message: document.getElementById('message').hidden,
              stored: sessionStorage.getItem('opentunnel.status'),
              remembered: localStorage.getItem('opentunnel.status'),
            };
        })()""")
        assert shown["buckets"] == 24
        assert shown["bytesOut"] >= PUSHED_BYTES
        assert shown["bytesIn"] >= UPLOADED_BYTES
        assert shown["tallestOut"] > 100  # the download's hour is the graph's peak
        assert shown["totalOut"].endswith("MB"), shown
        assert shown["state"] == "online"
        assert shown["links"] == "2 bridges attached"
        assert shown["certState"] == "ready"
        assert tunnel.hostname in shown["names"].split(", ")
        assert shown["message"] is True  # no error shown
        # The token stays in this tab's storage (Remember was not ticked), not in localStorage.
        assert json.loads(shown["stored"]) == {"id": tunnel.tunnel_id, "token": token}
        assert shown["remembered"] is None
        status_png = chromium.screenshot(OUTPUT_DIR / "status.png")

        # The 30-day view: daily buckets, today's holding the same bytes.
        chromium.click('[data-period="30d"]')
        chromium.wait_for("document.getElementById('usage-svg').dataset.period === '30d'", 30,
                          "the 30-day graph")
        month = chromium.evaluate("""(() => {
            const buckets = [...document.querySelectorAll('#usage-svg g.bucket')];
            const today = buckets[buckets.length - 1];
            return {buckets: buckets.length, today: Number(today.dataset.out)};
        })()""")
        assert month["buckets"] == 30
        assert month["today"] >= PUSHED_BYTES

        # Every request went to the site's own origin, and the token only to its API.
        requests = chromium.page_events("Network.requestWillBeSent")
        assert requests
        for event in requests:
            url = urllib.parse.urlsplit(event["request"]["url"])
            assert (url.scheme, url.netloc) == (origin_of.scheme, origin_of.netloc), url
            sent = {k.lower(): v for k, v in event["request"]["headers"].items()}
            if url.path.startswith("/api/"):
                assert sent["authorization"] == f"Bearer {token}"
            else:
                assert "authorization" not in sent, url
        # The pages work under their Content-Security-Policy: nothing refused, nothing thrown.
        assert chromium.console_problems() == []
    finally:
        chromium.close()
    print(f"\nscreenshots: {index_png} {status_png}")
    assert index_png.stat().st_size > 10_000 and status_png.stat().st_size > 10_000


def test_status_page_says_when_the_token_is_wrong(site, workdir):
    relay = site.relayd
    origin = site.origin("web")
    tunnel = site.tunnel(origin.port, links=1)
    chromium = browser.Browser(workdir / "chromium", extra_flags=(
        "--host-resolver-rules=MAP opentunnel.localhost 127.0.0.1",
        f"--ignore-certificate-errors-spki-list={site_spki_hash(relay)}",
    ))
    try:
        chromium.open_page()
        chromium.navigate(relay.server_url + "/status")
        chromium.type_into("#tunnel-id", tunnel.tunnel_id)
        chromium.type_into("#tunnel-token", "not-the-token")
        chromium.click("#show")
        message = chromium.wait_for(
            "!document.getElementById('message').hidden &&"
            " document.getElementById('message').textContent", 30, "an error message")
        assert "not the tunnel's token" in message
        assert chromium.evaluate("document.getElementById('result').hidden") is True
    finally:
        chromium.close()


def test_controld_refuses_a_website_dir_with_a_symlink_out_of_it(workdir):
    site_dir = workdir / "site"
    site_dir.mkdir()
    (site_dir / "index.html").write_text("<h1>ok</h1>")
    (workdir / "secret.txt").write_text("not for visitors")
    (site_dir / "leak.txt").symlink_to(workdir / "secret.txt")
    controld = harness.Controld(workdir / "controld", env={"WEBSITE_DIR": str(site_dir)})
    controld.start(wait=False)
    try:
        assert controld.process.wait(timeout=60) == 2
    finally:
        controld.stop()
    log = controld.log_path.read_text()
    assert "WEBSITE_DIR is not usable" in log and "symlink out of the directory" in log
