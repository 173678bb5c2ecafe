#!/usr/bin/python3
"""A model of a reconnect storm on one relayd, for projecting what this box cannot run (50,000
bridges). It is a model, not a measurement: its inputs are figures measured with run_capacity.py
(the CPU of an attach, of a turned-away connection), its rules are relayd's and otunnel's:

- the old relayd tells its bridges `drain` at relayd/drain_pace.h's pace (5,000 a second in 10 ms
  steps, all within 5 s however many there are); each bridge then waits 125-250 ms, as after any
  attached session (client/backoff.h);
- the new relayd has one core. Every connection costs it `--accept-us` when it arrives (accept,
  the ClientHello read and parse), taken when the core gets to it (until then it waits in the
  kernel's backlog). It then waits in a FIFO queue (relayd/handshake_slots.h: at most
  `--queue-max`, for `--queue-wait-ms`); served in time, it costs `--attach-us` (handshake,
  upgrade, attach); otherwise, or when the queue is full, it is shed for `--shed-us` (the reset).
  The core takes work in the order it became ready;
- a shed bridge waits as otunnel waits after a busy answer: 250 ms plus a uniform share of
  750, 1,500, then 3,000 ms (client::Backoff::nextDelayMs with a busy hint).

The handshake slots (256) are not modelled: with clients on their own machines a slot is held
for a round trip, so on one core the CPU, not the slots, is what runs out. On this box the load
tool's single process is the client side of every handshake and does bind (docs/capacity.md);
to reproduce those runs give `--attach-us` the tool's time per attach.

  /usr/bin/python3 tests/load/storm_model.py --bridges 50000 --attach-us 262

(the defaults of --accept-us 27 and --shed-us 15 were measured on this box, docs/capacity.md)

prints sheds per bridge, when the last bridge is back, and the core's busy time per bridge.
"""
import argparse
import collections
import heapq
import pathlib
import random
import re
import statistics

ROOT = pathlib.Path(__file__).resolve().parents[2]


def header_constant(header, name):
    """A constant as the C++ header defines it (`name = 5'000;`, or a default argument), so the model follows the code."""
    text = (ROOT / header).read_text()
    match = re.search(rf"\b{name}\s*=\s*([0-9']+)\s*[;,)]", text)
    if match is None:
        raise SystemExit(f"storm_model: {name} not found in {header}")
    return int(match.group(1).replace("'", ""))


DRAIN_STEP_MS = header_constant("relayd/drain_pace.h", "kDrainStepMs")
DRAIN_PER_SECOND = header_constant("relayd/drain_pace.h", "kDrainPerSecond")
DRAIN_SPREAD_MS = header_constant("relayd/drain_pace.h", "kDrainSpreadMs")
# After an attached session ends otunnel waits half its base to the base (client/backoff.h).
_BASE_MS = header_constant("client/backoff.h", "baseMs")
AFTER_ATTACHED_MS = (_BASE_MS // 2, _BASE_MS)
BUSY_MIN_MS = header_constant("client/backoff.h", "kBusyMinMs")
BUSY_FIRST_MS = header_constant("client/backoff.h", "kBusyFirstMs")
BUSY_CAP_MS = header_constant("client/backoff.h", "kBusyCapMs")
QUEUE_WAIT_MS = header_constant("relayd/handshake_slots.h", "waitMs")
QUEUE_MAX = header_constant("relayd/handshake_slots.h", "maxWaiting")


def drain_per_step(bridges):
    steps = DRAIN_SPREAD_MS // DRAIN_STEP_MS
    return max(DRAIN_PER_SECOND * DRAIN_STEP_MS // 1000, -(-bridges // steps))


def busy_wait_ms(streak, rnd, first_ms, cap_ms):
    top = min(cap_ms, first_ms << min(streak, 8))
    return BUSY_MIN_MS + rnd.uniform(0, top - BUSY_MIN_MS)


def run_storm(args, seed):
    """One storm; returns (sheds, seconds until the last attach, core busy seconds)."""
    rnd = random.Random(seed)
    arrivals = []  # (time s, bridge, busy answers so far)
    per_step = drain_per_step(args.bridges)
    for bridge in range(args.bridges):
        told = (bridge // per_step) * DRAIN_STEP_MS / 1000
        arrivals.append((told + rnd.uniform(*AFTER_ATTACHED_MS) / 1000, bridge, 0))
    heapq.heapify(arrivals)
    queue = collections.deque()  # (arrived s, bridge, streak)
    wait_s = args.queue_wait_ms / 1000
    core_free = 0.0  # when the core has done all the work handed to it so far
    busy = 0.0
    sheds = 0
    last_attach = 0.0

    def shed(at, bridge, streak):
        nonlocal sheds, core_free, busy
        sheds += 1
        core_free = max(core_free, at) + args.shed_us / 1e6
        busy += args.shed_us / 1e6
        wait = busy_wait_ms(streak, rnd, args.busy_first_ms, args.busy_cap_ms) / 1000
        heapq.heappush(arrivals, (at + wait, bridge, streak + 1))

    while arrivals or queue:
        if last_attach > args.give_up_s or core_free > args.give_up_s:
            return sheds, None, busy
        # The loop takes work in the order it became ready: the oldest queued connection before a
        # newer arrival (a core that only ever accepted would starve its own queue).
        next_arrival = arrivals[0][0] if arrivals else float("inf")
        if queue and queue[0][0] <= next_arrival:
            arrived, bridge, streak = queue.popleft()
            start = max(core_free, arrived)
            if start - arrived > wait_s:  # its wait ran out before the core got to it
                shed(arrived + wait_s, bridge, streak)
                continue
            core_free = start + args.attach_us / 1e6
            busy += args.attach_us / 1e6
            last_attach = core_free
            continue
        at, bridge, streak = heapq.heappop(arrivals)
        # A connection the core cannot get to yet waits in the kernel's backlog; relayd's clock
        # for it starts when it is accepted.
        accepted = max(core_free, at)
        core_free = accepted + args.accept_us / 1e6
        busy += args.accept_us / 1e6
        if len(queue) >= args.queue_max:
            shed(accepted, bridge, streak)
        else:
            queue.append((accepted, bridge, streak))
    return sheds, last_attach, busy


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bridges", type=int, default=50_000)
    parser.add_argument("--attach-us", type=float, required=True,
                        help="core time of a served attach (resumed handshake, upgrade, attach)")
    parser.add_argument("--accept-us", type=float, default=27,
                        help="core time of every arriving connection (accept, ClientHello)")
    parser.add_argument("--shed-us", type=float, default=15,
                        help="core time of turning one away (the reset)")
    parser.add_argument("--queue-wait-ms", type=float, default=QUEUE_WAIT_MS)
    parser.add_argument("--queue-max", type=int, default=QUEUE_MAX)
    parser.add_argument("--busy-first-ms", type=int, default=BUSY_FIRST_MS)
    parser.add_argument("--busy-cap-ms", type=int, default=BUSY_CAP_MS)
    parser.add_argument("--seeds", type=int, default=3, help="storms to average over")
    parser.add_argument("--give-up-s", type=float, default=300,
                        help="a storm not over by then is reported as not settling")
    args = parser.parse_args()

    results = [run_storm(args, seed) for seed in range(args.seeds)]
    if any(r[1] is None for r in results):
        print(f"model: the storm did not settle within {args.give_up_s:g} s: the core spends"
              " itself turning connections away")
        return
    sheds = statistics.mean(r[0] for r in results) / args.bridges
    back = statistics.mean(r[1] for r in results)
    busy = statistics.mean(r[2] for r in results)
    print(f"model: {args.bridges} bridges, attach {args.attach_us:g} us, accept {args.accept_us:g}"
          f" us, shed {args.shed_us:g} us, queue {args.queue_max} for {args.queue_wait_ms:g} ms,"
          f" busy waits {BUSY_MIN_MS}-{args.busy_first_ms}..{args.busy_cap_ms} ms"
          f" ({args.seeds} seeds)")
    print(f"model: sheds per bridge {sheds:.2f}")
    print(f"model: all back {back:.1f} s after the drain began (range"
          f" {min(r[1] for r in results):.1f}-{max(r[1] for r in results):.1f})")
    print(f"model: core busy {busy / args.bridges * 1e6:.0f} us per bridge,"
          f" {busy:.1f} s in all ({busy / back * 100:.0f} % of the storm)")
    print(f"model: the attaches alone {args.bridges * args.attach_us / 1e6:.1f} s of core")


if __name__ == "__main__":
    main()
