#include "relayd/timer_wheel.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <utility>
#include <vector>

using ot::relayd::TimerEntry;
using ot::relayd::TimerWheel;

namespace {

// An owner that records when its entry fired (the `now` of the advance that fired it).
struct Probe {
  Probe() : entry(&Probe::onFire, this) {}
  static void onFire(TimerEntry*, void* owner) {
    auto* self = static_cast<Probe*>(owner);
    self->fired += 1;
    self->firedAt = *self->clock;
    if (self->then) self->then(*self);
  }
  TimerEntry entry;
  int fired = 0;
  uint64_t firedAt = 0;
  const uint64_t* clock = nullptr;
  std::function<void(Probe&)> then;
};

}  // namespace

TEST_CASE("timer wheel: fires at the first tick at or after the deadline, never early") {
  uint64_t now = 1000;
  TimerWheel wheel(now, 250, 16);
  Probe probe;
  probe.clock = &now;
  wheel.schedule(probe.entry, now, 300);  // deadline 1300, rounded up to the tick ending at 1500
  CHECK(probe.entry.armed());
  CHECK(probe.entry.deadline() == 1300);
  CHECK(wheel.size() == 1);
  for (now = 1000; now < 1500; now += 1) {
    wheel.advance(now);
    REQUIRE(probe.fired == 0);
  }
  now = 1500;
  wheel.advance(now);
  CHECK(probe.fired == 1);
  CHECK(probe.firedAt == 1500);
  CHECK_FALSE(probe.entry.armed());
  CHECK(wheel.size() == 0);
  wheel.advance(100000);
  CHECK(probe.fired == 1);
}

TEST_CASE("timer wheel: a deadline on a tick boundary fires on that tick") {
  uint64_t now = 0;
  TimerWheel wheel(now, 100, 8);
  Probe probe;
  probe.clock = &now;
  wheel.schedule(probe.entry, now, 200);
  now = 199;
  wheel.advance(now);
  CHECK(probe.fired == 0);
  now = 200;
  wheel.advance(now);
  CHECK(probe.fired == 1);
}

TEST_CASE("timer wheel: random delays and steps fire after the deadline and within a tick") {
  std::mt19937_64 random(42);
  uint64_t now = 12345;
  const uint32_t tick = 50;
  TimerWheel wheel(now, tick, 64);
  std::vector<std::unique_ptr<Probe>> probes;
  std::vector<uint64_t> deadlines;
  for (int i = 0; i < 2000; ++i) {
    auto probe = std::make_unique<Probe>();
    probe->clock = &now;
    const uint64_t delay = random() % 20000;
    wheel.schedule(probe->entry, now, delay);
    deadlines.push_back(now + delay);
    probes.push_back(std::move(probe));
  }
  CHECK(wheel.size() == 2000);
  uint64_t previous = now;
  while (wheel.size() > 0) {
    previous = now;
    now += 1 + random() % 37;
    wheel.advance(now);
    for (size_t i = 0; i < probes.size(); ++i) {
      if (probes[i]->fired == 1 && probes[i]->firedAt == now) {
        REQUIRE(now >= deadlines[i]);
        // The first advance at or after the deadline rounded up to a tick.
        const uint64_t rounded = (deadlines[i] + tick - 1) / tick * tick;
        REQUIRE(previous < rounded);
      }
    }
  }
  for (const auto& probe : probes) REQUIRE(probe->fired == 1);
}

TEST_CASE("timer wheel: random cancels and re-arms, from callbacks too, fire what is armed") {
  // A slot is an array in blocks with swap-removal, the due entries a list with holes
  // (timer_wheel.cc): whatever order cancels come in, from outside or from callbacks of the same
  // tick, every entry still armed fires once, in the first advance at or after its deadline, and
  // no other does.
  std::mt19937_64 random(7);
  uint64_t now = 1000;
  const uint32_t tick = 10;
  // A small wheel: many entries share a slot (more than a block of 64 holds), many wait rounds.
  TimerWheel wheel(now, tick, 16);
  constexpr size_t kProbes = 3000;
  constexpr uint64_t kUnarmed = UINT64_MAX;
  std::vector<std::unique_ptr<Probe>> probes;
  std::vector<uint64_t> expected(kProbes, kUnarmed);  // the deadline each one should fire at
  uint64_t previous = now;
  int fired = 0;
  for (size_t i = 0; i < kProbes; ++i) {
    probes.push_back(std::make_unique<Probe>());
    probes.back()->clock = &now;
  }
  for (size_t i = 0; i < kProbes; ++i) {
    probes[i]->then = [&, i](Probe&) {
      ++fired;
      REQUIRE(expected[i] != kUnarmed);
      REQUIRE(now >= expected[i]);
      REQUIRE(previous < (expected[i] + tick - 1) / tick * tick);
      expected[i] = kUnarmed;
      // A callback cancels one entry and re-arms another, either of which may be due this tick.
      const size_t cancelled = random() % kProbes;
      probes[cancelled]->entry.cancel();
      expected[cancelled] = kUnarmed;
      const size_t rearmed = random() % kProbes;
      const uint64_t delay = 1 + random() % 400;  // at least 1: the deadline is never moved
      wheel.schedule(probes[rearmed]->entry, now, delay);
      expected[rearmed] = now + delay;
    };
  }
  for (int step = 0; step < 300; ++step) {
    for (int op = 0; op < 100; ++op) {
      const size_t i = random() % kProbes;
      if (random() % 3 == 0) {
        probes[i]->entry.cancel();
        expected[i] = kUnarmed;
      } else {
        const uint64_t delay = 1 + random() % 400;
        wheel.schedule(probes[i]->entry, now, delay);
        expected[i] = now + delay;
      }
    }
    previous = now;
    now += 1 + random() % 25;
    wheel.advance(now);
    size_t armed = 0;
    for (size_t i = 0; i < kProbes; ++i) {
      REQUIRE(probes[i]->entry.armed() == (expected[i] != kUnarmed));
      if (expected[i] == kUnarmed) continue;
      ++armed;
      REQUIRE(probes[i]->entry.deadline() == expected[i]);
      REQUIRE((expected[i] + tick - 1) / tick > now / tick);  // not overdue
    }
    REQUIRE(wheel.size() == armed);
  }
  CHECK(fired > 1000);
}

TEST_CASE("timer wheel: the blocks follow the entries armed, not every slot's largest size") {
  // 2,000 heartbeats of 15 s on the default wheel (4,096 slots of 250 ms, a span of 1,024 s),
  // run for 3,000 s: every slot holds ~33 entries in turn, but only the 60 slots ahead of the
  // clock hold any at a time, so the pool holds about a block per busy slot, not one per slot.
  uint64_t now = 0;
  TimerWheel wheel(now, 250, 4096);
  constexpr uint64_t kHeartbeatMs = 15000;
  std::vector<std::unique_ptr<Probe>> probes;
  for (int i = 0; i < 2000; ++i) {
    probes.push_back(std::make_unique<Probe>());
    Probe& probe = *probes.back();
    probe.clock = &now;
    probe.then = [&](Probe& self) { wheel.schedule(self.entry, now, kHeartbeatMs); };
    wheel.schedule(probe.entry, now, static_cast<uint64_t>(i) * kHeartbeatMs / 2000);
  }
  for (now = 250; now <= 3000000; now += 250) wheel.advance(now);
  CHECK(wheel.size() == 2000);
  for (const auto& probe : probes) CHECK(probe->fired >= 199);
  CHECK(wheel.blocksHeld() <= 2000 / 64 + 61 + 1);
}

TEST_CASE("timer wheel: cancel and destruction of an armed entry stop it") {
  uint64_t now = 0;
  TimerWheel wheel(now, 10, 8);
  Probe kept;
  Probe cancelled;
  kept.clock = &now;
  cancelled.clock = &now;
  auto destroyed = std::make_unique<Probe>();
  wheel.schedule(kept.entry, now, 30);
  wheel.schedule(cancelled.entry, now, 30);
  wheel.schedule(destroyed->entry, now, 30);
  CHECK(wheel.size() == 3);
  cancelled.entry.cancel();
  cancelled.entry.cancel();  // idempotent
  CHECK_FALSE(cancelled.entry.armed());
  destroyed.reset();
  CHECK(wheel.size() == 1);
  now = 30;
  wheel.advance(now);
  CHECK(kept.fired == 1);
  CHECK(cancelled.fired == 0);
  CHECK(wheel.size() == 0);
}

TEST_CASE("timer wheel: re-scheduling an armed entry moves its deadline") {
  uint64_t now = 0;
  TimerWheel wheel(now, 10, 8);
  Probe probe;
  probe.clock = &now;
  wheel.schedule(probe.entry, now, 30);
  wheel.schedule(probe.entry, now, 500);
  CHECK(wheel.size() == 1);
  CHECK(probe.entry.deadline() == 500);
  for (now = 10; now < 500; now += 10) wheel.advance(now);
  CHECK(probe.fired == 0);
  now = 500;
  wheel.advance(now);
  CHECK(probe.fired == 1);
}

TEST_CASE("timer wheel: a callback re-arming its entry fires periodically, not in a loop") {
  uint64_t now = 0;
  TimerWheel wheel(now, 10, 8);
  Probe periodic;
  periodic.clock = &now;
  periodic.then = [&](Probe& self) { wheel.schedule(self.entry, now, 40); };
  Probe immediate;  // re-arms with no delay: next tick, not again in the same advance
  immediate.clock = &now;
  immediate.then = [&](Probe& self) { wheel.schedule(self.entry, now, 0); };
  Probe sameSlot;  // re-arms exactly one wheel span ahead: lands in the slot being processed
  sameSlot.clock = &now;
  sameSlot.then = [&](Probe& self) { wheel.schedule(self.entry, now, 80); };
  wheel.schedule(periodic.entry, now, 40);
  wheel.schedule(immediate.entry, now, 0);
  wheel.schedule(sameSlot.entry, now, 80);
  for (now = 10; now <= 400; now += 10) wheel.advance(now);
  CHECK(periodic.fired == 10);   // 40, 80, ..., 400
  CHECK(immediate.fired == 40);  // every tick from 10 to 400
  CHECK(sameSlot.fired == 5);    // 80, 160, 240, 320, 400
  CHECK(wheel.size() == 3);
}

TEST_CASE("timer wheel: callbacks may destroy their owner or cancel and re-arm others") {
  uint64_t now = 0;
  TimerWheel wheel(now, 10, 8);
  auto selfDestroying = std::make_unique<Probe>();
  selfDestroying->clock = &now;
  int destroyedFired = 0;
  selfDestroying->then = [&](Probe&) {
    ++destroyedFired;
    selfDestroying.reset();  // the owner (and its entry) go away inside the callback
  };
  // Three entries due on the same tick; whichever fires first cancels one and destroys another,
  // so at most one more callback of the three may run.
  std::vector<std::unique_ptr<Probe>> group;
  for (int i = 0; i < 3; ++i) group.push_back(std::make_unique<Probe>());
  int groupFired = 0;
  for (auto& probe : group) {
    probe->clock = &now;
    probe->then = [&](Probe& self) {
      ++groupFired;
      for (auto& other : group) {
        if (other && other.get() != &self) {
          if (other->entry.armed()) {
            other.reset();
            break;
          }
        }
      }
    };
    wheel.schedule(probe->entry, now, 20);
  }
  Probe moved;  // armed for 20, pushed to 1000 by another entry's callback at 10
  moved.clock = &now;
  Probe mover;
  mover.clock = &now;
  mover.then = [&](Probe&) { wheel.schedule(moved.entry, now, 1000); };
  wheel.schedule(selfDestroying->entry, now, 20);
  wheel.schedule(mover.entry, now, 10);
  wheel.schedule(moved.entry, now, 20);
  now = 10;
  wheel.advance(now);
  CHECK(mover.fired == 1);
  now = 20;
  wheel.advance(now);
  CHECK(destroyedFired == 1);
  CHECK(selfDestroying == nullptr);
  CHECK(moved.fired == 0);
  CHECK(moved.entry.armed());
  // The first group member to fire destroys a still-armed (due) one, which then never fires; the
  // last one fires and finds no armed other. So two fire, one is destroyed, none fires twice.
  int alive = 0;
  for (auto& probe : group) {
    if (probe) {
      ++alive;
      CHECK(probe->fired <= 1);
      CHECK_FALSE(probe->entry.armed());
    }
  }
  CHECK(groupFired == alive);
  CHECK(groupFired + (3 - alive) == 3);
  CHECK(groupFired == 2);
  CHECK(wheel.size() == 1);  // only `moved`
}

TEST_CASE("timer wheel: a callback cancelling a due entry of the same tick prevents it") {
  uint64_t now = 0;
  TimerWheel wheel(now, 10, 4);
  Probe a;
  Probe b;
  a.clock = &now;
  b.clock = &now;
  a.then = [&](Probe&) { b.entry.cancel(); };
  b.then = [&](Probe&) { a.entry.cancel(); };
  wheel.schedule(a.entry, now, 10);
  wheel.schedule(b.entry, now, 10);
  now = 10;
  wheel.advance(now);
  CHECK(a.fired + b.fired == 1);
  CHECK(wheel.size() == 0);
}

TEST_CASE("timer wheel: prefetch stages run over a batch of due entries before their callbacks") {
  uint64_t now = 0;
  TimerWheel wheel(now, 10, 16);
  // What happened, in order: (owner index, stage) for a prefetch, (owner index, -1) for a fire.
  std::vector<std::pair<int, int>> events;
  struct Owner {
    Owner(std::vector<std::pair<int, int>>& events, int position, bool withPrefetch)
        : entry(&Owner::onFire, this, withPrefetch ? &Owner::onPrefetch : nullptr),
          log(events),
          index(position) {}
    static void onFire(TimerEntry*, void* owner) {
      auto* self = static_cast<Owner*>(owner);
      self->log.emplace_back(self->index, -1);
      if (self->then) self->then();
    }
    static void onPrefetch(const void* owner, unsigned stage) {
      const auto* self = static_cast<const Owner*>(owner);
      self->log.emplace_back(self->index, static_cast<int>(stage));
    }
    TimerEntry entry;
    std::vector<std::pair<int, int>>& log;
    int index;
    std::function<void()> then;
  };
  // More due entries than one batch, every fourth without a prefetch hook.
  constexpr int kCount = static_cast<int>(ot::kPrefetchBatch) * 2 + 5;
  std::vector<std::unique_ptr<Owner>> owners;
  for (int i = 0; i < kCount; ++i) {
    owners.push_back(std::make_unique<Owner>(events, i, i % 4 != 0));
    wheel.schedule(owners.back()->entry, now, 10);
  }
  // Whichever fires first destroys another due entry of its batch that has not fired yet: that
  // one never fires, and no stage runs for it after it is gone (ASan would see the owner read).
  int destroyed = -1;
  for (auto& owner : owners) {
    Owner* self = owner.get();
    self->then = [&, self] {
      if (destroyed >= 0) return;
      for (auto& other : owners) {
        if (other && other.get() != self && other->entry.armed()) {
          destroyed = other->index;
          other.reset();
          return;
        }
      }
    };
  }
  now = 10;
  wheel.advance(now);
  REQUIRE(destroyed >= 0);
  CHECK(wheel.size() == 0);

  std::vector<int> fires(kCount, 0);
  std::vector<int> nextStage(kCount, 0);
  int firedWithoutStages = 0;
  for (const auto& [index, stage] : events) {
    const auto at = static_cast<size_t>(index);
    if (stage < 0) {
      ++fires[at];
      // A hooked entry's stages all ran before it fired, except for the one entry per later
      // batch that fires in place of the destroyed one (its batch was taken before).
      if (index % 4 != 0 && nextStage[at] == 0) ++firedWithoutStages;
      if (index % 4 != 0 && nextStage[at] != 0) {
        CHECK(nextStage[at] == static_cast<int>(ot::kPrefetchStages));
      }
    } else {
      CHECK(index % 4 != 0);          // no hook, no stage
      CHECK(fires[at] == 0);          // never after its own callback
      CHECK(stage == nextStage[at]);  // stages in order, each once
      ++nextStage[at];
    }
  }
  for (int i = 0; i < kCount; ++i) {
    CHECK(fires[static_cast<size_t>(i)] == (i == destroyed ? 0 : 1));
  }
  CHECK(firedWithoutStages <= 1);
  // The stages of a batch come before the batch's first callback: the first event is a stage,
  // and stage 0 of the whole first batch precedes its last stage's calls.
  REQUIRE_FALSE(events.empty());
  CHECK(events.front().second == 0);
  size_t firstFire = 0;
  while (firstFire < events.size() && events[firstFire].second >= 0) ++firstFire;
  size_t hookedInFirstBatch = 0;
  for (size_t i = 0; i < firstFire; ++i) hookedInFirstBatch += events[i].second == 0 ? 1U : 0U;
  CHECK(hookedInFirstBatch > 1);
  CHECK(firstFire == hookedInFirstBatch * ot::kPrefetchStages);
}

TEST_CASE("timer wheel: 100000 entries fire exactly once each") {
  uint64_t now = 0;
  TimerWheel wheel(now, 250, 4096);
  struct Counter {
    Counter() : entry(&Counter::onFire, this) {}
    static void onFire(TimerEntry*, void* owner) { static_cast<Counter*>(owner)->fired += 1; }
    TimerEntry entry;
    int fired = 0;
  };
  std::vector<Counter> counters(100000);
  std::mt19937 random(7);
  for (auto& counter : counters) wheel.schedule(counter.entry, now, random() % 3'600'000);
  CHECK(wheel.size() == 100000);
  for (now = 0; now <= 3'600'000; now += 250) wheel.advance(now);
  CHECK(wheel.size() == 0);
  for (const auto& counter : counters) REQUIRE(counter.fired == 1);
}

TEST_CASE("timer wheel: delays beyond the wheel's span wait their rounds") {
  uint64_t now = 0;
  TimerWheel wheel(now, 10, 8);  // span 80 ms
  Probe probe;
  probe.clock = &now;
  wheel.schedule(probe.entry, now, 1005);
  for (now = 10; now < 1010; now += 10) {
    wheel.advance(now);
    REQUIRE(probe.fired == 0);
  }
  now = 1010;
  wheel.advance(now);
  CHECK(probe.fired == 1);
}

TEST_CASE("timer wheel: a jump of many spans fires what is due and keeps the rest") {
  uint64_t now = 5;
  TimerWheel wheel(now, 10, 8);
  std::vector<std::unique_ptr<Probe>> early;
  for (int i = 0; i < 20; ++i) {
    early.push_back(std::make_unique<Probe>());
    early.back()->clock = &now;
    wheel.schedule(early.back()->entry, now, static_cast<uint64_t>(i) * 37);
  }
  Probe late;
  late.clock = &now;
  wheel.schedule(late.entry, now, 1'000'000);
  Probe rearm;  // re-arms for 0 ms from inside the jump: fires at the next tick, once per advance
  rearm.clock = &now;
  rearm.then = [&](Probe& self) { wheel.schedule(self.entry, now, 0); };
  wheel.schedule(rearm.entry, now, 3);
  now = 100'000;
  wheel.advance(now);
  for (const auto& probe : early) CHECK(probe->fired == 1);
  CHECK(late.fired == 0);
  CHECK(late.entry.armed());
  CHECK(rearm.fired == 1);
  CHECK(rearm.entry.deadline() == 100'010);
  now = 100'009;
  wheel.advance(now);
  CHECK(rearm.fired == 1);
  now = 100'010;
  wheel.advance(now);
  CHECK(rearm.fired == 2);
  now = 1'000'009;  // the deadline 1'000'005 rounds up to the tick ending at 1'000'010
  wheel.advance(now);
  CHECK(late.fired == 0);
  now = 1'000'010;
  wheel.advance(now);
  CHECK(late.fired == 1);
  CHECK(late.firedAt == 1'000'010);
}

TEST_CASE("timer wheel: destroying the wheel disarms its entries") {
  Probe probe;
  {
    TimerWheel wheel(0, 10, 8);
    wheel.schedule(probe.entry, 0, 100);
    CHECK(probe.entry.armed());
  }
  CHECK_FALSE(probe.entry.armed());
}
