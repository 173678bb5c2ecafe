"""The two-process image (deploy/container, docs/deploy.md): built from Debian packages by
build-image.sh, run, and checked end to end: a tunnel served (otunnel outside, curl through relayd
inside, the local CA and the development domain on loopback), `kill -9` of controld inside with
the tunnel up and controld back, and SIGTERM draining relayd (close 1012 to every bridge) before
the container exits within the drain time. Two fast cases check ot-supervise's own rules
(configuration error, a relayd that will not stop) against stand-in daemons.

Runtime: podman (with runc; crun cannot run on this machine's hybrid cgroups) loading the OCI
layout, when podman can start a container here (probed); otherwise the same root filesystem under
`unshare --mount --pid --fork` + chroot with the same entrypoint. OT_CONTAINER_RUNTIME=chroot
forces the fallback. The test prints which one ran and its timings.

The .deb files are cached under the build directory (build/deploy/debs), so a rerun downloads
nothing. relayd's TLS listener is on 127.0.0.1 (otunnel resolves *.localhost there); its HTTP
/health and both metrics listeners on 127.0.3.1.
"""
import hashlib
import http.client
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

import bridge_client as bc
import harness
import relay_harness as rh

ROOT = Path(__file__).resolve().parents[2]
CONTAINER_DIR = ROOT / "deploy" / "container"
HOST = "127.0.3.1"
DRAIN_MS = 3000
PODMAN_BASE = ["--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file"]
# What podman and the image build run with: nothing inherited from the caller's environment.
TOOL_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


def log_step(started, what):
    print(f"container: {time.monotonic() - started:6.1f} s  {what}", flush=True)


def image_env():
    config = json.loads((CONTAINER_DIR / "image-config.json").read_text())
    return dict(item.split("=", 1) for item in config["Env"]), config


def children(pid):
    """Host PIDs of the direct children of `pid` (from /proc), with their command names."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if ppid == pid:
            found[int(entry)] = comm
    return found


class Container:
    """One run of the image; output (both daemons and the supervisor) in `log_path`."""

    def __init__(self, workdir, image, env):
        self.workdir = Path(workdir)
        self.image = image
        self.env = env
        self.state = self.workdir / "state"
        self.state.mkdir()
        os.chown(self.state, 999, 999)  # the image's opentunnel user
        self.log_path = self.workdir / "container.log"
        self.process = None

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def log_records(self):
        return [json.loads(line) for line in self.log_text().splitlines() if line.strip()]

    def _alive(self):
        if self.process.poll() is not None:
            raise RuntimeError(f"the container exited with {self.process.returncode}:\n"
                               + self.log_text()[-4000:])

    def wait_log(self, pattern, count=1, timeout=60.0):
        def seen():
            if len(re.findall(pattern, self.log_text())) >= count:
                return True
            self._alive()
            return False
        harness.wait_until(seen, timeout, f"the container to log {pattern!r} x{count}")

    def daemon_pid(self, name):
        """relayd's or controld's host PID: a child of the supervisor (PID 1 inside)."""
        for pid, comm in children(self.supervisor_pid()).items():
            if comm == name:
                return pid
        return None

    def wait_exit(self, timeout):
        return self.process.wait(timeout)


class PodmanContainer(Container):
    name_prefix = "ot-it-container"

    def __init__(self, workdir, image, env, podman):
        super().__init__(workdir, image, env)
        self.podman = podman
        self.name = f"{self.name_prefix}-{os.getpid()}"

    def start(self):
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        args = [*self.podman, "run", "--rm", "--name", self.name, "--network", "host",
                # Without CAP_SYS_RESOURCE here, runc may only lower limits: say them outright.
                "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=4096:4096",
                "-v", f"{self.state}:/var/lib/opentunnel"]
        for key, value in self.env.items():
            args += ["-e", f"{key}={value}"]
        args.append(self.image)
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(args, env=TOOL_ENV, stdout=self.log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def supervisor_pid(self):
        out = subprocess.run([*self.podman, "inspect", "--format", "{{.State.Pid}}", self.name],
                             env=TOOL_ENV, capture_output=True, text=True, check=True).stdout
        return int(out.strip())

    def healthcheck(self):
        """The image's HEALTHCHECK command, run inside the container."""
        return subprocess.run([*self.podman, "exec", self.name, "/usr/local/bin/ot-healthcheck"],
                              env=TOOL_ENV, capture_output=True, text=True, timeout=30)

    def terminate(self):
        subprocess.run([*self.podman, "kill", "--signal", "TERM", self.name], env=TOOL_ENV,
                       check=True, capture_output=True)

    def cleanup(self):
        if self.process and self.process.poll() is None:
            subprocess.run([*self.podman, "rm", "-f", "-t", "0", self.name], env=TOOL_ENV,
                           capture_output=True)
            self.process.wait(30)
        # Each build is a new image: drop it, or the storage grows by a layer a run.
        subprocess.run([*self.podman, "rmi", "-f", self.image], env=TOOL_ENV, capture_output=True)
        if getattr(self, "log", None):
            self.log.close()


class ChrootContainer(Container):
    """The root filesystem under new mount and PID namespaces: the supervisor is PID 1 there."""

    def __init__(self, workdir, rootfs, env, image_config):
        super().__init__(workdir, rootfs, env)
        self.rootfs = Path(rootfs)
        self.image_config = image_config

    def start(self):
        r = self.rootfs
        # Mounts live in the new namespace only: nothing is left behind on the host.
        script = f"""set -e
mount -t proc proc {r}/proc
mount --rbind /dev {r}/dev
mount -t tmpfs -o mode=0755,uid=999,gid=999 tmpfs {r}/run/opentunnel
mount -t tmpfs -o mode=1777 tmpfs {r}/tmp
mount --bind {self.state} {r}/var/lib/opentunnel
cd {r}/var/lib/opentunnel
exec chroot --userspec=999:999 {r} {self.image_config['Entrypoint'][0]}
"""
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            ["unshare", "--mount", "--pid", "--fork", "--kill-child", "/bin/sh", "-c", script],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def supervisor_pid(self):
        found = children(self.process.pid)
        assert len(found) == 1, found
        return next(iter(found))

    def healthcheck(self):
        """The image's HEALTHCHECK script, run from the host against the same listener."""
        return subprocess.run(["/bin/bash", str(self.rootfs / "usr/local/bin/ot-healthcheck")],
                              env=self.env, capture_output=True, text=True, timeout=30)

    def terminate(self):
        os.kill(self.supervisor_pid(), signal.SIGTERM)

    def cleanup(self):
        if self.process and self.process.poll() is None:
            self.process.kill()  # --kill-child: the namespace's processes go with it
            self.process.wait(30)
        if getattr(self, "log", None):
            self.log.close()


def podman_command(build_dir, rootfs):
    """podman with storage of its own under the build directory, or None where podman is not
    installed, cannot start a container here (probed with the image's own root filesystem), or
    OT_CONTAINER_RUNTIME=chroot."""
    if os.environ.get("OT_CONTAINER_RUNTIME") == "chroot" or not shutil.which("podman") \
            or not shutil.which("runc"):
        return None
    # podman's database remembers its runroot: one fixed (and short: it holds sockets) per build.
    runroot = "/tmp/otc-" + hashlib.sha256(str(build_dir).encode()).hexdigest()[:12]
    podman = ["podman", "--root", str(build_dir / "deploy" / "podman"), "--runroot", runroot,
              *PODMAN_BASE]
    probe = subprocess.run([*podman, "run", "--rm", "--network", "host", "--ulimit",
                            "nproc=4096:4096", "--ulimit", "nofile=1024:1024", "--rootfs",
                            str(rootfs), "/bin/true"], env=TOOL_ENV, capture_output=True,
                           text=True, timeout=120)
    if probe.returncode != 0:
        print(f"container: podman cannot run a container here: {probe.stderr.strip()}")
        return None
    return podman


@pytest.fixture(scope="module")
def image():
    """Builds the image once per run: (rootfs, OCI layout, runtime description)."""
    started = time.monotonic()
    out = harness.BUILD_DIR / "deploy" / "image"
    env = {**TOOL_ENV, "OT_DEB_CACHE": str(harness.BUILD_DIR / "deploy" / "debs")}
    result = subprocess.run(["/bin/bash", str(CONTAINER_DIR / "build-image.sh"),
                             str(harness.BUILD_DIR), str(out)],
                            env=env, capture_output=True, text=True, timeout=600)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    log_step(started, "image built")
    return out


@pytest.fixture
def container(image, tmp_path):
    """Starts the image with the test's settings; the Container is stopped after the test."""
    started = time.monotonic()
    env, config = image_env()
    env.update({
        "MACHINE_ID": "box1",
        "REGION": "test-region",
        "OPENTUNNEL_DOMAIN": rh.DOMAIN,
        "TLS_LISTEN": f"127.0.0.1:{harness.free_port()}",
        "HTTP_LISTEN": f"{HOST}:{harness.free_port(HOST)}",
        "RELAYD_METRICS_LISTEN": f"{HOST}:{harness.free_port(HOST)}",
        "CONTROLD_METRICS_LISTEN": f"{HOST}:{harness.free_port(HOST)}",
        "SHUTDOWN_DRAIN_MS": str(DRAIN_MS),
        "LOG_LEVEL": "info",
    })
    podman = podman_command(harness.BUILD_DIR, image / "rootfs")
    instance = None
    if podman is not None:
        # podman runs here: the OCI layout must load (no falling back past a broken image).
        loaded = subprocess.run([*podman, "load", "-q", "-i", str(image / "oci")],
                                env=TOOL_ENV, capture_output=True, text=True, timeout=300)
        assert loaded.returncode == 0, loaded.stdout + loaded.stderr
        name = loaded.stdout.strip().split("Loaded image:")[-1].strip().splitlines()[0]
        instance = PodmanContainer(tmp_path, name, env, podman)
        log_step(started, f"podman loaded the OCI layout as {name}")
    else:
        instance = ChrootContainer(tmp_path, image / "rootfs", env, config)
    instance.runtime = "podman" if isinstance(instance, PodmanContainer) else "unshare+chroot"
    print(f"container: runtime {instance.runtime}")
    instance.started = started
    instance.start()
    try:
        yield instance
    finally:
        instance.cleanup()


class RelayShim:
    """What bridge_client.create_ready_tunnel needs of a relayd: its TLS port, CA and API."""

    def __init__(self, tls_port, ca_file):
        self.tls_port = tls_port
        self.ca_file = ca_file

    def api(self, method, path, body=None, token=None, headers=None):
        headers = dict(headers or {})
        data = None
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        return rh.https_request(self.tls_port, rh.DOMAIN, method, path,
                                self.ca_file, body=data, headers=headers)


def health(port):
    """relayd's GET /health from outside: (status, body), or None while nothing listens."""
    connection = http.client.HTTPConnection(HOST, port, timeout=5)
    try:
        connection.request("GET", "/health")
        response = connection.getresponse()
        return response.status, response.read().decode()
    except OSError:
        return None
    finally:
        connection.close()


def test_container_serves_survives_controld_kill_and_drains(container, tmp_path):
    c = container
    t0 = c.started
    http_port = int(c.env["HTTP_LISTEN"].rsplit(":", 1)[1])
    tls_port = int(c.env["TLS_LISTEN"].rsplit(":", 1)[1])

    # --- up: /health 200 from outside and the image's HEALTHCHECK inside ------------------------
    c.wait_log(r'"message":"control session up"', timeout=90)
    harness.wait_until(lambda: (health(http_port) or (0,))[0] == 200, 60, "/health 200")
    check = c.healthcheck()
    assert check.returncode == 0, (check.stdout, check.stderr)
    assert json.loads(check.stdout.strip().splitlines()[-1])["status"] == "ok"
    ca_file = c.state / "local-ca.pem"
    harness.wait_until(ca_file.exists, 30, "controld to write the local CA")
    log_step(t0, f"serving ({c.runtime}); healthcheck: {check.stdout.strip()}")

    # --- a tunnel end to end: otunnel outside, curl through relayd inside ---------------------
    web = rh.OriginServer("container-origin").start()
    server_url = f"https://{rh.DOMAIN}:{tls_port}"
    tunnel = rh.Otunnel(tmp_path / "otunnel", server_url, ca_file, port=web.port, links=2)
    bridge = None
    try:
        tunnel.start()
        tunnel.wait_url()
        tunnel.wait_connected()
        got = rh.curl_url(f"{tunnel.url}/hello", ca_file)
        assert got.stdout == "hello from container-origin\n", got
        log_step(t0, f"tunnel {tunnel.url} served")
        # A bridge of our own, to read the close code at SIGTERM.
        shim = RelayShim(tls_port, ca_file)
        ready = bc.create_ready_tunnel(shim, tmp_path)
        bridge, _ = bc.attached_bridge(shim, ready)

        # --- kill -9 controld inside: relayd untouched, visitors served, controld back -------
        relayd_pid = c.daemon_pid("relayd")
        controld_pid = c.daemon_pid("controld")
        assert relayd_pid and controld_pid, children(c.supervisor_pid())
        killed_at = time.monotonic()
        os.kill(controld_pid, signal.SIGKILL)
        c.wait_log(r'"message":"exited","process":"controld","code":"137"', timeout=10)
        # While controld is down (the supervisor's 1 s restart delay): the tunnel still serves.
        during = rh.curl_url(f"{tunnel.url}/hello", ca_file, "-w", " %{http_code}")
        assert during.stdout.endswith("hello from container-origin\n 200"), during
        c.wait_log(r'"message":"started","process":"controld"', count=2, timeout=30)
        c.wait_log(r'"message":"control session up"', count=2, timeout=60)
        log_step(t0, f"controld restarted, control session back "
                     f"{time.monotonic() - killed_at:.1f} s after kill -9")
        assert c.daemon_pid("relayd") == relayd_pid
        assert c.daemon_pid("controld") not in (None, controld_pid)
        assert (health(http_port) or (0,))[0] == 200
        after = rh.curl_url(f"{tunnel.url}/hello", ca_file)
        assert after.stdout == "hello from container-origin\n", after
        assert tunnel.process.poll() is None
        assert "reconnecting" not in tunnel.stderr_text(), tunnel.stderr_text()

        # --- SIGTERM to the container: 1012 to every bridge, exit within the drain ------------
        terminated_at = time.monotonic()
        c.terminate()
        code, _ = bridge.wait_close(timeout=10)
        assert code == 1012
        # Answer the close as a client does, so relayd need not wait out its close grace for it.
        bridge.send_frame(bc.OP_CLOSE, struct.pack(">H", 1012))
        bridge.close()
        closed_after = time.monotonic() - terminated_at
        exit_code = c.wait_exit(timeout=DRAIN_MS / 1000 + 20)
        exited_after = time.monotonic() - terminated_at
        log_step(t0, f"SIGTERM: bridge closed {code} after {closed_after:.2f} s, container "
                     f"exited {exit_code} after {exited_after:.2f} s (drain {DRAIN_MS} ms)")
        assert exit_code == 0, c.log_text()[-3000:]
        # relayd waits out its drain, then controld stops quickly: both within drain + 5 s.
        assert exited_after < DRAIN_MS / 1000 + 5
        assert "the relay is restarting (drain)" in tunnel.stderr_text()
    finally:
        if bridge is not None:
            bridge.close()
        tunnel.stop()
        web.stop()

    # --- the logs: JSON lines on stdout, every one with machine and region --------------------
    records = c.log_records()  # raises on any line that is not JSON
    assert all(r.get("machine") == "box1" and r.get("region") == "test-region" for r in records), \
        [r for r in records if r.get("machine") != "box1" or r.get("region") != "test-region"][:3]
    targets = {r["target"].split(".")[0] for r in records}
    assert {"relayd", "controld", "ot-supervise"} <= targets, targets
    order = [(r.get("process"), r.get("message")) for r in records
             if r["target"] == "ot-supervise" and r["message"] == "stopped"]
    assert order == [("relayd", "stopped"), ("controld", "stopped")], order


# ---------------------------------------------------------------------------------------------
# ot-supervise's own rules, against stand-in daemons (shell scripts named relayd and controld in
# OT_BIN_DIR): fast, no image needed.

# A stand-in's body says UP where it is ready (its traps set): the supervisor is signalled only
# after that line.
FAKE = "#!/bin/bash\n{body}\n"
UP = 'echo "{\\"message\\":\\"$(basename "$0") up\\"}"'
SERVE = f"trap 'exit 0' TERM; {UP}; sleep 60 & wait"


def run_supervisor(tmp_path, relayd_body, controld_body, env=None, signal_after=None,
                   ready=None):
    """Runs ot-supervise over stand-ins; with signal_after, sends it once `ready(log_path)` holds
    (default: relayd's stand-in is up). Returns (exit status, output)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("relayd", relayd_body), ("controld", controld_body)):
        path = bin_dir / name
        path.write_text(FAKE.format(body=body.replace("UP", UP)))
        path.chmod(0o755)
    # Output to a file, and the supervisor's exit awaited (not EOF: a stand-in's orphans may
    # hold a pipe open).
    log_path = tmp_path / "supervise.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            ["/bin/bash", str(CONTAINER_DIR / "ot-supervise")],
            env={"PATH": "/usr/bin:/bin", "OT_BIN_DIR": str(bin_dir), "MACHINE_ID": "m1",
                 "REGION": "r1", **(env or {})},
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        if signal_after:
            ready = ready or (lambda path: ("relayd up" in path.read_text()
                                            and "controld up" in path.read_text()))
            harness.wait_until(lambda: ready(log_path), 15, "the stand-ins to be ready")
            process.send_signal(signal_after)
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, log_path.read_text()


def test_supervisor_stops_on_a_configuration_error(tmp_path):
    started = time.monotonic()
    code, out = run_supervisor(tmp_path, SERVE, "exit 2")
    assert code == 2, out
    assert '"message":"configuration error: not restarting","process":"controld"' in out, out
    assert time.monotonic() - started < 10


def test_supervisor_kills_a_relayd_that_does_not_stop_and_says_so(tmp_path):
    # relayd ignores SIGTERM: SIGKILL after its drain + OT_STOP_GRACE_S, exit status 1.
    code, out = run_supervisor(tmp_path, "trap '' TERM; UP; while :; do sleep 1; done", SERVE,
                               env={"SHUTDOWN_DRAIN_MS": "0", "OT_STOP_GRACE_S": "1"},
                               signal_after=signal.SIGTERM)
    assert code == 1, out
    assert '"message":"did not stop in time: killing","process":"relayd"' in out, out
    assert '"message":"stopped","process":"controld","code":"0"' in out, out


def test_supervisor_restarts_a_crashed_relayd_and_leaves_controld(tmp_path):
    # The stand-in relayd crashes (status 1) on its first start only.
    marker = tmp_path / "crashed-once"
    relayd = f"if [ ! -e {marker} ]; then touch {marker}; exit 1; fi\n{SERVE}"

    def restarted(out_path):
        return out_path.read_text().count('"message":"relayd up"') >= 1

    code, out = run_supervisor(tmp_path, relayd, SERVE, signal_after=signal.SIGTERM,
                               ready=restarted)
    assert code == 0, out
    assert '"message":"exited","process":"relayd","code":"1"' in out, out
    assert out.count('"message":"started","process":"controld"') == 1, out
