#include "relayd/handshake_slots.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/clock.h"

using ot::ManualClock;
using ot::relayd::HandshakeSlots;
using ot::relayd::TimerWheel;

namespace {

// A waiter that records what it heard and, optionally, does something then (a nested release).
struct Probe final : HandshakeSlots::Waiter {
  void onSlot() override {
    granted += 1;
    if (then) then();
  }
  void onShed() override { shed += 1; }
  int granted = 0;
  int shed = 0;
  std::function<void()> then;
};

struct Rig {
  explicit Rig(HandshakeSlots::Limits limits) : wheel(0), slots(limits, wheel, clock.clock()) {}
  void advance(int64_t ms) {
    clock.advance(ms);
    wheel.advance(static_cast<uint64_t>(clock.nowMs()));
  }
  ManualClock clock{0};
  TimerWheel wheel;
  HandshakeSlots slots;
};

}  // namespace

TEST_CASE("handshake slots: a connection past the slots waits, and gets the next freed slot") {
  Rig rig({.slots = 2, .waitMs = 1'000, .maxWaiting = 8});
  CHECK(rig.slots.tryTake());
  CHECK(rig.slots.tryTake());
  CHECK_FALSE(rig.slots.tryTake());
  Probe first;
  Probe second;
  CHECK(rig.slots.admit(first) == HandshakeSlots::Admission::kQueued);
  CHECK(rig.slots.admit(second) == HandshakeSlots::Admission::kQueued);
  CHECK(rig.slots.waiting() == 2);
  // While someone waits, a newcomer does not jump the queue.
  CHECK_FALSE(rig.slots.tryTake());

  rig.advance(500);
  CHECK(first.granted == 0);
  rig.slots.release();  // the oldest waiter gets the slot at once
  CHECK(first.granted == 1);
  CHECK(second.granted == 0);
  CHECK(rig.slots.inProgress() == 2);
  CHECK(rig.slots.waiting() == 1);
  rig.slots.release();
  CHECK(second.granted == 1);
  CHECK(rig.slots.waiting() == 0);
  CHECK(first.shed + second.shed == 0);
}

TEST_CASE("handshake slots: no slot within the wait sheds, within one tick of the deadline") {
  Rig rig({.slots = 1, .waitMs = 1'000, .maxWaiting = 8});
  CHECK(rig.slots.tryTake());
  Probe early;
  Probe late;
  CHECK(rig.slots.admit(early) == HandshakeSlots::Admission::kQueued);
  rig.advance(400);
  CHECK(rig.slots.admit(late) == HandshakeSlots::Admission::kQueued);
  rig.advance(500);  // t=900: nobody's wait is over
  CHECK(early.shed == 0);
  rig.advance(350);  // t=1250: `early`'s second is over (one wheel tick of slack at most)
  CHECK(early.shed == 1);
  CHECK(late.shed == 0);
  CHECK(rig.slots.waiting() == 1);
  rig.advance(500);  // t=1750: `late`'s too
  CHECK(late.shed == 1);
  CHECK(rig.slots.waiting() == 0);
  CHECK(early.granted + late.granted == 0);
  CHECK(rig.slots.inProgress() == 1);
}

TEST_CASE("handshake slots: a slot freed after a waiter's time ran out sheds it, not grants it") {
  Rig rig({.slots = 1, .waitMs = 1'000, .maxWaiting = 8});
  CHECK(rig.slots.tryTake());
  Probe waiter;
  CHECK(rig.slots.admit(waiter) == HandshakeSlots::Admission::kQueued);
  rig.clock.advance(1'100);  // the wheel has not ticked yet
  rig.slots.release();
  CHECK(waiter.shed == 1);
  CHECK(waiter.granted == 0);
  CHECK(rig.slots.inProgress() == 0);
}

TEST_CASE("handshake slots: the queue is bounded; past it a connection is shed at once") {
  Rig rig({.slots = 1, .waitMs = 1'000, .maxWaiting = 2});
  CHECK(rig.slots.tryTake());
  Probe a;
  Probe b;
  Probe c;
  CHECK(rig.slots.admit(a) == HandshakeSlots::Admission::kQueued);
  CHECK(rig.slots.admit(b) == HandshakeSlots::Admission::kQueued);
  CHECK(rig.slots.admit(c) == HandshakeSlots::Admission::kShed);
  CHECK_FALSE(c.queued());
  CHECK(rig.slots.waiting() == 2);

  // A longer bound applies to the next admission; those queued stay.
  rig.slots.setMaxWaiting(3);
  CHECK(rig.slots.admit(c) == HandshakeSlots::Admission::kQueued);
  Probe d;
  CHECK(rig.slots.admit(d) == HandshakeSlots::Admission::kShed);
  CHECK(rig.slots.waiting() == 3);
}

TEST_CASE("handshake slots: relayd lets half its connection cap wait, never fewer than 4,096") {
  CHECK(HandshakeSlots::maxWaitingFor(19'736) == 9'868);
  CHECK(HandshakeSlots::maxWaitingFor(200'000) == 100'000);
  CHECK(HandshakeSlots::maxWaitingFor(1'000) == 4'096);
  CHECK(HandshakeSlots::maxWaitingFor(0) == 4'096);
}

TEST_CASE("handshake slots: a waiter that goes away leaves the queue, and the timer follows") {
  Rig rig({.slots = 1, .waitMs = 1'000, .maxWaiting = 8});
  CHECK(rig.slots.tryTake());
  Probe kept;
  {
    Probe gone;
    CHECK(rig.slots.admit(gone) == HandshakeSlots::Admission::kQueued);
    rig.advance(500);
    CHECK(rig.slots.admit(kept) == HandshakeSlots::Admission::kQueued);
  }  // `gone` is destroyed while queued
  CHECK(rig.slots.waiting() == 1);
  rig.advance(750);  // t=1250: gone's deadline passed; kept's (1500) not
  CHECK(kept.shed == 0);
  rig.slots.release();
  CHECK(kept.granted == 1);
}

TEST_CASE(
    "handshake slots: grants made inside a grant are taken by the outer loop (no recursion)") {
  Rig rig({.slots = 1, .waitMs = 1'000, .maxWaiting = 4'096});
  CHECK(rig.slots.tryTake());
  // Every waiter's handshake fails at once, giving its slot back from inside onSlot.
  std::vector<std::unique_ptr<Probe>> waiters;
  for (int i = 0; i < 4'000; ++i) {
    auto probe = std::make_unique<Probe>();
    probe->then = [&rig] { rig.slots.release(); };
    CHECK(rig.slots.admit(*probe) == HandshakeSlots::Admission::kQueued);
    waiters.push_back(std::move(probe));
  }
  rig.slots.release();
  for (const auto& probe : waiters) CHECK(probe->granted == 1);
  CHECK(rig.slots.waiting() == 0);
  CHECK(rig.slots.inProgress() == 0);
}
