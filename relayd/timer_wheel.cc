#include "relayd/timer_wheel.h"

#include <algorithm>
#include <array>
#include <limits>

// Layout: slots_[s] holds the entries of slot s in no particular order; an entry knows its slot
// (slot_) and its place in it (index_), so cancelling is a swap with the slot's last entry. A
// tick moves its slot's due entries to due_ before any callback runs, and fires them from there in
// order (see due_ in the header). deadline_ is always the end of the tick the entry sits in
// (schedule() moves deadlines that fall in an already processed tick to the next one).

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
      slots_(std::clamp<size_t>(slots, 1, kDue - 1)),
      currentTick_(nowMs / tickMs_ + 1) {}

TimerWheel::~TimerWheel() {
  for (Slot& slot : slots_) {
    for (size_t i = 0; i < slot.size; ++i) slot.at(i)->wheel_ = nullptr;
  }
  for (TimerEntry* entry : due_) {
    if (entry != nullptr) entry->wheel_ = nullptr;
  }
  size_ = 0;
}

void TimerWheel::push(Slot& slot, TimerEntry* entry) {
  if (slot.size == slot.blocks.size() * kBlockEntries) {
    if (freeBlocks_.empty()) {
      blocks_.push_back(std::make_unique<Block>());
      freeBlocks_.push_back(blocks_.back().get());
    }
    slot.blocks.push_back(freeBlocks_.back());
    freeBlocks_.pop_back();
  }
  slot.at(slot.size++) = entry;
}

void TimerWheel::truncate(Slot& slot, size_t size) {
  slot.size = size;
  const size_t blocksNeeded = ceilDiv(size, kBlockEntries);
  while (slot.blocks.size() > blocksNeeded) {
    freeBlocks_.push_back(slot.blocks.back());
    slot.blocks.pop_back();
  }
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
  const auto slot = static_cast<uint32_t>(ceilDiv(entry.deadline_, tickMs_) % slots_.size());
  entry.slot_ = slot;
  entry.index_ = static_cast<uint32_t>(slots_[slot].size);
  push(slots_[slot], &entry);
  ++size_;
}

void TimerWheel::unlink(TimerEntry& entry) {
  if (entry.slot_ == kDue) {
    due_[entry.index_] = nullptr;  // keeps the order of the rest (fireDue)
  } else {
    Slot& slot = slots_[entry.slot_];
    TimerEntry* last = slot.at(slot.size - 1);
    slot.at(entry.index_) = last;
    last->index_ = entry.index_;
    truncate(slot, slot.size - 1);
  }
  entry.wheel_ = nullptr;
  --size_;
}

void TimerWheel::prefetchBatch(size_t first) {
  // Taken before any of the batch's callbacks runs: every entry still in due_ is alive until
  // then, and one a callback destroys is nulled before the loop below reaches it.
  std::array<const TimerEntry*, kPrefetchBatch> batch{};
  size_t count = 0;
  const size_t end = std::min(due_.size(), first + kPrefetchBatch);
  for (size_t i = first; i < end; ++i) {
    if (due_[i] != nullptr && due_[i]->prefetch_ != nullptr) batch[count++] = due_[i];
  }
  if (count < 2) return;  // one owner's misses have nothing to overlap with
  for (unsigned stage = 0; stage < kPrefetchStages; ++stage) {
    for (size_t i = 0; i < count; ++i) batch[i]->prefetch_(batch[i]->owner_, stage);
  }
}

void TimerWheel::fireDue() {
  // Callbacks arm entries only for later ticks, so due_ does not grow while it is fired.
  for (size_t first = 0; first < due_.size(); first += kPrefetchBatch) {
    prefetchBatch(first);
    const size_t end = std::min(due_.size(), first + kPrefetchBatch);
    for (size_t i = first; i < end; ++i) {
      TimerEntry* entry = due_[i];
      if (entry == nullptr) continue;  // cancelled or destroyed by an earlier callback
      unlink(*entry);
      entry->callback_(entry, entry->owner_);  // may destroy `entry` and its owner
    }
  }
  due_.clear();
}

void TimerWheel::process(size_t slot, uint64_t thresholdMs) {
  // One pass over the slot: the due entries go to due_ (still armed), the others are packed to
  // the front. Nothing runs in between, so every pointer stays valid for the pass.
  Slot& entries = slots_[slot];
  const size_t count = entries.size;
  size_t kept = 0;
  for (size_t i = 0; i < count; ++i) {
    TimerEntry* entry = entries.at(i);
    if (entry->deadline_ <= thresholdMs) {
      entry->slot_ = kDue;
      entry->index_ = static_cast<uint32_t>(due_.size());
      due_.push_back(entry);
    } else {
      entry->index_ = static_cast<uint32_t>(kept);
      entries.at(kept++) = entry;
    }
  }
  truncate(entries, kept);
  fireDue();
}

void TimerWheel::advance(uint64_t nowMs) {
  const uint64_t target = nowMs / tickMs_;
  if (target < currentTick_) return;
  const size_t wheelSlots = slots_.size();

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
