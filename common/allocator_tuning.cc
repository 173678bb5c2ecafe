#include "common/allocator_tuning.h"

#include <malloc.h>

namespace ot::memory {

bool tuneAllocatorForStreaming() {
  constexpr int kTrimThreshold = 8 << 20;
  constexpr int kMmapThreshold = 4 << 20;
  // mallopt answers 1 on success. Setting either value also turns off glibc's own adjustment of
  // both, so the two are set together.
  const bool trim = mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  const bool mmap = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1;
  return trim && mmap;
}

}  // namespace ot::memory
