#include "common/allocator_tuning.h"

#include <malloc.h>

#include <utility>

namespace ot::memory {

bool tuneAllocatorForStreaming() {
  constexpr int kMmapThreshold = 4 << 20;
  // mallopt answers 1 on success. Setting either value also turns off glibc's own adjustment of
  // both, so the two are set together.
  const bool trim = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThresholdBytes)) == 1;
  const bool mmap = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1;
  return trim && mmap;
}

size_t heapFreeInside() {
  const struct mallinfo2 info = mallinfo2();
  // fordblks counts every free chunk, the top one too; keepcost is what the top holds.
  return info.fordblks > info.keepcost ? info.fordblks - info.keepcost : 0;
}

bool trimHeap() {
  return malloc_trim(kTrimThresholdBytes) == 1;
}

HeapTrimmer::HeapTrimmer(Hooks hooks, PeriodicTaskOptions options)
    : hooks_(std::move(hooks)), task_([this] { return round(); }, std::move(options)) {}

PeriodicTaskOptions HeapTrimmer::firstPassAfterPeriod() {
  PeriodicTaskOptions options;
  options.initialDelay = kPeriod;
  return options;
}

std::chrono::milliseconds HeapTrimmer::round() {
  if (hooks_.freeInside() >= kMinFreeBytes) {
    (void)hooks_.trim();
    trims_.fetch_add(1);
  }
  return kPeriod;
}

}  // namespace ot::memory
