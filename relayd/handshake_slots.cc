#include "relayd/handshake_slots.h"

#include <algorithm>
#include <utility>

namespace ot::relayd {

HandshakeSlots::Waiter::~Waiter() {
  if (slots_ != nullptr) slots_->cancel(*this);
}

HandshakeSlots::HandshakeSlots(Limits limits, TimerWheel& wheel, Clock clock)
    : limits_(limits),
      wheel_(wheel),
      clock_(std::move(clock)),
      timer_(&HandshakeSlots::onTimer, this) {}

HandshakeSlots::~HandshakeSlots() {
  while (popFront() != nullptr) {
  }
}

size_t HandshakeSlots::maxWaitingFor(uint64_t maxConnections) {
  return std::max<size_t>(Limits{}.maxWaiting, maxConnections / 2);
}

bool HandshakeSlots::tryTake() {
  if (head_ != nullptr || inProgress_ >= limits_.slots) return false;
  ++inProgress_;
  return true;
}

HandshakeSlots::Admission HandshakeSlots::admit(Waiter& waiter) {
  if (waiter.queued()) return Admission::kQueued;
  if (tryTake()) return Admission::kSlot;
  if (waiting_ >= limits_.maxWaiting) return Admission::kShed;
  waiter.deadlineMs_ = now() + limits_.waitMs;
  pushBack(waiter);
  if (head_ == &waiter) arm();
  return Admission::kQueued;
}

void HandshakeSlots::release() {
  if (inProgress_ > 0) --inProgress_;
  pump();
}

void HandshakeSlots::cancel(Waiter& waiter) {
  if (waiter.slots_ != this) return;
  const bool wasHead = head_ == &waiter;
  if (waiter.prev_ != nullptr) waiter.prev_->next_ = waiter.next_;
  if (waiter.next_ != nullptr) waiter.next_->prev_ = waiter.prev_;
  if (wasHead) head_ = waiter.next_;
  if (tail_ == &waiter) tail_ = waiter.prev_;
  waiter.slots_ = nullptr;
  waiter.next_ = waiter.prev_ = nullptr;
  --waiting_;
  if (wasHead && !pumping_) arm();
}

void HandshakeSlots::pushBack(Waiter& waiter) {
  waiter.slots_ = this;
  waiter.prev_ = tail_;
  waiter.next_ = nullptr;
  if (tail_ != nullptr) {
    tail_->next_ = &waiter;
  } else {
    head_ = &waiter;
  }
  tail_ = &waiter;
  ++waiting_;
}

HandshakeSlots::Waiter* HandshakeSlots::popFront() {
  Waiter* waiter = head_;
  if (waiter == nullptr) return nullptr;
  head_ = waiter->next_;
  if (head_ != nullptr) {
    head_->prev_ = nullptr;
  } else {
    tail_ = nullptr;
  }
  waiter->slots_ = nullptr;
  waiter->next_ = waiter->prev_ = nullptr;
  --waiting_;
  return waiter;
}

void HandshakeSlots::pump() {
  if (pumping_) return;  // the outer pump() takes what this call would have
  pumping_ = true;
  while (head_ != nullptr) {
    if (head_->deadlineMs_ <= now()) {
      popFront()->onShed();
    } else if (inProgress_ < limits_.slots) {
      ++inProgress_;
      popFront()->onSlot();
    } else {
      break;
    }
  }
  pumping_ = false;
  arm();
}

void HandshakeSlots::arm() {
  if (head_ == nullptr) {
    timer_.cancel();
    return;
  }
  const uint64_t at = now();
  wheel_.schedule(timer_, at, head_->deadlineMs_ > at ? head_->deadlineMs_ - at : 0);
}

void HandshakeSlots::onTimer(TimerEntry*, void* owner) {
  static_cast<HandshakeSlots*>(owner)->pump();
}

}  // namespace ot::relayd
