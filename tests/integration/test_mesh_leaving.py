"""A draining machine leaves the mesh (docs/mesh.md "Events"): SIGTERM to machine A's relayd
makes it tell its controld it is draining, A's controld sends `leaving` to its peers, and B's
relayd stops forwarding to A at once (A's routes leave B's copy). A relayd serving again under
the same controld makes A rejoin: its links are redialed with a hello that is not draining, and
A's new bridges are forward targets at B again.
"""
import harness
from test_mesh_link import TOKEN, Machine


def wait_controld_log(machine, needle):
    harness.wait_until(lambda: needle in machine.stack.controld.log_path.read_text(errors="replace"),
                       20, f"{machine.name}: {needle!r} in its log")


def test_a_draining_machine_leaves_and_rejoins_when_its_relayd_serves_again(tmp_path):
    port_a = harness.free_port("127.0.0.11")
    port_b = harness.free_port("127.0.0.12")
    a = Machine(tmp_path, "machine-a", "127.0.0.11", port_a, f"127.0.0.12:{port_b}")
    try:
        b = Machine(tmp_path, "machine-b", "127.0.0.12", port_b, f"127.0.0.11:{port_a}")
        try:
            origin = a.stack.origin("origin-a")
            a.stack.tunnel(origin.port)
            b.stack.relayd.wait_metric(lambda m: m.get("opentunnel_mesh_table_routes") == 1,
                                       timeout=20, what="A's route in B's relayd copy")

            a.stack.relayd.stop()  # SIGTERM: drain, then exit
            wait_controld_log(b, "mesh peer leaving")
            b.stack.relayd.wait_metric(lambda m: m.get("opentunnel_mesh_table_routes") == 0,
                                       timeout=20, what="A's route gone from B's relayd copy")
            wait_controld_log(a, "mesh leaving: this machine is draining")

            relay = a.stack.start_relayd({"INTERNAL_LISTEN": f"127.0.0.11:{port_a}",
                                          "INTERNAL_TOKEN": TOKEN, "MACHINE_ID": "machine-a",
                                          "SHUTDOWN_DRAIN_MS": "200"})
            wait_controld_log(a, "mesh rejoining: this machine serves again")
            a.stack.tunnel(origin.port, server_url=relay.server_url)
            b.stack.relayd.wait_metric(lambda m: m.get("opentunnel_mesh_table_routes") == 1,
                                       timeout=20, what="A's new route in B's relayd copy")
        finally:
            b.stack.close()
    finally:
        a.stack.close()
