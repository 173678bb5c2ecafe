#include "common/analytics/analytics_policy.h"

#include <algorithm>

namespace ot::analytics {

int64_t sendDelayMs(const BatchPolicy& policy, size_t queued, int64_t sinceLastPostMs,
                    bool stopping) {
  if (queued == 0) return std::max<int64_t>(policy.intervalMs, 1);
  if (stopping || queued >= std::max<size_t>(policy.maxEvents, 1)) return 0;
  return std::max<int64_t>(policy.intervalMs - sinceLastPostMs, 0);
}

PostVerdict judgePost(int status) {
  if (status >= 200 && status < 300) return PostVerdict::kSent;
  if (status == 0 || status >= 500 || status == 408 || status == 429) return PostVerdict::kRetry;
  return PostVerdict::kFailed;
}

int64_t retryDelayMs(const RetryPolicy& policy, int retry) {
  int64_t delay = std::max<int64_t>(policy.baseDelayMs, 0);
  for (int i = 1; i < retry && delay < policy.maxDelayMs; ++i) delay *= 2;
  return std::min(delay, policy.maxDelayMs);
}

}  // namespace ot::analytics
