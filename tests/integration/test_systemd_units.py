"""deploy/systemd (docs/deploy.md "systemd"): both units pass `systemd-analyze verify` with no
warning, keep the settings the deployment relies on (restart policy, the stop timeout covering
relayd's drain, the sandbox, the shared state and runtime directories, the stop order), and the
sysusers file creates the user.

verify needs ExecStart's binary to exist: the units name the installed path /usr/local/bin/X, so
the test verifies copies whose ExecStart points at the build's binaries (verify with --root finds
the binary but none of the host's targets, e.g. sysinit.target, and fails on that instead).
"""
import configparser
import subprocess
from pathlib import Path

import harness

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
RELAYD_DRAIN_MS = 10_000  # relayd's SHUTDOWN_DRAIN_MS default (relayd/relayd_config.h)
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C", "SYSTEMD_LOG_COLOR": "0"}


def unit(name):
    parser = configparser.ConfigParser(strict=False, interpolation=None,
                                       comment_prefixes=("#", ";"))
    parser.optionxform = str  # keys are case-sensitive
    parser.read(UNITS / name)
    return parser


def seconds(value):
    return float(value[:-1]) if value.endswith("s") else float(value)


def test_units_pass_systemd_analyze_verify(tmp_path):
    for name in ("relayd", "controld"):
        text = (UNITS / f"{name}.service").read_text()
        installed = f"ExecStart=/usr/local/bin/{name}\n"
        assert installed in text
        built = harness.BUILD_DIR / name / name
        assert built.exists(), built
        (tmp_path / f"{name}.service").write_text(
            text.replace(installed, f"ExecStart={built}\n"))
    result = subprocess.run(["systemd-analyze", "verify", "--man=no",
                             str(tmp_path / "relayd.service"), str(tmp_path / "controld.service")],
                            env=ENV, capture_output=True, text=True, timeout=60)
    # verify exits 0 on a value it could not parse ("ignoring"): any output is a failure.
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), \
        result.stdout + result.stderr


def test_units_keep_the_deployment_settings():
    relayd = unit("relayd.service")
    controld = unit("controld.service")
    for parsed in (relayd, controld):
        service = parsed["Service"]
        assert service["Restart"] == "always"
        assert service["RestartPreventExitStatus"] == "2"
        assert service["User"] == "opentunnel"
        assert service["NoNewPrivileges"] == "yes"
        assert service["ProtectSystem"] == "strict"
        assert service["PrivateTmp"] == "yes"
        assert service["StateDirectory"] == "opentunnel"
        assert service["RuntimeDirectory"] == "opentunnel"
        assert service["RuntimeDirectoryPreserve"] == "yes"
        assert service["KillSignal"] == "SIGTERM"
    # The stop timeout covers relayd's whole drain, with room to exit.
    assert seconds(relayd["Service"]["TimeoutStopSec"]) > RELAYD_DRAIN_MS / 1000
    # Stop order: relayd is ordered after controld, so it stops (drains) first; a controld
    # restart must not take relayd with it (Wants, never Requires/BindsTo/PartOf).
    assert "controld.service" in relayd["Unit"]["After"].split()
    assert "controld.service" in relayd["Unit"]["Wants"].split()
    for key in ("Requires", "BindsTo", "PartOf", "Requisite"):
        assert key not in relayd["Unit"], key


def test_sysusers_creates_the_user(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    result = subprocess.run(["systemd-sysusers", f"--root={root}", str(UNITS / "opentunnel.conf")],
                            env=ENV, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    passwd = (root / "etc" / "passwd").read_text()
    assert any(line.startswith("opentunnel:") and line.endswith(":/usr/sbin/nologin")
               for line in passwd.splitlines()), passwd
