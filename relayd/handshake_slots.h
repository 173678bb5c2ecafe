// Admission to the API domain's TLS handshakes during a reconnect storm: at most `slots` (256)
// handshakes run at once; a connection that finds none free waits in a FIFO for up to `waitMs`
// (1 s) and is shed (closed before its handshake, opentunnel_connections_shed_total{reason=
// "handshakes"}) if none frees in time, so its client backs off instead of queueing until its own
// connect timeout. At most `maxWaiting` wait at once (relayd: half its connection cap, at least
// 4,096; maxWaitingFor); one more is shed at once. A connection that waits is one that does not
// come back a second later to be turned away again, so in a storm a long bound means fewer
// sheds, each of which costs an accept, a ClientHello read and a reset (docs/capacity.md).
//
// A freed slot goes straight to the oldest waiter whose wait has not run out. Waits all last
// `waitMs`, so the queue is in deadline order and one TimerEntry on the relay's wheel, armed for
// the oldest deadline, sheds every expired waiter (the wheel's tick, 250 ms, is the resolution).
// Nothing is allocated per waiter here: a Waiter is an intrusive node in its owner.
//
// Re-entrant: onSlot/onShed may release slots or admit others; grants made while a grant is
// running are taken by the outer loop, so the call stack stays flat however long the queue is.
// Pure logic over the wheel and a clock; loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/clock.h"
#include "relayd/timer_wheel.h"

namespace ot::relayd {

class HandshakeSlots {
 public:
  struct Limits {
    uint32_t slots = 256;
    uint64_t waitMs = 1'000;
    size_t maxWaiting = 4'096;
  };

  // A connection waiting for a slot. Destroying a queued waiter takes it out of the queue.
  class Waiter {
   public:
    Waiter() = default;
    Waiter(const Waiter&) = delete;
    Waiter& operator=(const Waiter&) = delete;
    // A slot is held for this waiter now (give it back with release() when the handshake ends).
    virtual void onSlot() = 0;
    // No slot within the wait: close the connection unserved. No slot is held.
    virtual void onShed() = 0;
    [[nodiscard]] bool queued() const { return slots_ != nullptr; }

   protected:
    virtual ~Waiter();

   private:
    friend class HandshakeSlots;
    HandshakeSlots* slots_ = nullptr;
    Waiter* next_ = nullptr;
    Waiter* prev_ = nullptr;
    uint64_t deadlineMs_ = 0;
  };

  enum class Admission : uint8_t {
    kSlot,    // a slot is held now; nothing was queued
    kQueued,  // `waiter` hears onSlot or onShed later (never from inside admit)
    kShed,    // the queue is full: close it now (nothing held)
  };

  HandshakeSlots(Limits limits, TimerWheel& wheel, Clock clock);
  ~HandshakeSlots();  // waiters still queued are let go (their owners are closing anyway)
  HandshakeSlots(const HandshakeSlots&) = delete;
  HandshakeSlots& operator=(const HandshakeSlots&) = delete;

  // Takes a slot when one is free and nobody waits (true); the fast path, with no waiter made.
  [[nodiscard]] bool tryTake();
  [[nodiscard]] Admission admit(Waiter& waiter);
  // A handshake ended (done, failed, timed out, or its connection went): its slot goes to the
  // oldest waiter still in time, or back to the pool.
  void release();
  // Takes a queued waiter out (its connection went while waiting); nothing happens otherwise.
  void cancel(Waiter& waiter);

  // The waiting bound for a relay holding at most `maxConnections` at once: half of them, so
  // the other half stays for bridges, visitors and the handshakes in progress; never below the
  // default (a small cap).
  [[nodiscard]] static size_t maxWaitingFor(uint64_t maxConnections);
  // Applies to admissions from now on; waiters already queued stay.
  void setMaxWaiting(size_t maxWaiting) { limits_.maxWaiting = maxWaiting; }

  [[nodiscard]] uint32_t inProgress() const { return inProgress_; }
  [[nodiscard]] size_t waiting() const { return waiting_; }
  [[nodiscard]] const Limits& limits() const { return limits_; }

 private:
  [[nodiscard]] uint64_t now() const { return static_cast<uint64_t>(clock_()); }
  void pushBack(Waiter& waiter);
  Waiter* popFront();
  // Sheds the waiters whose time is up, then gives free slots to the oldest; re-arms the timer.
  void pump();
  void arm();
  static void onTimer(TimerEntry* entry, void* owner);

  Limits limits_;
  TimerWheel& wheel_;
  Clock clock_;
  TimerEntry timer_;
  Waiter* head_ = nullptr;
  Waiter* tail_ = nullptr;
  size_t waiting_ = 0;
  uint32_t inProgress_ = 0;
  bool pumping_ = false;
};

}  // namespace ot::relayd
