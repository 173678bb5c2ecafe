// One hashed timer wheel for every timeout of the relay's connections and bridges (idle, half
// close, ClientHello, attach, heartbeat, stalled writes), so that 100,000 bridges need no timer
// handle each: an entry is a node of 48 bytes inside its owner, and the loop advances the wheel
// from one uv_timer_t (relayd/relay_server.cc) every tick.
//
// A slot is an array of pointers to its entries, not a list through them: walking a list, each
// step is a load that depends on the one before, a cache miss (~250 ns here) for entries last
// touched a heartbeat ago; walking an array, the loads are independent and the CPU overlaps their
// misses (docs/capacity.md, "The wheel's slots as arrays").
//
// Pure logic: no libuv, time is passed in (milliseconds, any monotonic origin). Loop thread only.
// Resolution is the tick (default 250 ms): an entry fires at the first advance() at or after its
// deadline rounded up to a tick; never early. An entry due beyond the wheel's span (slots * tick)
// stays in its slot, passed over by each walk until one finds it due, so any delay works.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
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
  uint64_t deadline_ = 0;
  uint32_t slot_ = 0;   // which array holds it: a slot, or the due list (TimerWheel::kDue)
  uint32_t index_ = 0;  // where in that array
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
  // Blocks of slot memory made so far (kBlockEntries pointers each): the most ever in use at once.
  [[nodiscard]] size_t blocksHeld() const { return blocks_.size(); }

 private:
  friend class TimerEntry;
  static constexpr uint32_t kDue = UINT32_MAX;  // TimerEntry::slot_ of an entry on due_

  // A slot's entries, kBlockEntries to a block. Blocks come from a pool every slot shares and go
  // back to it when a slot shrinks, so the memory follows the entries armed (most sit in the
  // heartbeat's next 60 slots) rather than each slot's largest size, and once the pool has grown
  // a tick allocates nothing.
  static constexpr size_t kBlockEntries = 64;
  using Block = std::array<TimerEntry*, kBlockEntries>;
  struct Slot {
    std::vector<Block*> blocks;
    size_t size = 0;
    TimerEntry*& at(size_t i) { return (*blocks[i / kBlockEntries])[i % kBlockEntries]; }
  };
  void push(Slot& slot, TimerEntry* entry);
  void truncate(Slot& slot, size_t size);  // to `size` entries; the blocks past them go back

  void unlink(TimerEntry& entry);
  void link(TimerEntry& entry);
  // Moves the entries of `slot` due by `thresholdMs` to due_, then fires them.
  void process(size_t slot, uint64_t thresholdMs);
  void fireDue();
  // The prefetch stages of the hooked entries among due_[first, first + kPrefetchBatch).
  void prefetchBatch(size_t first);

  uint32_t tickMs_;
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<Block>> blocks_;  // every block made, in a slot or free
  std::vector<Block*> freeBlocks_;
  // The entries of the slot being processed that are due, in firing order. They stay armed until
  // they fire, so a callback may cancel (or destroy) another due entry: its place here becomes
  // null, and the order of the rest is kept. Empty between advances.
  std::vector<TimerEntry*> due_;
  uint64_t currentTick_;  // the next tick advance() will process
  size_t size_ = 0;
};

}  // namespace ot::relayd
