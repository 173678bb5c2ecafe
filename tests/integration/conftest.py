import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def pytest_configure(config):
    # CMakeLists.txt runs the tests marked "waits" in an entry of their own, outside
    # RESOURCE_LOCK heavy: they spend their time on a timer of the spec, not on the CPU.
    config.addinivalue_line(
        "markers", "waits: most of the test's time is a timeout of the spec running out (a few "
        "seconds or more), with the processes idle; ctest runs it beside the heavy entries")


@pytest.fixture
def workdir(tmp_path):
    return tmp_path


@pytest.fixture
def controld(workdir):
    """A controld on SQLite, stopped (and checked for a clean exit) after the test."""
    started = []

    def start(**kwargs):
        name = kwargs.pop("name", f"controld{len(started)}")
        instance = harness.Controld(workdir / name, name=name, **kwargs).start()
        started.append(instance)
        return instance

    yield start
    for instance in started:
        code = instance.stop()
        assert code == 0, f"{instance.name} exited with {code}"


@pytest.fixture(scope="session")
def mysql_server_url():
    url = harness.mysql_url_or_none()
    if url is None:
        pytest.skip("OT_TEST_MYSQL_URL_FILE is not set (run under ctest for MariaDB tests)")
    return url


@pytest.fixture
def mysql_database(mysql_server_url):
    """A fresh database on the fixture's MariaDB; its URL."""
    name = "ot_it_" + os.urandom(6).hex()
    base = mysql_server_url.rstrip("/")
    # mysql://user:pass@host:port/ -> create the database with the client.
    rest = base[len("mysql://"):]
    userinfo, hostport = rest.split("@", 1)
    user, password = userinfo.split(":", 1)
    host, port = hostport.split(":", 1)
    subprocess.run(["mariadb", f"-h{host}", f"-P{port}", f"-u{user}", f"-p{password}", "-e",
                    f"CREATE DATABASE {name}"], check=True)
    yield f"{base}/{name}"
    subprocess.run(["mariadb", f"-h{host}", f"-P{port}", f"-u{user}", f"-p{password}", "-e",
                    f"DROP DATABASE IF EXISTS {name}"], check=False)


@pytest.fixture(scope="session")
def control_pb2():
    """Python stubs for the control contract, generated from proto/ with Debian's protoc."""
    out = Path(tempfile.mkdtemp(prefix="ot-pb-"))
    subprocess.run(["protoc", f"--proto_path={ROOT / 'proto'}", f"--python_out={out}",
                    f"--grpc_out={out}", "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin",
                    str(ROOT / "proto/opentunnel/control/v1/control.proto"),
                    str(ROOT / "proto/grpc/health/v1/health.proto")], check=True)
    sys.path.insert(0, str(out))
    from opentunnel.control.v1 import control_pb2 as pb, control_pb2_grpc as pb_grpc  # noqa
    # "grpc.health.v1" would collide with the grpc package itself: load the module by path.
    import importlib.util
    spec = importlib.util.spec_from_file_location("ot_health_pb2",
                                                  out / "grpc/health/v1/health_pb2.py")
    health_pb2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(health_pb2)
    return pb, pb_grpc, health_pb2


@pytest.fixture
def stack(workdir):
    """A factory for controld + relayd stacks (relay_harness.Stack); all stopped after the test,
    relayd checked for exit code 0. Tests that need a short drain pass SHUTDOWN_DRAIN_MS."""
    import relay_harness
    started = []

    def start(relayd_env=None, controld_env=None, start_relayd=True):
        env = {"SHUTDOWN_DRAIN_MS": "200"}
        env.update(relayd_env or {})
        instance = relay_harness.Stack(workdir / f"stack{len(started)}", relayd_env=env,
                                       controld_env=controld_env, start_relayd=start_relayd)
        started.append(instance)
        return instance

    yield start
    for instance in started:
        codes = instance.close()
        for name, code in codes.items():
            assert code == 0, f"{name} exited with {code}"


@pytest.fixture
def origin():
    """A local HTTP/1.1 origin (relay_harness.OriginServer), stopped after the test."""
    import relay_harness
    servers = []

    def start(name="origin"):
        server = relay_harness.OriginServer(name).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
