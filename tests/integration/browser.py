"""Headless Chromium driven over the DevTools protocol, from the standard library alone.

Chromium is started with --remote-debugging-pipe: it reads protocol messages (JSON, each ended by
a NUL byte) on its fd 3 and writes its own on fd 4, so no port, no WebSocket client and no extra
package are needed. One page target is attached in flat mode; commands for it carry its
sessionId. Events are collected as they come, and callers wait on them with a deadline.
"""
import base64
import fcntl
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import harness

CHROMIUM = "/usr/bin/chromium"


class BrowserError(RuntimeError):
    pass


class Browser:
    def __init__(self, workdir, extra_flags=(), window=(1200, 900)):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        profile = self.workdir / "profile"
        profile.mkdir(exist_ok=True)
        self.log_path = self.workdir / "chromium.log"
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        flags = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--remote-debugging-pipe",
            f"--window-size={window[0]},{window[1]}", "--hide-scrollbars",
            "--disable-extensions", "--disable-default-apps", "--mute-audio",
            "--no-default-browser-check", "--password-store=basic",
            *extra_flags, "about:blank",
        ]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.workdir), "LANG": "C.UTF-8", "TZ": "UTC"}
        self._log = open(self.log_path, "wb")
        # Chromium wants the pipe on fds 3 and 4 exactly. The ends are moved to 100 and 101 here,
        # where nothing else is, and bash puts them in place just before exec, so no descriptor
        # the child inherits can be overwritten by the move.
        read_end = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD_CLOEXEC, 100)
        write_end = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD_CLOEXEC, 100)
        os.close(to_browser_r)
        os.close(from_browser_w)
        script = f'exec "$0" "$@" 3<&{read_end} 4>&{write_end} {read_end}<&- {write_end}>&-'
        self.process = subprocess.Popen(["/bin/bash", "-c", script, CHROMIUM, *flags], env=env,
                                        stdin=subprocess.DEVNULL, stdout=self._log,
                                        stderr=subprocess.STDOUT,
                                        pass_fds=(read_end, write_end))
        os.close(read_end)
        os.close(write_end)
        self._next_id = 0
        self._lock = threading.Condition()
        self._replies = {}
        self.events = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = None

    # -- the pipe ---------------------------------------------------------------------------

    def _read(self):
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._lock:
                    self._closed = True
                    self._lock.notify_all()
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                with self._lock:
                    if "id" in message:
                        self._replies[message["id"]] = message
                    else:
                        self.events.append(message)
                    self._lock.notify_all()

    def send(self, method, params=None, session=True, timeout=30.0):
        """One command; returns its result or raises BrowserError with the protocol's error."""
        with self._lock:
            self._next_id += 1
            ident = self._next_id
        message = {"id": ident, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._lock:
            while ident not in self._replies:
                if getattr(self, "_closed", False):
                    raise BrowserError(f"chromium went away during {method}: "
                                       + self.log_path.read_text(errors="replace")[-2000:])
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BrowserError(f"no answer to {method} within {timeout}s")
                self._lock.wait(remaining)
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    # -- pages ------------------------------------------------------------------------------

    def open_page(self):
        """Attaches to the page Chromium opened (about:blank) and enables what tests watch."""
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": page["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(f"{domain}.enable")
        return self

    def page_events(self, method):
        with self._lock:
            return [e["params"] for e in self.events
                    if e.get("method") == method and e.get("sessionId") == self.session]

    def navigate(self, url, timeout=30.0):
        """Loads `url` and waits for its load event."""
        before = len(self.page_events("Page.loadEventFired"))
        result = self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"navigating to {url}: {result['errorText']}")
        harness.wait_until(lambda: len(self.page_events("Page.loadEventFired")) > before,
                           timeout, f"{url} to load")

    def evaluate(self, expression, timeout=30.0):
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, timeout=30.0, what=None):
        """Until the expression is truthy in the page; returns its value."""
        def check():
            return self.evaluate(expression) or None
        return harness.wait_until(check, timeout, what or expression)

    def type_into(self, selector, text):
        """Focuses the field and inserts the text as a paste would (input events included)."""
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", {"text": text})

    def click(self, selector):
        self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")

    def screenshot(self, path, width=1200):
        """A PNG of the whole page (not only the window) at `width` CSS pixels."""
        metrics = self.send("Page.getLayoutMetrics")
        height = int(metrics["cssContentSize"]["height"]) + 1
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        try:
            data = self.send("Page.captureScreenshot", {"format": "png",
                                                        "captureBeyondViewport": True})["data"]
        finally:
            self.send("Emulation.clearDeviceMetricsOverride")
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

    def console_problems(self):
        """Console errors and CSP reports the pages logged (Log and Runtime domains)."""
        problems = [e["entry"]["text"] for e in self.page_events("Log.entryAdded")
                    if e["entry"]["level"] == "error"]
        problems += [str(e.get("exceptionDetails")) for e in self.page_events(
            "Runtime.exceptionThrown")]
        problems += [" ".join(str(a.get("value", a.get("description", ""))) for a in e["args"])
                     for e in self.page_events("Runtime.consoleAPICalled")
                     if e["type"] in ("error", "assert")]
        return problems

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=10)
        except BrowserError:
            pass
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        self._reader.join(timeout=5)
        os.close(self._from_browser)
        self._log.close()
