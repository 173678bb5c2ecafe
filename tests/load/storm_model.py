#!/usr/bin/python3
"""A model of a reconnect storm on one relayd, for projecting what this box cannot run (50,000
bridges). It is a model, not a measurement: its inputs are figures measured with run_capacity.py
(the CPU of an attach, of a turned-away connection), its rules are relayd's and otunnel's:

- the old relayd tells its bridges `drain` at relayd/drain_pace.h's pace (5,000 a second in 10 ms
  steps, all within 5 s however many there are); each bridge then waits 125-250 ms, as after any
  attached session (client/backoff.h);
- the new relayd has one core. A bridge's connection first reaches the kernel's accept queue
  (`--backlog`, relayd asks for 16,384; the kernel caps it at net.core.somaxconn, 4,096 on this
  box); a SYN that finds it full is dropped and sent again 1, 2, 4 ... s later, at no cost to
  relayd. otunnel gives an attempt 10 s from its first SYN (client/bridge_pool.h), then waits as
  after any broken attempt. Every accepted connection costs relayd `--accept-us` (accept, the
  ClientHello read and parse). It then waits in a FIFO queue (relayd/handshake_slots.h: at most
  `--queue-max`, by default half the connection cap as relayd sets it, for `--queue-wait-ms`);
  served in time, it costs `--attach-us` (handshake, upgrade, attach); otherwise, or when the
  queue is full, it is shed for `--shed-us` (the reset). The core takes the oldest ready work
  first; `--pause-at N` is a what-if that relayd does not do: stop accepting while N connections
  wait for a slot, leaving the rest to the kernel;
- a shed bridge waits as otunnel waits after a busy answer: 250 ms plus a uniform share of
  750, 1,500, then 3,000 ms (client::Backoff::nextDelayMs with a busy hint).

The handshake slots (256) are not modelled: with clients on their own machines a slot is held
for a round trip, so on one core the CPU, not the slots, is what runs out. On this box the load
tool's single process is the client side of every handshake and does bind (docs/capacity.md);
to reproduce those runs give `--attach-us` the tool's time per attach.

  /usr/bin/python3 tests/load/storm_model.py --bridges 50000 --attach-us 262

(the defaults of --accept-us 27 and --shed-us 15 were measured on this box, docs/capacity.md)

prints sheds per bridge, SYNs the kernel dropped, attempts that ran out of time, when the last
bridge is back, and the core's busy time per bridge.
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
BROKEN_CAP_MS = 60_000  # otunnel's links (client/backoff.h)
ATTEMPT_DEADLINE_MS = header_constant("client/bridge_pool.h", "attachDeadlineMs")
LISTEN_BACKLOG = 16_384  # relayd's (relayd/listener.h); the kernel caps it at net.core.somaxconn
SYN_RTO_S = 1.0  # Linux sends a dropped SYN again after 1 s, then 2, 4 ... s more


def drain_per_step(bridges):
    steps = DRAIN_SPREAD_MS // DRAIN_STEP_MS
    return max(DRAIN_PER_SECOND * DRAIN_STEP_MS // 1000, -(-bridges // steps))


def busy_wait_ms(streak, rnd, first_ms, cap_ms):
    top = min(cap_ms, first_ms << min(streak, 8))
    return BUSY_MIN_MS + rnd.uniform(0, top - BUSY_MIN_MS)


class Attempt:
    """One connection attempt of one bridge, from its first SYN to attached or given up."""
    __slots__ = ("bridge", "first_syn", "busy_streak", "broken_streak", "over")

    def __init__(self, bridge, first_syn, busy_streak, broken_streak):
        self.bridge = bridge
        self.first_syn = first_syn
        self.busy_streak = busy_streak
        self.broken_streak = broken_streak
        self.over = False  # attached, turned away, or given up by the client


def broken_wait_ms(streak, rnd):
    """otunnel's wait after a broken attempt (a timeout): equal jitter over a doubling base."""
    base = min(BROKEN_CAP_MS, _BASE_MS << min(streak, 16))
    return base / 2 + rnd.uniform(0, base / 2)


def run_storm(args, seed):
    """One storm, event by event; returns a dict of what happened (last_attach None: unsettled)."""
    rnd = random.Random(seed)
    events = []  # (time s, sequence, kind, attempt, SYN retries so far)
    sequence = 0

    def push(at, kind, attempt, tries=0):
        nonlocal sequence
        sequence += 1
        heapq.heappush(events, (at, sequence, kind, attempt, tries))

    def begin(at, bridge, busy_streak, broken_streak):
        attempt = Attempt(bridge, at, busy_streak, broken_streak)
        push(at, "syn", attempt)
        push(at + args.deadline_s, "deadline", attempt)

    per_step = drain_per_step(args.bridges)
    for bridge in range(args.bridges):
        told = (bridge // per_step) * DRAIN_STEP_MS / 1000
        begin(told + rnd.uniform(*AFTER_ATTACHED_MS) / 1000, bridge, 0, 0)

    backlog = collections.deque()  # (entered s, attempt): completed by the kernel, not accepted
    queue = collections.deque()  # (accepted s, attempt) waiting for a handshake slot
    wait_s = args.queue_wait_ms / 1000
    now = 0.0
    out = {"sheds": 0, "syn_drops": 0, "timeouts": 0, "stale": 0, "busy": 0.0,
           "last_attach": None, "max_backlog": 0, "longest_wait_ms": 0.0}
    attached = 0

    def spend(us):
        nonlocal now
        now += us / 1e6
        out["busy"] += us / 1e6

    def turned_away(attempt):  # the reset: otunnel reads it as busy
        out["sheds"] += 1
        attempt.over = True
        wait = busy_wait_ms(attempt.busy_streak, rnd, args.busy_first_ms, args.busy_cap_ms)
        out["longest_wait_ms"] = max(out["longest_wait_ms"], wait)
        begin(now + wait / 1000, attempt.bridge, attempt.busy_streak + 1, attempt.broken_streak)

    while attached < args.bridges:
        if now > args.give_up_s:
            return out
        # What happened on the wire up to now: SYNs into the kernel's accept queue (or dropped
        # when it is full, then sent again 1, 2, 4 ... s later), and clients' deadlines.
        while events and events[0][0] <= now:
            at, _, kind, attempt, tries = heapq.heappop(events)
            if attempt.over:
                continue
            if kind == "deadline":  # the client gives up; a queued connection stays queued
                out["timeouts"] += 1
                attempt.over = True
                wait = broken_wait_ms(attempt.broken_streak, rnd)
                out["longest_wait_ms"] = max(out["longest_wait_ms"], wait)
                begin(at + wait / 1000, attempt.bridge, 0, attempt.broken_streak + 1)
            elif len(backlog) < args.backlog:
                backlog.append((at, attempt))
                out["max_backlog"] = max(out["max_backlog"], len(backlog))
            else:
                out["syn_drops"] += 1
                push(attempt.first_syn + SYN_RTO_S * (2 ** (tries + 1) - 1), "syn", attempt,
                     tries + 1)
        # The loop takes the oldest ready work; with --pause-at it stops accepting while that
        # many connections wait for a slot, leaving the rest to the kernel.
        if queue and (not backlog or queue[0][0] <= backlog[0][0]
                      or len(queue) >= args.pause_at):
            accepted, attempt = queue.popleft()
            if attempt.over:  # its client gave up: reading the EOF and closing
                out["stale"] += 1
                spend(args.shed_us)
            elif now - accepted > wait_s:
                spend(args.shed_us)
                turned_away(attempt)
            else:
                spend(args.attach_us)
                attempt.over = True
                attached += 1
                out["last_attach"] = now
            continue
        if backlog:
            _, attempt = backlog.popleft()
            spend(args.accept_us)
            if attempt.over:
                out["stale"] += 1
                spend(args.shed_us)
            elif len(queue) >= args.queue_max:
                spend(args.shed_us)
                turned_away(attempt)
            else:
                queue.append((now, attempt))
            continue
        now = events[0][0]  # idle until the next SYN
    return out


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
    parser.add_argument("--queue-max", type=int, default=None,
                        help="how many may wait for a slot (default: relayd's bound for a cap of"
                             " --max-connections, half of it and at least the header's"
                             f" {QUEUE_MAX})")
    parser.add_argument("--max-connections", type=int, default=None,
                        help="relayd's connection cap (default: --bridges, the least a relayd"
                             " holding them all has)")
    parser.add_argument("--busy-first-ms", type=int, default=BUSY_FIRST_MS)
    parser.add_argument("--busy-cap-ms", type=int, default=BUSY_CAP_MS)
    parser.add_argument("--backlog", type=int, default=LISTEN_BACKLOG,
                        help="the kernel's accept queue (this box's somaxconn is 4096)")
    parser.add_argument("--pause-at", type=int, default=10**9,
                        help="stop accepting while this many wait for a handshake slot "
                             "(relayd does not: a what-if)")
    parser.add_argument("--deadline-s", type=float, default=ATTEMPT_DEADLINE_MS / 1000,
                        help="otunnel's deadline for an attempt, from its first SYN")
    parser.add_argument("--seeds", type=int, default=3, help="storms to average over")
    parser.add_argument("--give-up-s", type=float, default=300,
                        help="a storm not over by then is reported as not settling")
    args = parser.parse_args()
    if args.queue_max is None:  # relayd/handshake_slots.cc, maxWaitingFor
        cap = args.max_connections if args.max_connections is not None else args.bridges
        args.queue_max = max(QUEUE_MAX, cap // 2)

    results = [run_storm(args, seed) for seed in range(args.seeds)]
    if any(r["last_attach"] is None for r in results):
        print(f"model: the storm did not settle within {args.give_up_s:g} s: the core spends"
              " itself turning connections away")
        return

    def mean(key):
        return statistics.mean(r[key] for r in results)
    back = [r["last_attach"] for r in results]
    pause = "" if args.pause_at >= 10**9 else f", accepting paused at {args.pause_at} waiting"
    print(f"model: {args.bridges} bridges, attach {args.attach_us:g} us, accept {args.accept_us:g}"
          f" us, shed {args.shed_us:g} us, queue {args.queue_max} for {args.queue_wait_ms:g} ms,"
          f" busy waits {BUSY_MIN_MS}-{args.busy_first_ms}..{args.busy_cap_ms} ms, backlog"
          f" {args.backlog}{pause} ({args.seeds} seeds)")
    print(f"model: sheds per bridge {mean('sheds') / args.bridges:.2f}; SYNs dropped by a full"
          f" backlog {mean('syn_drops'):.0f}; attempts timed out {mean('timeouts'):.0f}"
          f" (their connections closed when reached: {mean('stale'):.0f})")
    print(f"model: all back {statistics.mean(back):.1f} s after the drain began"
          f" (range {min(back):.1f}-{max(back):.1f})")
    print(f"model: core busy {mean('busy') / args.bridges * 1e6:.0f} us per bridge,"
          f" {mean('busy'):.1f} s in all ({mean('busy') / statistics.mean(back) * 100:.0f} %"
          " of the storm)")
    print(f"model: the attaches alone {args.bridges * args.attach_us / 1e6:.1f} s of core;"
          f" most connections in the kernel's backlog {max(r['max_backlog'] for r in results)};"
          f" longest wait a bridge scheduled {max(r['longest_wait_ms'] for r in results):.0f} ms")


if __name__ == "__main__":
    main()
