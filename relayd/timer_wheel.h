// One hashed timer wheel for every timeout of the relay's connections and bridges (idle, half
// close, ClientHello, attach, heartbeat, stalled writes), so that 100,000 bridges need no timer
// handle each: an entry is an intrusive node of 56 bytes inside its owner, and the loop advances
// the wheel from one uv_timer_t (relayd/relay_server.cc) every tick.
//
// Pure logic: no libuv, time is passed in (milliseconds, any monotonic origin). Loop thread only.
// Resolution is the tick (default 250 ms): an entry fires at the first advance() at or after its
// deadline rounded up to a tick; never early. Deadlines beyond the wheel's span (slots * tick) are
// kept in their slot with a round count, so any delay works.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/prefetch.h"

namespace ot::relayd {

class TimerWheel;

// Embed one per timeout in the owning object. The owner's callback runs from advance(); it may
// re-arm this entry or any other, cancel others, or destroy the owner (the entry is unlinked
// before the callback runs). Destroying an armed entry cancels it.
class TimerEntry {
 public:
  using Callback = void (*)(TimerEntry* entry, void* owner);
  // Optional. Called for a batch of due entries, one stage at a time over the whole batch
  // (0, 1, ... kPrefetchStages - 1), before their callbacks run: stage k asks for the lines the
  // callback will read k pointers away from the owner. An idle bridge's state was last touched a
  // heartbeat ago, so every pointer its ping follows is a cache miss, ~250 ns each on this box;
  // fetched a stage at a time for many owners, the misses overlap instead of following one
  // another (docs/capacity.md, "The heartbeat's misses, fetched together"). Must only read, and
  // only what the owner holds at that moment: it runs before any callback of the batch.
  using Prefetch = void (*)(const void* owner, unsigned stage);

  TimerEntry(Callback callback, void* owner, Prefetch prefetch = nullptr)
      : callback_(callback), owner_(owner), prefetch_(prefetch) {}
  ~TimerEntry() { cancel(); }
  TimerEntry(const TimerEntry&) = delete;
  TimerEntry& operator=(const TimerEntry&) = delete;

  [[nodiscard]] bool armed() const { return wheel_ != nullptr; }
  [[nodiscard]] uint64_t deadline() const { return deadline_; }
  void cancel();

 private:
  friend class TimerWheel;
  Callback callback_;
  void* owner_;
  Prefetch prefetch_;
  TimerWheel* wheel_ = nullptr;
  TimerEntry* prev_ = nullptr;
  TimerEntry* next_ = nullptr;
  uint64_t deadline_ = 0;
};

class TimerWheel {
 public:
  explicit TimerWheel(uint64_t nowMs, uint32_t tickMs = 250, size_t slots = 4096);
  ~TimerWheel();  // cancels every entry still armed
  TimerWheel(const TimerWheel&) = delete;
  TimerWheel& operator=(const TimerWheel&) = delete;

  // (Re)arms `entry` to fire `delayMs` after `nowMs`.
  void schedule(TimerEntry& entry, uint64_t nowMs, uint64_t delayMs);

  // Fires every entry whose deadline is <= nowMs, in no particular order within a tick.
  void advance(uint64_t nowMs);

  [[nodiscard]] size_t size() const { return size_; }
  [[nodiscard]] uint32_t tickMs() const { return tickMs_; }

 private:
  friend class TimerEntry;
  void unlink(TimerEntry& entry);
  void link(TimerEntry& entry);
  // The prefetch stages of the batch of due entries that starts at `first`.
  void prefetchBatch(TimerEntry* first);

  uint32_t tickMs_;
  std::vector<TimerEntry*> slots_;  // heads of intrusive doubly linked lists
  uint64_t currentTick_;            // the next tick advance() will process
  size_t size_ = 0;
};

}  // namespace ot::relayd
