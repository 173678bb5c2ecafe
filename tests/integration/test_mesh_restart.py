"""A controld restart drops no tunnel anywhere (docs/mesh.md "A controld restart drops no tunnel"):
two real machines (controld + relayd on 127.0.0.11 and .12, test_mesh_link.py's Machine) with
fast timers. A bridge attached on A is in B's table; A's controld is SIGKILLed: B holds A's
entries past MESH_DEAD_MS while A's relayd answers the signed liveness question, and A's next
controld life, which links only after its relayd's session snapshot, replaces them without B ever
dropping them. A machine that is really gone (relayd and controld killed) is dropped at once; a
relayd killed under a live controld has its bridges announced detached.

B's table is observed through its metrics: opentunnel_mesh_table_entries (A's bridges),
opentunnel_mesh_held_machines, opentunnel_mesh_alive_checks_total{result} and
opentunnel_mesh_machines_dropped_total{reason}, whose sum staying 0 is what proves "no gap".
"""
import signal

import pytest

import harness
import resilience_harness as res
from test_mesh_link import Machine

# MESH_PING_MS=100 comes with Machine. A held machine's relayd must answer within MESH_DEAD_MS:
# 1.5 s rather than Machine's 500 ms, which a loaded 2-core box can miss (a drop there would be
# the box's, not the design's).
HOLD = {"MESH_DEAD_MS": "1500", "MESH_HOLD_MS": "15000"}


def total(metrics, name):
    return sum(v for (metric, _), v in metrics.values.items() if metric == name)


def dropped_reasons(metrics):
    return {labels: v for (metric, labels), v in metrics.values.items()
            if metric == "opentunnel_mesh_machines_dropped_total" and v}


def good_answers(metrics):
    return (metrics.get("opentunnel_mesh_alive_checks_total", result="serving")
            + metrics.get("opentunnel_mesh_alive_checks_total", result="control_down"))


@pytest.fixture
def machines(tmp_path):
    port_a = harness.free_port("127.0.0.11")
    port_b = harness.free_port("127.0.0.12")
    started = []
    try:
        started.append(Machine(tmp_path, "machine-a", "127.0.0.11", port_a,
                               f"127.0.0.12:{port_b}", controld_env=HOLD))
        started.append(Machine(tmp_path, "machine-b", "127.0.0.12", port_b,
                               f"127.0.0.11:{port_a}", controld_env=HOLD))
        a, b = started
        for machine in started:
            machine.wait_controld(lambda m: m.get("opentunnel_mesh_peers", state="up") == 1,
                                  "its peer linked")
        origin = a.stack.origin()
        a.stack.tunnel(origin.port, links=1)
        b.wait_controld(lambda m: m.get("opentunnel_mesh_table_entries") == 1,
                        "machine-a's bridge in its table")
        yield a, b
    finally:
        for machine in started:
            machine.stack.close()


def test_a_controld_restart_keeps_its_bridges_in_the_peers_tables(machines):
    a, b = machines
    res.kill_controld(a.stack.controld)

    # B holds A's entries and keeps asking A's relayd: twenty good answers at one every 100 ms
    # outlast MESH_DEAD_MS (1.5 s) from the link's end.
    b.wait_controld(lambda m: m.get("opentunnel_mesh_held_machines") == 1, "machine-a held")
    held = b.wait_controld(lambda m: good_answers(m) >= 20, "machine-a's relayd answering")
    assert held.get("opentunnel_mesh_table_entries") == 1
    assert total(held, "opentunnel_mesh_machines_dropped_total") == 0
    snapshots = held.get("opentunnel_mesh_snapshot_bridges_count")
    bridges_in_snapshots = held.get("opentunnel_mesh_snapshot_bridges_sum")

    # A's next life links once its relayd's snapshot came; its first snapshot carries the bridge.
    res.restart_controld(a.stack.controld)
    back = b.wait_controld(lambda m: m.get("opentunnel_mesh_held_machines") == 0
                           and m.get("opentunnel_mesh_peers", state="up") == 1,
                           "machine-a linked again")
    # A drop first, by its reason: a hold that ended by a drop would show as a missing entry.
    assert total(back, "opentunnel_mesh_machines_dropped_total") == 0, dropped_reasons(back)
    assert back.get("opentunnel_mesh_table_entries") == 1
    # Every snapshot of the new life carried the bridge: none replaced the held entry with nothing.
    new_snapshots = back.get("opentunnel_mesh_snapshot_bridges_count") - snapshots
    assert new_snapshots >= 1
    assert back.get("opentunnel_mesh_snapshot_bridges_sum") - bridges_in_snapshots == new_snapshots
    logs = b.stack.controld.log_lines()
    assert any(line.get("message") == "mesh peer hold ended: linked again" for line in logs)
    assert not any(line.get("message") == "mesh peer dropped" for line in logs)
    linking = [line for line in a.stack.controld.log_lines()
               if line.get("message") == "mesh node linking"]
    assert len(linking) == 2  # one per life
    assert linking[-1].get("after") == "relay_snapshot"

    # Now A is really gone: its relayd and controld killed. Its internal address refuses the
    # question, so B drops it at once rather than after the hold.
    a.stack.controld.process.send_signal(signal.SIGKILL)
    a.stack.relayd.process.send_signal(signal.SIGKILL)
    a.stack.relayd.process.wait(timeout=10)
    res.kill_controld(a.stack.controld)
    gone = b.wait_controld(
        lambda m: total(m, "opentunnel_mesh_machines_dropped_total") >= 1, "machine-a dropped",
        timeout=5.0)
    assert gone.get("opentunnel_mesh_table_entries") == 0
    assert gone.get("opentunnel_mesh_held_machines") == 0
    # At the first question (its address refuses), not after the dead time or the hold.
    assert (gone.get("opentunnel_mesh_machines_dropped_total", reason="refused")
            + gone.get("opentunnel_mesh_machines_dropped_total", reason="closed")) == 1


def test_a_relayd_killed_under_a_live_controld_is_announced_detached(machines):
    a, b = machines
    a.stack.relayd.process.send_signal(signal.SIGKILL)
    a.stack.relayd.process.wait(timeout=10)
    # A's controld sees its relay session end and announces the bridge detached over the link,
    # which stays up (it runs controld to controld): B's entry goes with no drop of the machine.
    after = b.wait_controld(lambda m: m.get("opentunnel_mesh_table_entries") == 0,
                            "machine-a's bridge detached", timeout=5.0)
    assert after.get("opentunnel_mesh_peers", state="up") == 1
    assert total(after, "opentunnel_mesh_machines_dropped_total") == 0
    assert a.controld_metrics().get("opentunnel_mesh_local_bridges") == 0
