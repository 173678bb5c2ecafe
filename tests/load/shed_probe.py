#!/usr/bin/python3
"""What one shed connection costs relayd: a dev controld + relayd (pinned to one core, as in
run_capacity.py), its 256 API handshake slots held by silent handshakes (8 source addresses x
32, each sends a ClientHello and never answers the ServerHello), then rounds of --connections
connections from other source addresses, each sending a bridge's ClientHello (SNI the API domain,
ALPN otunnel-bridge). With every slot held they wait in relayd's queue for up to 1 s and are
reset unserved; past the queue's bound (half relayd's connection cap) they are reset at once.
relayd's CPU time over each round (from /proc/<pid>/task/*/schedstat, in ns: its loop thread's,
and all its threads'), less what it spends in an empty round of the same length, divided by the
connections shed, is the figure printed.

  /usr/bin/python3 tests/load/shed_probe.py --build-dir build --rounds 5 --connections 3000

With --perf-out FILE, `perf record --call-graph dwarf` follows relayd through the whole run (the
holders' handshakes and the empty rounds too: tell them apart by their stacks).
See docs/capacity.md ("What a shed costs"). Built for measuring; CI does not run it.
"""
import argparse
import os
import selectors
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_capacity  # noqa: E402  (the same dev controld and relayd)

HOLDER_SOURCES = [f"127.0.2.{i}" for i in range(1, 9)]  # 8 x 32 = relayd's 256 slots
HOLDERS_PER_SOURCE = 32
PROBE_SOURCES = [f"127.0.3.{i}" for i in range(1, 251)]


def bridge_client_hello():
    """A ClientHello as otunnel's bridges send it (SNI the API domain, ALPN otunnel-bridge)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.set_alpn_protocols(["otunnel-bridge"])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=run_capacity.DOMAIN)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def cpu_ns(pid):
    """relayd's CPU time so far in ns: its loop thread's (the process's first thread), and all
    its threads' (the loop's plus the control client's gRPC threads and the heap trimmer)."""
    loop = total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            ns = int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended between the listing and the read
        total += ns
        if task == str(pid):
            loop = ns
    return loop, total


def open_sending(source, port, hello):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(hello)
    sock.setblocking(False)
    return sock


def wait_all(socks, want, timeout):
    """Waits until each socket gave `want` ("data": some bytes; "end": EOF or a reset). Returns
    how many ended with a reset (or EOF) and how many are still open at the timeout."""
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
    pending, resets = len(socks), 0
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.2):
            sock = key.fileobj
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            except BlockingIOError:
                continue
            if want == "data" and data:
                selector.unregister(sock)
                pending -= 1
            elif not data:
                selector.unregister(sock)
                pending -= 1
                resets += 1
    selector.close()
    return resets, pending


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("OT_BUILD_DIR", "build"))
    parser.add_argument("--state", default="/tmp/ot-shed-probe")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=3000,
                        help="shed connections per round (past 4,096 some are shed at once)")
    parser.add_argument("--relayd", help="this relayd binary instead of the build's (a baseline)")
    parser.add_argument("--relayd-core", default="0")
    parser.add_argument("--relayd-env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--perf-out", help="perf record -g of relayd over the rounds to here")
    args = parser.parse_args()
    if args.connections > 15000:
        parser.error("--connections: at most 15,000 (this process's descriptors)")

    build = Path(args.build_dir).resolve()
    state = Path(args.state)
    if state.exists():
        shutil.rmtree(state)
    state.mkdir(parents=True)
    os.chmod(state, 0o700)
    run_capacity.raise_nofile()
    hello = bridge_client_hello()
    print(f"box: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"load average {os.getloadavg()}; ClientHello {len(hello)} bytes", flush=True)

    controld = run_capacity.Controld(build, state)
    relayd = None
    perf = None
    try:
        relayd = run_capacity.Relayd(build, state, controld, args.relayd_core,
                                     run_capacity.free_port(), run_capacity.free_port(), 0,
                                     args.relayd)
        relayd.env.update(setting.split("=", 1) for setting in args.relayd_env)
        relayd.start().wait_serving()
        pid = relayd.process.pid
        if args.perf_out:
            perf = subprocess.Popen(["perf", "record", "-q", "--call-graph", "dwarf", "-F", "1000", "-p", str(pid),
                                     "-o", args.perf_out], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(1)  # perf attaches
        loop_per_shed, all_per_shed = [], []
        for round_number in range(1, args.rounds + 1):
            holders = [open_sending(source, relayd.tls_port, hello)
                       for source in HOLDER_SOURCES for _ in range(HOLDERS_PER_SOURCE)]
            _, silent = wait_all(holders, "data", 10)  # every slot answered: all are held
            if silent:
                raise SystemExit(f"{silent} holders got no ServerHello")
            before, started = cpu_ns(pid), time.monotonic()
            probes = [open_sending(PROBE_SOURCES[i % len(PROBE_SOURCES)], relayd.tls_port, hello)
                      for i in range(args.connections)]
            resets, left = wait_all(probes, "end", 4)
            after, seconds = cpu_ns(pid), time.monotonic() - started
            for sock in probes + holders:
                sock.close()
            # The same time with nothing arriving: relayd's background (timers, the control
            # session), to take off the round's figure.
            time.sleep(6)  # the holders' slots and the shed connections are gone by now
            idle_before = cpu_ns(pid)
            time.sleep(seconds)
            idle_after = cpu_ns(pid)
            idle = [idle_after[i] - idle_before[i] for i in (0, 1)]
            cpu = [after[i] - before[i] for i in (0, 1)]
            if left or resets != args.connections:
                print(f"round {round_number}: {resets} reset, {left} still open: not counted",
                      flush=True)
                continue
            loop_per_shed.append((cpu[0] - idle[0]) / resets / 1000)
            all_per_shed.append((cpu[1] - idle[1]) / resets / 1000)
            print(f"round {round_number}: {resets} shed in {seconds:.2f} s; relayd's loop "
                  f"{cpu[0] / 1e6:.1f} ms ({idle[0] / 1e6:.1f} ms in an empty round as long), "
                  f"all threads {cpu[1] / 1e6:.1f} ms ({idle[1] / 1e6:.1f}): "
                  f"{loop_per_shed[-1]:.1f} us per shed on the loop, {all_per_shed[-1]:.1f} us "
                  f"in all", flush=True)
        for name, figures in (("the loop", loop_per_shed), ("all threads", all_per_shed)):
            if figures:
                ordered = sorted(figures)
                print(f"per shed connection, {name}: median {ordered[len(ordered) // 2]:.1f} us, "
                      f"{ordered[0]:.1f}-{ordered[-1]:.1f} us over {len(figures)} rounds",
                      flush=True)
    finally:
        if perf:
            perf.send_signal(2)
            perf.wait(30)
        if relayd:
            relayd.stop()
        controld.process.terminate()
        controld.process.wait(30)


if __name__ == "__main__":
    main()
