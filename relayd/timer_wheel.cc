#include "relayd/timer_wheel.h"

#include <algorithm>
#include <array>
#include <limits>

// Layout: slots_ holds `slots` list heads plus one more, the "pending" list: the entries of the
// slot being processed that are due, moved there before any callback runs. An entry on the
// pending list is still armed, so a callback may cancel (or destroy) another due entry and it
// will not fire. A list head is found from the entry itself: the pending head is checked first,
// otherwise the slot follows from deadline_, which is always the end of the tick the entry sits
// in (schedule() moves deadlines that fall in an already processed tick to the next one).

namespace ot::relayd {
namespace {

uint64_t ceilDiv(uint64_t value, uint64_t divisor) {
  return value / divisor + (value % divisor != 0 ? 1 : 0);
}

}  // namespace

void TimerEntry::cancel() {
  if (wheel_ != nullptr) wheel_->unlink(*this);
}

TimerWheel::TimerWheel(uint64_t nowMs, uint32_t tickMs, size_t slots)
    : tickMs_(std::max<uint32_t>(tickMs, 1)),
      slots_(std::max<size_t>(slots, 1) + 1, nullptr),
      currentTick_(nowMs / tickMs_ + 1) {}

TimerWheel::~TimerWheel() {
  for (TimerEntry*& head : slots_) {
    while (head != nullptr) {
      TimerEntry* entry = head;
      head = entry->next_;
      entry->wheel_ = nullptr;
      entry->prev_ = nullptr;
      entry->next_ = nullptr;
    }
  }
  size_ = 0;
}

void TimerWheel::schedule(TimerEntry& entry, uint64_t nowMs, uint64_t delayMs) {
  entry.cancel();
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  uint64_t deadline = delayMs > max - nowMs ? max : nowMs + delayMs;
  // A deadline in a tick already processed fires at the next tick to come.
  if (ceilDiv(deadline, tickMs_) < currentTick_) deadline = currentTick_ * tickMs_;
  entry.deadline_ = deadline;
  entry.wheel_ = this;
  link(entry);
}

void TimerWheel::link(TimerEntry& entry) {
  const size_t wheelSlots = slots_.size() - 1;
  const size_t slot = ceilDiv(entry.deadline_, tickMs_) % wheelSlots;
  entry.prev_ = nullptr;
  entry.next_ = slots_[slot];
  if (entry.next_ != nullptr) entry.next_->prev_ = &entry;
  slots_[slot] = &entry;
  ++size_;
}

void TimerWheel::unlink(TimerEntry& entry) {
  if (entry.prev_ != nullptr) {
    entry.prev_->next_ = entry.next_;
  } else {
    const size_t pending = slots_.size() - 1;
    const size_t head =
        slots_[pending] == &entry ? pending : ceilDiv(entry.deadline_, tickMs_) % pending;
    slots_[head] = entry.next_;
  }
  if (entry.next_ != nullptr) entry.next_->prev_ = entry.prev_;
  entry.prev_ = nullptr;
  entry.next_ = nullptr;
  entry.wheel_ = nullptr;
  --size_;
}

void TimerWheel::prefetchBatch(TimerEntry* first) {
  // The hooked ones among the next kPrefetchBatch entries (common/prefetch.h) to fire (the pending
  // list fires from its head), taken before any of their callbacks runs: every one of them is alive
  // until then. A callback that destroys a later entry of the batch lets one entry past the batch
  // fire in this round without its stages; stages are a hint, and no entry gets them twice.
  std::array<const TimerEntry*, kPrefetchBatch> batch{};
  size_t count = 0;
  size_t seen = 0;
  for (const TimerEntry* entry = first; entry != nullptr && seen < kPrefetchBatch;
       entry = entry->next_, ++seen) {
    if (entry->prefetch_ != nullptr) batch[count++] = entry;
  }
  if (count < 2) return;  // one owner's misses have nothing to overlap with
  for (unsigned stage = 0; stage < kPrefetchStages; ++stage) {
    for (size_t i = 0; i < count; ++i) batch[i]->prefetch_(batch[i]->owner_, stage);
  }
}

void TimerWheel::advance(uint64_t nowMs) {
  const uint64_t target = nowMs / tickMs_;
  if (target < currentTick_) return;
  const size_t wheelSlots = slots_.size() - 1;
  const size_t pending = wheelSlots;

  // Moves the due entries of `slot` to the pending list (they stay armed), then fires them one by
  // one; entries (re)armed meanwhile land in a later tick, so this always ends.
  auto process = [&](size_t slot, uint64_t thresholdMs) {
    TimerEntry* entry = slots_[slot];
    while (entry != nullptr) {
      TimerEntry* next = entry->next_;
      if (entry->deadline_ <= thresholdMs) {
        unlink(*entry);
        entry->wheel_ = this;
        entry->prev_ = nullptr;
        entry->next_ = slots_[pending];
        if (entry->next_ != nullptr) entry->next_->prev_ = entry;
        slots_[pending] = entry;
        ++size_;
      }
      entry = next;
    }
    while (slots_[pending] != nullptr) {
      prefetchBatch(slots_[pending]);
      for (size_t fired = 0; fired < kPrefetchBatch && slots_[pending] != nullptr; ++fired) {
        TimerEntry* due = slots_[pending];
        unlink(*due);
        due->callback_(due, due->owner_);  // may destroy `due` and its owner
      }
    }
  };

  if (target - currentTick_ >= wheelSlots) {
    // More ticks passed than there are slots: visit each slot once, firing all that is due.
    currentTick_ = target + 1;
    for (size_t slot = 0; slot < wheelSlots; ++slot) process(slot, target * tickMs_);
    return;
  }
  while (currentTick_ <= target) {
    const uint64_t tick = currentTick_;
    currentTick_ = tick + 1;  // before callbacks: what they arm goes to a later tick
    process(tick % wheelSlots, tick * tickMs_);
  }
}

}  // namespace ot::relayd
