#include "client/status_report.h"

#include <algorithm>
#include <utility>

namespace ot::client {

bridge::StatusReport statusReportOf(const DialerStatus& status) {
  bridge::StatusReport report;
  for (const ProfileStatus& profile : status.profiles) {
    if (report.profiles.size() == bridge::kMaxProfiles) break;
    bridge::ProfileReport line;
    line.name = profile.name;
    line.index = profile.index;
    uint64_t soonest = 0;
    std::string error;
    for (const AddressStatus& address : profile.addresses) {
      line.linksWanted += static_cast<uint32_t>(std::max(address.wanted, 0));
      line.linksUp += static_cast<uint32_t>(std::max(address.attached, 0));
      if (address.attached >= address.wanted) continue;
      if (address.nextTryMs != 0 && (soonest == 0 || address.nextTryMs < soonest))
        soonest = address.nextTryMs;
      if (!address.lastError.empty()) error = address.lastError;
    }
    line.nextTryMs = soonest;
    line.lastError = profile.resolveError.empty() ? error : profile.resolveError;
    report.profiles.push_back(std::move(line));
  }
  return report;
}

bool reportChanged(const bridge::StatusReport& last, const bridge::StatusReport& next,
                   uint64_t elapsedMs) {
  if (last.profiles.size() != next.profiles.size()) return true;
  for (size_t i = 0; i < last.profiles.size(); ++i) {
    bridge::ProfileReport a = last.profiles[i];
    bridge::ProfileReport b = next.profiles[i];
    // A wait that counts down is no change; a wait that starts or ends is, and so is a new wait
    // begun since (a dial failed again between two ticks): the relay counts the old one down to
    // 0 and would show "dialing" for as long as the new one lasts.
    const bool aWaits = a.nextTryMs != 0;
    const bool bWaits = b.nextTryMs != 0;
    const uint64_t expected = a.nextTryMs > elapsedMs ? a.nextTryMs - elapsedMs : 0;
    const uint64_t drift = b.nextTryMs > expected ? b.nextTryMs - expected : expected - b.nextTryMs;
    a.nextTryMs = 0;
    b.nextTryMs = 0;
    if (a != b || aWaits != bWaits || drift > kWaitSlackMs) return true;
  }
  return false;
}

StatusReporter::StatusReporter(uv_loop_t* loop, Source source, Broadcast broadcast)
    : loop_(loop), source_(std::move(source)), broadcast_(std::move(broadcast)) {
  (void)uv_timer_init(loop_, &timer_);
  timer_.data = this;
}

void StatusReporter::start() {
  (void)uv_timer_start(&timer_, &StatusReporter::onTick, kReportTickMs, kReportTickMs);
}

void StatusReporter::close() {
  if (closed_) return;
  closed_ = true;
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

void StatusReporter::onTick(uv_timer_t* timer) {
  static_cast<StatusReporter*>(timer->data)->tick();
}

void StatusReporter::tick() {
  if (closed_) return;
  bridge::StatusReport current = statusReportOf(source_());
  const uint64_t now = uv_now(loop_);
  const bool changed = !sent_ || reportChanged(last_, current, now - lastSentMs_);
  if (!changed && now - lastSentMs_ < kReportRefreshMs) return;
  // Not sent anywhere (no link up yet): try again on the next tick.
  if (broadcast_(bridge::serializeStatus(current),
                 changed ? TextTiming::kNow : TextTiming::kWithNextPong) == 0)
    return;
  sent_ = true;
  last_ = std::move(current);
  lastSentMs_ = now;
}

}  // namespace ot::client
