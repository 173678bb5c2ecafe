"""Faults on the region mesh's links (docs/mesh.md "A controld restart drops no tunnel", "Tests"):
machines on 127.0.0.21 (A), .22 (B), .23 (C), one MariaDB database, MESH_PING_MS=100 and
MESH_DEAD_MS=500, a fault proxy in front of every machine's internal listener (mesh_cluster.py),
so the links, the liveness questions, route checks and forwarded visitors between two machines
all cross a proxy that the test can cut (blackhole: nothing passes, nothing is refused) or stall
(freeze: the connection stays open and carries nothing).

- A partition A<->B: each side declares the link dead after MESH_DEAD_MS of silence and, since
  the other's relayd is behind the same cut, drops it one MESH_PING_MS later (no answer to the
  liveness question); C keeps both. Bridges attach and detach on both sides meanwhile. Healed,
  every machine's cluster view is the same and names each machine's bridges as they are, and a
  visitor at every machine reaches every tunnel.
- A stall: a link that stops carrying bytes (its relayd still answering on new connections) is
  declared dead after MESH_DEAD_MS and its machine held, not dropped, and relinks at once; a
  stall of everything between two machines drops each at the dead time plus one ping, and when
  the stall ends the links and the views come back.
- A frozen machine (SIGSTOP of its controld and relayd) is dropped by the others at the dead time
  plus one ping, its tunnel then refused at once there; SIGCONT: it relinks with its bridge,
  routable again through every machine.

Times are taken from controld's log lines (wall clock, milliseconds) against the moment the
fault was made; the bound is the design's time plus 1 s for a loaded 2-core box.
"""
import signal
import time

import pytest

import mesh_cluster as mc

A, B, C = "machine-a", "machine-b", "machine-c"
ADDRESSES = {A: "127.0.0.21", B: "127.0.0.22", C: "127.0.0.23"}
DEAD = mc.DEAD_MS / 1000
PING = mc.PING_MS / 1000
SLACK = 1.0  # scheduling on a loaded 2-core box, on top of the design's time


@pytest.fixture
def three(tmp_path, mysql_database):
    with mc.cluster(tmp_path, mysql_database, ADDRESSES) as machines:
        yield machines


@pytest.fixture
def two(tmp_path, mysql_database):
    with mc.cluster(tmp_path, mysql_database, {A: ADDRESSES[A], B: ADDRESSES[B]}) as machines:
        yield machines


def value(metrics, name, **labels):
    try:
        return metrics.get(name, **labels)
    except KeyError:
        return 0


def tunnel_on(machine, origin_name):
    origin = machine.stack.origin(origin_name)
    tunnel = machine.stack.tunnel(origin.port, links=1, name=f"otunnel-{origin_name}")
    tunnel.origin_name = origin_name
    return tunnel


def assert_reached(machines, tunnels, ca_file):
    for machine in machines:
        for tunnel in tunnels:
            result = mc.visit(machine, tunnel.hostname, ca_file)
            assert result.returncode == 0, f"{machine.name} -> {tunnel.origin_name}: {result.stderr}"
            assert result.stdout == f"hello from {tunnel.origin_name}\n"


def assert_refused_at_once(machine, tunnel, ca_file):
    started = time.monotonic()
    result = mc.visit(machine, tunnel.hostname, ca_file, max_time="10")
    elapsed = time.monotonic() - started
    assert result.returncode not in (0, 28), (machine.name, result)  # 28: curl's own timeout
    assert elapsed < 5.0, elapsed


def wait_dropped(machine, peer, since, reason="timeout"):
    """Until the machine has dropped `peer` (its log says so); seconds from `since` to the drop."""
    machine.wait_controld(
        lambda m: value(m, "opentunnel_mesh_machines_dropped_total", reason=reason) >= 1
        and value(m, "opentunnel_mesh_table_bridges", machine=peer.name) == 0,
        f"{peer.name} dropped ({reason})", timeout=10.0)
    times = [t for t in machine.log_times("mesh peer dropped", peer=peer.name, reason=reason)
             if t >= since - 0.01]
    assert times, f"{machine.name}: no 'mesh peer dropped' line for {peer.name}"
    return times[0] - since


def link_dead_after(machine, peer, since):
    """Seconds from `since` to the machine's `mesh link down` (reason dead) for `peer`."""
    times = [t for t in machine.log_times("mesh link down", peer=peer.name, reason="dead")
             if t >= since - 0.01]
    assert times, f"{machine.name}: its link to {peer.name} was not declared dead"
    return times[0] - since


def check_drop_times(machine, peer, dead, dropped):
    """The link declared dead MESH_DEAD_MS after the last frame (a ping at most MESH_PING_MS
    before the fault), the machine dropped one MESH_PING_MS after that: the first deadline of a
    link ended for silence (docs/mesh.md "A controld restart drops no tunnel", step 4)."""
    print(f"{machine.name}: link to {peer.name} dead after {dead:.3f} s, "
          f"dropped after {dropped:.3f} s")
    assert DEAD - PING - 0.05 <= dead <= DEAD + SLACK, (machine.name, dead)
    assert PING - 0.05 <= dropped - dead <= PING + 0.3, (machine.name, dead, dropped)
    assert dropped <= DEAD + PING + SLACK, (machine.name, dropped)


def dropped_total(machine):
    return mc.total(machine.controld_metrics(), "opentunnel_mesh_machines_dropped_total")


# ---------------------------------------------------------------------------------------------


def test_a_partition_heals_with_every_cluster_view_equal(three):
    a, b, c = three
    ca_file = a.stack.ca_file
    on_a, on_b, on_c = tunnel_on(a, "origin-a"), tunnel_on(b, "origin-b"), tunnel_on(c, "origin-c")
    mc.wait_views_equal(three, {A: 1, B: 1, C: 1})

    cut_at = time.time()
    mc.cut(a, b, "blackhole")
    # Silent for MESH_DEAD_MS, the link is declared dead; the peer's relayd, asked behind the same
    # cut, never answers: dropped one MESH_PING_MS later (docs/mesh.md, the first deadline).
    for machine, peer in ((a, b), (b, a)):
        dropped = wait_dropped(machine, peer, cut_at)
        dead = link_dead_after(machine, peer, cut_at)
        check_drop_times(machine, peer, dead, dropped)
    # C is linked to both all along.
    assert c.controld_metrics().get("opentunnel_mesh_peers", state="up") == 2
    assert dropped_total(c) == 0
    view = mc.rows(a.cluster())
    assert set(view) == {A, C}, view
    assert set(mc.rows(b.cluster())) == {B, C}

    # Both sides change meanwhile: a second bridge on A; B's bridge goes and another comes.
    on_a2 = tunnel_on(a, "origin-a2")
    on_b.process.terminate()
    on_b.process.wait(timeout=10)
    on_b2 = tunnel_on(b, "origin-b2")
    c.wait_controld(lambda m: value(m, "opentunnel_mesh_table_bridges", machine=A) == 2
                    and value(m, "opentunnel_mesh_table_bridges", machine=B) == 1,
                    "both sides' changes")
    assert_reached([c], [on_a2, on_b2], ca_file)
    assert_refused_at_once(a, on_b2, ca_file)  # A knows nothing of B's bridges now

    healed_at = time.monotonic()
    mc.cut(a, b, "pass")
    agreed = mc.wait_views_equal(three, {A: 2, B: 1, C: 1})
    healed = time.monotonic() - healed_at
    assert all(not row["draining"] for row in agreed.values())
    assert_reached(three, [on_a, on_a2, on_b2, on_c], ca_file)
    for machine in three:
        assert_refused_at_once(machine, on_b, ca_file)
    for machine in (a, b):
        assert dropped_total(machine) == 1, machine.name
    assert dropped_total(c) == 0
    print(f"partition: healed views agreed {healed:.2f} s after the cut ended")


def test_a_stalled_link_is_declared_dead_and_recovers(two):
    a, b = two
    ca_file = a.stack.ca_file
    on_a = tunnel_on(a, "origin-a")
    mc.wait_views_equal(two, {A: 1, B: 0})

    # The link alone stalls: its bytes stop, its sockets stay open. New connections pass, so each
    # side's relayd answers the liveness question: the peer is held, not dropped, and relinks.
    stalled_at = time.time()
    for machine, peer in ((a, b), (b, a)):
        machine.proxy.set_mode("freeze", scope="existing", source=peer.address)
    for machine, peer in ((a, b), (b, a)):
        machine.wait_controld(
            lambda m: value(m, "opentunnel_mesh_link_errors_total", reason="dead") >= 1
            and value(m, "opentunnel_mesh_peers", state="up") == 1
            and value(m, "opentunnel_mesh_held_machines") == 0,
            "the stalled link dead and a new one up")
        dead = link_dead_after(machine, peer, stalled_at)
        assert DEAD - PING - 0.05 <= dead <= DEAD + SLACK, (machine.name, dead)
        assert machine.log_times("mesh peer hold ended: linked again", peer=peer.name)
        assert dropped_total(machine) == 0, machine.name
    mc.wait_views_equal(two, {A: 1, B: 0})
    assert_reached([b], [on_a], ca_file)

    # Now everything between them stalls, new connections too: the liveness question stalls as
    # well, so each drops the other one ping after the dead time.
    stalled_at = time.time()
    mc.cut(a, b, "freeze")
    for machine, peer in ((a, b), (b, a)):
        dropped = wait_dropped(machine, peer, stalled_at)
        dead = link_dead_after(machine, peer, stalled_at)
        check_drop_times(machine, peer, dead, dropped)
    b.stack.relayd.wait_metric(lambda m: m.get("opentunnel_mesh_table_routes") == 0,
                               what="machine-b: machine-a's route gone from its relayd copy")
    assert_refused_at_once(b, on_a, ca_file)

    # The stall ends: what was held flows, the dials made meanwhile finish their handshakes.
    mc.cut(a, b, "pass")
    mc.wait_views_equal(two, {A: 1, B: 0})
    b.stack.relayd.wait_metric(lambda m: m.get("opentunnel_mesh_table_routes") == 1,
                               what="machine-b: machine-a's route back")
    assert_reached(two, [on_a], ca_file)


def test_a_frozen_machine_is_dropped_and_comes_back(three):
    a, b, c = three
    ca_file = a.stack.ca_file
    on_a = tunnel_on(a, "origin-a")
    for machine in (b, c):
        machine.stack.relayd.wait_metric(lambda m: m.get("opentunnel_mesh_table_routes") == 1,
                                         what=f"{machine.name}: machine-a's route")
    assert_reached(three, [on_a], ca_file)

    processes = [a.stack.controld.process, a.stack.relayd.process]
    frozen_at = time.time()
    for process in processes:
        process.send_signal(signal.SIGSTOP)
    try:
        # The kernel still accepts connections for a stopped relayd; nothing answers on them.
        for machine in (b, c):
            dropped = wait_dropped(machine, a, frozen_at)
            dead = link_dead_after(machine, a, frozen_at)
            check_drop_times(machine, a, dead, dropped)
            machine.stack.relayd.wait_metric(
                lambda m: m.get("opentunnel_mesh_table_routes") == 0,
                what=f"{machine.name}: machine-a's route gone from its relayd copy")
        for machine in (b, c):
            assert_refused_at_once(machine, on_a, ca_file)
        assert set(mc.rows(b.cluster())) == {B, C}
    finally:
        for process in processes:
            process.send_signal(signal.SIGCONT)

    # Awake, A relinks (its own timers find its old links dead; the peers' held dials finish) and
    # its first snapshot brings its bridge back to every table.
    mc.wait_views_equal(three, {A: 1, B: 0, C: 0})
    for machine in (b, c):
        machine.stack.relayd.wait_metric(lambda m: m.get("opentunnel_mesh_table_routes") == 1,
                                         what=f"{machine.name}: machine-a's route back")
    assert_reached(three, [on_a], ca_file)
    assert dropped_total(b) == 1 and dropped_total(c) == 1


def restart_relayd(relayd):
    """Starts the killed relayd again on its old TLS port (its bridges' clients reconnect there);
    waits for its new life's ports and control session (its log is appended to)."""
    sessions = relayd.log_text().count("control session up")
    servings = relayd.log_text().count("serving tls_port=")
    relayd.env["TLS_LISTEN"] = f"127.0.0.1:{relayd.tls_port}"
    relayd.start(wait=False)
    relayd.wait_log("serving tls_port=", count=servings + 1)
    relayd.wait_log("control session up", count=sessions + 1)


def test_a_crashed_machine_is_dropped_at_once_and_its_restart_replaces_it(two):
    """SIGKILL of A's controld and relayd: B's link ends and A's relayd, asked through A's proxy,
    refuses, so B drops A at once, not after the dead time. A restarted (a new life) links again
    and its snapshot, with the bridge its client re-attached, is what B holds of it."""
    a, b = two
    ca_file = a.stack.ca_file
    on_a = tunnel_on(a, "origin-a")
    before = mc.wait_views_equal(two, {A: 1, B: 0})[A]

    killed_at = time.time()
    for process in (a.stack.relayd.process, a.stack.controld.process):
        process.send_signal(signal.SIGKILL)
    a.stack.relayd.process.wait(timeout=10)
    a.stack.controld.process.wait(timeout=10)
    a.stack.controld.log.close()
    b.wait_controld(lambda m: mc.total(m, "opentunnel_mesh_machines_dropped_total") >= 1
                    and value(m, "opentunnel_mesh_table_bridges", machine=A) == 0,
                    "machine-a dropped", timeout=10.0)
    dropped = [t for t in b.log_times("mesh peer dropped", peer=A) if t >= killed_at - 0.01]
    reasons = [line.get("reason") for line in b.stack.controld.log_lines()
               if line.get("message") == "mesh peer dropped"]
    print(f"machine-b: crashed machine-a dropped after {dropped[0] - killed_at:.3f} s ({reasons})")
    assert reasons in (["closed"], ["refused"]), reasons
    assert dropped[0] - killed_at < DEAD, dropped[0] - killed_at
    b.stack.relayd.wait_metric(lambda m: m.get("opentunnel_mesh_table_routes") == 0,
                               what="machine-b: machine-a's route gone from its relayd copy")
    assert_refused_at_once(b, on_a, ca_file)

    # A's next life: controld, then relayd on its old port; otunnel re-attaches there.
    a.stack.controld.start()
    restart_relayd(a.stack.relayd)
    on_a.wait_connected(count=2, timeout=30)
    after = mc.wait_views_equal(two, {A: 1, B: 0})[A]
    assert (after["epoch"], after["started_at_ms"]) != (before["epoch"], before["started_at_ms"])
    assert after["started_at_ms"] > before["started_at_ms"]
    b.stack.relayd.wait_metric(lambda m: m.get("opentunnel_mesh_table_routes") == 1,
                               what="machine-b: machine-a's route back")
    assert_reached(two, [on_a], ca_file)
