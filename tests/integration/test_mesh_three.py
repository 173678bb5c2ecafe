"""Three machines in one region mesh (docs/mesh.md): controld + relayd pairs on 127.0.0.11 (A),
.12 (B) and .13 (C), each peering with the other two, all on one MariaDB database. A tunnel
attached on A is reached through every machine's public port (B and C forward to A); A's controld
is SIGKILLed and restarted under a steady load through B and C without one visitor failing (B and
C hold A's entries while A's relayd answers, docs/mesh.md "A controld restart drops no tunnel");
a machine really gone (relayd and controld killed) is dropped by B and C, whose visitors for its
tunnel are then refused at once rather than hung.
"""
import re
import signal
import threading
import time

import pytest

import harness
import relay_harness as rh
import resilience_harness as res
from test_mesh_link import linked_mesh, peers_up

# As test_mesh_forward.py: a held peer answers the liveness question every MESH_DEAD_MS, 1.5 s,
# which a loaded 2-core box does not miss; the hold outlasts any restart here.
HOLD = {"MESH_DEAD_MS": "1500", "MESH_HOLD_MS": "60000"}
ADDRESSES = {"machine-a": "127.0.0.11", "machine-b": "127.0.0.12", "machine-c": "127.0.0.13"}


@pytest.fixture
def three_machines(tmp_path, mysql_database):
    with linked_mesh(tmp_path, ADDRESSES, {**HOLD, "DATABASE_URL": mysql_database}) as machines:
        for machine in machines:
            machine.stack.relayd.wait_log("mesh table snapshot applied")
        yield machines


def visit(machine, tunnel, ca_file, max_time="15"):
    url = f"https://{tunnel.hostname}:{machine.stack.relayd.tls_port}/hello"
    return rh.curl_url(url, ca_file, "--max-time", max_time, timeout=30)


def visitors(machine, outcome):
    return machine.stack.relayd.metrics().visitors(outcome)


def wait_routes(machine, count, what):
    machine.stack.relayd.wait_metric(
        lambda m: m.get("opentunnel_mesh_table_routes") == count, timeout=20, what=what)


def good_answers(metrics):
    return (metrics.get("opentunnel_mesh_alive_checks_total", result="serving")
            + metrics.get("opentunnel_mesh_alive_checks_total", result="control_down"))


def total(metrics, name):
    return sum(v for (metric, _), v in metrics.values.items() if metric == name)


def attach_on_a(machines):
    a, b, c = machines
    origin = a.stack.origin("origin-a")
    tunnel = a.stack.tunnel(origin.port)
    for machine in (b, c):
        wait_routes(machine, 1, "the tunnel on A in its relayd copy")
    return tunnel


def test_a_tunnel_on_one_machine_is_reached_through_all_three(three_machines):
    a, b, c = three_machines
    tunnel = attach_on_a(three_machines)
    for machine in (a, b, c):
        result = visit(machine, tunnel, a.stack.ca_file)
        assert result.returncode == 0, f"{machine.name}: {result.stderr}"
        assert result.stdout == "hello from origin-a\n"
    assert visitors(a, "served_local") == 1
    assert visitors(a, "forwarded_in") == 2
    assert visitors(a, "forwarded_out") == 0
    for machine in (b, c):
        assert visitors(machine, "forwarded_out") == 1, machine.name
        assert visitors(machine, "forwarded_in") == 0, machine.name
        assert visitors(machine, "served_local") == 0, machine.name


class Load:
    """Sequential curls through B and C, alternating, until stopped; records every outcome."""

    def __init__(self, machines, tunnel, ca_file):
        self.machines = machines
        self.tunnel = tunnel
        self.ca_file = ca_file
        self.done = 0
        self.failures = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stopping.is_set():
            machine = self.machines[self.done % len(self.machines)]
            result = visit(machine, self.tunnel, self.ca_file)
            if result.returncode != 0 or result.stdout != "hello from origin-a\n":
                self.failures.append((machine.name, result.returncode, result.stderr.strip()))
            self.done += 1

    def wait_done(self, count, what):
        harness.wait_until(lambda: self.done >= count or bool(self.failures), 60.0, what)

    def stop(self):
        self.stopping.set()
        self.thread.join(timeout=60)


def test_a_controld_restart_under_load_fails_no_visitor(three_machines):
    a, b, c = three_machines
    tunnel = attach_on_a(three_machines)
    load = Load([b, c], tunnel, a.stack.ca_file)
    load.thread.start()
    try:
        load.wait_done(4, "curls before the kill")
        res.kill_controld(a.stack.controld)
        killed_at = load.done
        for machine in (b, c):
            machine.wait_controld(lambda m: m.get("opentunnel_mesh_held_machines") == 1,
                                  "machine-a held")
        # Keep the load on while A is held, past the dead time: twenty good answers from A's
        # relayd to each of B and C at one every 100 ms (a few seconds).
        for machine in (b, c):
            machine.wait_controld(lambda m: good_answers(m) >= 20, "machine-a's relayd answering")
        assert not load.failures, load.failures
        restarted_at = load.done
        res.restart_controld(a.stack.controld)
        for machine in (b, c):
            back = machine.wait_controld(
                lambda m: peers_up(m) == 2 and m.get("opentunnel_mesh_held_machines") == 0,
                "machine-a linked again")
            assert total(back, "opentunnel_mesh_machines_dropped_total") == 0, machine.name
        load.wait_done(load.done + 4, "curls after the restart")
    finally:
        load.stop()
    # A's relayd must go on believing B's and C's forwards across its controld's restart: no
    # snapshot of the new session may take them away (the window where visitors at B and C fail,
    # which the load above hits only when a curl lands in it).
    snapshots = [line for line in a.stack.relayd.log_text().splitlines()
                 if "mesh table snapshot applied" in line]
    assert len(snapshots) == 2, snapshots  # one per control session
    assert re.search(r"\blinked=2\b", snapshots[-1]), snapshots[-1]
    assert load.failures == []
    assert restarted_at - killed_at >= 20, restarted_at - killed_at
    forwarded = sum(visitors(machine, "forwarded_out") for machine in (b, c))
    assert forwarded == load.done
    assert visitors(a, "forwarded_in") == load.done
    for machine in (b, c):
        assert machine.stack.relayd.metrics().get("opentunnel_mesh_table_routes") == 1


def test_a_machine_really_gone_is_dropped_and_its_visitors_refused(three_machines):
    a, b, c = three_machines
    tunnel = attach_on_a(three_machines)
    result = visit(b, tunnel, a.stack.ca_file)
    assert result.returncode == 0, result.stderr

    a.stack.relayd.process.send_signal(signal.SIGKILL)
    a.stack.controld.process.send_signal(signal.SIGKILL)
    a.stack.relayd.process.wait(timeout=10)
    res.kill_controld(a.stack.controld)
    for machine in (b, c):
        gone = machine.wait_controld(
            lambda m: total(m, "opentunnel_mesh_machines_dropped_total") >= 1,
            "machine-a dropped", timeout=10.0)
        assert gone.get("opentunnel_mesh_held_machines") == 0, machine.name
        assert gone.get("opentunnel_mesh_table_entries") == 0, machine.name
        wait_routes(machine, 0, "machine-a's route gone from its relayd copy")

    # Refused by B's relayd itself: the tunnel is unknown there (its own store never had it) or,
    # once the mesh events fed it the tunnel from the shared database, known with no bridge.
    def rejected():
        return visitors(b, "rejected_unknown_tunnel") + visitors(b, "rejected_no_bridge")
    refused = rejected()
    started = time.monotonic()
    result = visit(b, tunnel, a.stack.ca_file, max_time="10")
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert result.returncode != 28, "the visitor hung until curl's --max-time"  # 28: timeout
    assert elapsed < 5.0, elapsed
    assert rejected() == refused + 1
    assert visitors(b, "forwarded_out") == 1
