// common/allocator_tuning.h: relayd's periodic heap trim (when it trims, how often it runs) and
// that a trim returns the holes a burst leaves between long-lived blocks.
#include "common/allocator_tuning.h"

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace ot::memory {
namespace {

using std::chrono::milliseconds;

TEST_CASE("the heap trimmer trims only when enough is free inside the heap") {
  size_t freeInside = 0;
  int trims = 0;
  HeapTrimmer trimmer(HeapTrimHooks{.freeInside = [&] { return freeInside; },
                                    .trim =
                                        [&] {
                                          ++trims;
                                          return true;
                                        }});
  CHECK(trimmer.round() == HeapTrimmer::kPeriod);
  CHECK(trims == 0);
  freeInside = HeapTrimmer::kMinFreeBytes - 1;
  (void)trimmer.round();
  CHECK(trims == 0);
  freeInside = HeapTrimmer::kMinFreeBytes;
  CHECK(trimmer.round() == HeapTrimmer::kPeriod);
  CHECK(trims == 1);
  CHECK(trimmer.trims() == 1);
}

TEST_CASE("the heap trimmer runs on its own thread and waits a period between passes") {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<milliseconds> waits;
  int trims = 0;
  HeapTrimmer trimmer(HeapTrimHooks{.freeInside = [] { return HeapTrimmer::kMinFreeBytes; },
                                    .trim =
                                        [&] {
                                          const std::lock_guard lock(mutex);
                                          ++trims;
                                          changed.notify_all();
                                          return true;
                                        }},
                      PeriodicTaskOptions{.initialDelay = milliseconds(0),
                                          .finalRoundOnStop = false,
                                          .beforeWait = [&](milliseconds wait) {
                                            const std::lock_guard lock(mutex);
                                            waits.push_back(wait);
                                            changed.notify_all();
                                          }});
  trimmer.start();
  {
    std::unique_lock lock(mutex);
    REQUIRE(changed.wait_for(lock, std::chrono::seconds(5),
                             [&] { return trims >= 1 && !waits.empty(); }));
  }
  trimmer.stop();
  const std::lock_guard lock(mutex);
  CHECK(waits[0] == HeapTrimmer::kPeriod);  // after the pass, the next one is a period away
  CHECK(HeapTrimmer::kPeriod == std::chrono::seconds(10));
  CHECK(HeapTrimmer::firstPassAfterPeriod().initialDelay == HeapTrimmer::kPeriod);
}

TEST_CASE("a trim returns the holes freed between long-lived blocks") {
  if (!tuneAllocatorForStreaming()) return;  // a sanitizer's allocator: nothing of glibc's here
  (void)trimHeap();
  // 64 KiB blocks, each followed by a small block that stays: freeing the big ones leaves holes
  // inside the heap (not at its top), as handshake buffers do between connections.
  constexpr int kBlocks = 256;
  std::vector<void*> big;
  std::vector<void*> small;
  for (int i = 0; i < kBlocks; ++i) {
    big.push_back(std::malloc(64 << 10));
    small.push_back(std::malloc(64));
  }
  const size_t before = heapFreeInside();
  for (void* block : big) std::free(block);
  CHECK(heapFreeInside() >= before + (kBlocks - 1) * (64 << 10));
  CHECK(trimHeap());  // whole free pages went back to the kernel
  for (void* block : small) std::free(block);
}

}  // namespace
}  // namespace ot::memory
