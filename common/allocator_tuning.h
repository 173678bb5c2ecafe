// How the data-plane processes (relayd, otunnel) set up glibc's allocator before their loop runs,
// and how relayd hands the heap's free pages back to the kernel while it runs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "common/periodic_task.h"

namespace ot::memory {

// Free heap kept at the top for streaming bursts (see tuneAllocatorForStreaming).
inline constexpr size_t kTrimThresholdBytes = 8 << 20;

// Streaming allocates and frees a buffer per TLS write and per socket write (tens of KiB each).
// With glibc's defaults the freed top of the heap is handed back to the kernel as soon as more than
// 128 KiB of it is free, so the next burst faults every page in again: measured as the largest
// single cost of moving data through relayd and otunnel. This keeps up to 8 MiB of free heap
// (memory is still returned beyond that, so idle processes stay small) and serves blocks below
// 4 MiB from the heap instead of fresh mappings. Returns false when the allocator refused (a
// sanitizer's allocator does), which only costs speed.
bool tuneAllocatorForStreaming();

// Free bytes inside the heap (all arenas), not counting what sits at the top of the main heap:
// the holes a burst of TLS handshakes leaves between long-lived connection state. glibc gives
// them back only on malloc_trim.
[[nodiscard]] size_t heapFreeInside();
// malloc_trim keeping kTrimThresholdBytes at the top: every whole free page inside the heap goes
// back to the kernel (MADV_DONTNEED). True when something was returned.
bool trimHeap();

// The heap calls HeapTrimmer makes (tests replace them).
struct HeapTrimHooks {
  std::function<size_t()> freeInside = heapFreeInside;
  std::function<bool()> trim = trimHeap;
};

// relayd's periodic trim: every kPeriod, when at least kMinFreeBytes are free inside the heap,
// trimHeap(). Each handshake's transient buffers (record buffers, the handshake message buffer,
// 16-40 KiB) are freed between the long-lived objects of the connections made meanwhile; without
// a trim those pages stay resident (measured: ~1.6 KiB per idle bridge after a ramp,
// docs/capacity.md). A thread of its own (a PeriodicTask), so relayd's loop only waits when it
// allocates during a pass.
class HeapTrimmer {
 public:
  static constexpr std::chrono::milliseconds kPeriod{10'000};
  static constexpr size_t kMinFreeBytes = 1 << 20;

  using Hooks = HeapTrimHooks;

  // The first pass a period after start() by default (nothing to trim at start).
  explicit HeapTrimmer(Hooks hooks = {}, PeriodicTaskOptions options = firstPassAfterPeriod());
  void start() { task_.start(); }
  void stop() { task_.stop(); }

  // One pass: trims when worth it; answers the wait before the next (kPeriod).
  std::chrono::milliseconds round();
  [[nodiscard]] uint64_t trims() const { return trims_.load(); }
  [[nodiscard]] static PeriodicTaskOptions firstPassAfterPeriod();

 private:
  Hooks hooks_;
  std::atomic<uint64_t> trims_{0};
  PeriodicTask task_;  // last: stopped (joined) before the hooks go
};

}  // namespace ot::memory
