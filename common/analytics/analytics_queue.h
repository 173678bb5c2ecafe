// The bounded queue between the threads where events happen (relayd's loop, controld's API
// workers, job and session threads) and the analytics sender thread. A ring of fixed capacity:
// push() never allocates for the queue itself and never waits for anything but the short lock,
// which is held only to move events in or out (never while encoding or sending). A full queue
// refuses the event and counts it; the caller goes on.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/analytics/analytics_event.h"

namespace ot::analytics {

class EventQueue {
 public:
  // capacity >= 1. `wakeAt`: a push that brings the queue to this many events wakes a waiter
  // (the sender's batch size), so a full batch goes out without waiting for the interval.
  EventQueue(size_t capacity, size_t wakeAt);

  // False (and the event counted in refused()) when the queue is full or closed.
  bool push(Event event);
  // Moves up to `max` of the oldest events to the end of `out`; answers how many.
  size_t take(size_t max, std::vector<Event>& out);
  // Waits until at least `count` events are queued, the queue is closed, or `timeoutMs` passed;
  // answers the number queued then.
  size_t waitFor(size_t count, int64_t timeoutMs);
  // Refuses every later push and wakes the waiter.
  void close();
  // Wakes the waiter (a stop request).
  void wake();

  [[nodiscard]] size_t size() const;
  [[nodiscard]] size_t capacity() const { return slots_.size(); }
  [[nodiscard]] uint64_t refused() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Event> slots_;
  size_t head_ = 0;   // the oldest event
  size_t count_ = 0;  // events queued
  const size_t wakeAt_;
  uint64_t refused_ = 0;
  bool closed_ = false;
  bool woken_ = false;
};

}  // namespace ot::analytics
