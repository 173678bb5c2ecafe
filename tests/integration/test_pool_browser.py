"""A real browser through a pooled tunnel (issue 16): headless Chromium loads a page with a
stylesheet, a script and several images from a tunnel served by three otunnel origins (a with the
tunnel token, b and c with derived credentials). Each origin's local server marks what it serves
with its name (in the HTML, the CSS, the script and the images' widths), so the page itself shows
which origin served each part: everything must load, and from one origin, the one the relay's
documented choice gives the browser's address, even though Chromium spreads the subresources over
several connections, each a new visitor for the relay."""
import base64
import hashlib
import http.server
import socketserver
import struct
import threading
import zlib

import browser
import pool_harness as ph
import relay_harness as rh

ORIGINS = ("a", "b", "c")
IMAGES = 8
WIDTHS = {"a": 1, "b": 2, "c": 3}  # each origin's images are this many pixels wide


def _png(width, height=1):
    """A valid grey PNG of width x height."""
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    rows = b"".join(b"\0" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def _page(name):
    images = "".join(f'<img id="i{n}" src="/img/{n}.png">' for n in range(IMAGES))
    return {
        "/": ("text/html", f"""<!doctype html><html><head><title>pool</title>
<link rel="stylesheet" href="/style.css"><script src="/app.js"></script></head>
<body data-origin="{name}"><p id="p">pool</p>{images}</body></html>""".encode()),
        "/style.css": ("text/css", f'#p::after {{ content: "{name}"; }}'.encode()),
        "/app.js": ("text/javascript", f'window.scriptOrigin = "{name}";'.encode()),
        **{f"/img/{n}.png": ("image/png", _png(WIDTHS[name])) for n in range(IMAGES)},
        "/favicon.ico": ("image/png", _png(16, 16)),  # asked for by Chromium on its own
    }


class _SiteHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        site = self.server.site
        with site.lock:
            site.requests.append(self.path)
        content_type, body = site.files.get(self.path, ("text/plain", b"not found"))
        self.send_response(200 if self.path in site.files else 404)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # Chromium resets idle connections at exit


class Site:
    """One origin's local web server: the page and its parts, marked with the origin's name."""

    def __init__(self, name):
        self.name = name
        self.files = _page(name)
        self.requests = []
        self.lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), _SiteHandler)
        self.server.site = self
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _spki_hash(relay, hostname):
    """base64(SHA-256(SubjectPublicKeyInfo)) of the tunnel's certificate (checked against the
    local CA here), for Chromium to accept that certificate alone."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    with rh.tls_connect(relay.tls_port, hostname, relay.ca_file) as connection:
        der = connection.getpeercert(binary_form=True)
    spki = x509.load_der_x509_certificate(der).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


def test_chromium_loads_a_page_and_all_its_parts_from_one_origin(stack, workdir):
    s = stack()
    relay = s.relayd
    sites = {name: Site(name) for name in ORIGINS}
    chromium = None
    try:
        owner = s.tunnel(sites["a"].port, name="a", links=2, extra_args=["--origin", "a"])
        tid, token = owner.tunnel_id, owner.state()["token"]
        for name in ORIGINS[1:]:
            added = relay.api("POST", f"/api/tunnel/{tid}/origins", body={"name": name},
                              token=token)
            assert added.status == 201, added
            client = rh.Otunnel(s.workdir / name, relay.server_url, s.ca_file,
                                port=sites[name].port, links=2, name=name,
                                state_dir=ph.copy_state_without_token(owner,
                                                                      s.workdir / f"{name}-st"),
                                extra_args=["--origin", name,
                                            "--credential", added.json()["credential"]])
            s.tunnels.append(client)
            client.start()
        relay.wait_metric(lambda m: m.get("opentunnel_bridges_attached") == 2 * len(ORIGINS),
                          30, "every origin's links attached")

        chromium = browser.Browser(workdir / "chromium", extra_flags=(
            f"--host-resolver-rules=MAP *.{rh.DOMAIN} 127.0.0.1",
            f"--ignore-certificate-errors-spki-list={_spki_hash(relay, owner.hostname)}",
        ))
        chromium.open_page()
        chromium.navigate(owner.url + "/")
        shown = chromium.wait_for("""(() => {
            const images = [...document.images];
            if (!images.every((i) => i.complete)) return null;
            return {
              html: document.body.dataset.origin,
              css: getComputedStyle(document.getElementById('p'), '::after').content,
              js: window.scriptOrigin,
              widths: images.map((i) => i.naturalWidth),
            };
        })()""", 30, "the page and its images")
        served = {name: list(site.requests) for name, site in sites.items()}
        print(f"\npage parts served per origin: { {n: len(r) for n, r in served.items()} }")
        name = shown["html"]
        # The browser's address is 127.0.0.1: the relay's choice for it, computed here.
        assert name == ph.expected_origin("127.0.0.1", ORIGINS), shown
        assert shown["css"] == f'"{name}"', shown
        assert shown["js"] == name, shown
        assert shown["widths"] == [WIDTHS[name]] * IMAGES, shown
        wanted = {"/", "/style.css", "/app.js", *(f"/img/{n}.png" for n in range(IMAGES))}
        assert wanted <= set(served[name]), served
        for other in ORIGINS:
            if other != name:
                assert served[other] == [], served
        assert chromium.console_problems() == []
        # Several connections carried the page (else stickiness within it would prove nothing).
        connections = {e["response"].get("connectionId") for e in
                       chromium.page_events("Network.responseReceived")}
        print(f"the page came over {len(connections)} connection(s)")
        assert len(connections) >= 2, connections
    finally:
        if chromium is not None:
            chromium.close()
        for site in sites.values():
            site.stop()
