#include "controld/relays/usage_recorder.h"

#include <limits>

#include "common/clock.h"
#include "common/log.h"
#include "controld/base/origin_credentials.h"

namespace ot::controld {
namespace {

const log::Logger& usageRecorderLogger() {
  static const log::Logger instance("controld.usage");
  return instance;
}

int64_t clamp(uint64_t value) {
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  return value > kMax ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(value);
}

int64_t saturatingAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::numeric_limits<int64_t>::max();
  return sum;
}

// The first flush one interval after start, and a last one at stop.
PeriodicTaskOptions flushSchedule(std::chrono::milliseconds interval) {
  PeriodicTaskOptions schedule;
  schedule.initialDelay = interval;
  schedule.finalRoundOnStop = true;
  return schedule;
}

}  // namespace

int64_t hourStart(int64_t unixMs) {
  const int64_t rem = unixMs % kHourMs;
  return unixMs - (rem < 0 ? rem + kHourMs : rem);
}

std::vector<UsageRow> usageRows(const opentunnel::control::v1::Counters& counters, int64_t nowMs) {
  const int64_t end = counters.interval_end_unix_ms() > 0 ? counters.interval_end_unix_ms() : nowMs;
  const int64_t hour = hourStart(end);
  std::vector<UsageRow> rows;
  for (const auto& tunnel : counters.tunnels()) {
    if (tunnel.tunnel_id().empty()) continue;
    if (tunnel.bytes_in() == 0 && tunnel.bytes_out() == 0 && tunnel.connections() == 0) continue;
    rows.push_back(UsageRow{tunnel.tunnel_id(), hour, clamp(tunnel.bytes_in()),
                            clamp(tunnel.bytes_out()), clamp(tunnel.connections())});
    for (const auto& origin : tunnel.origins()) {
      // relayd sends names its attach accepted; anything else (or "") would land in the totals.
      if (!isValidOriginName(origin.origin())) continue;
      if (origin.bytes_in() == 0 && origin.bytes_out() == 0 && origin.connections() == 0) continue;
      rows.push_back(UsageRow{tunnel.tunnel_id(), hour, clamp(origin.bytes_in()),
                              clamp(origin.bytes_out()), clamp(origin.connections()),
                              origin.origin()});
    }
  }
  return rows;
}

UsageRecorder::UsageRecorder(UsageStore& store, UsageRecorderOptions options)
    : store_(store),
      origins_(usageOriginRole(&store)),
      options_(std::move(options)),
      task_(
          [this] {
            const Status flushed = flush();
            if (!flushed.ok()) {
              usageRecorderLogger().warn(
                  "usage not written yet; will retry",
                  {{"error", flushed.error().message}, {"pending_rows", pending()}});
            }
            return options_.flushInterval;
          },
          flushSchedule(options_.flushInterval)) {}

UsageRecorder::~UsageRecorder() {
  stop();
}

int64_t UsageRecorder::nowMs() const {
  if (options_.nowMs) return options_.nowMs();
  return unixNowMs();
}

void UsageRecorder::mergeLocked(const UsageRow& row) {
  Key key{row.tunnelId, row.hourStartMs, row.origin};
  auto it = pending_.find(key);
  if (it == pending_.end()) {
    if (pending_.size() >= options_.maxPending) {
      ++droppedRows_;
      return;
    }
    pending_.emplace(std::move(key), row);
    return;
  }
  UsageRow& sum = it->second;
  sum.bytesIn = saturatingAdd(sum.bytesIn, row.bytesIn);
  sum.bytesOut = saturatingAdd(sum.bytesOut, row.bytesOut);
  sum.connections = saturatingAdd(sum.connections, row.connections);
}

void UsageRecorder::add(const opentunnel::control::v1::Counters& counters) {
  const auto rows = usageRows(counters, nowMs());
  const std::lock_guard lock(mutex_);
  for (const auto& row : rows) {
    if (!row.origin.empty() && origins_ == nullptr) continue;
    mergeLocked(row);
  }
}

Status UsageRecorder::flush() {
  const std::lock_guard flushing(flushMutex_);
  std::map<Key, UsageRow> batch;
  {
    const std::lock_guard lock(mutex_);
    batch.swap(pending_);
  }
  Status first = Ok{};
  std::vector<UsageRow> failed;
  for (auto& [key, row] : batch) {
    // After one failure the rest are kept without trying: the database is likely down.
    if (first.ok()) {
      Status written = row.origin.empty()
                           ? store_.addUsage(row.tunnelId, row.hourStartMs, row.bytesIn,
                                             row.bytesOut, row.connections)
                           : origins_->addOriginUsage(row.tunnelId, row.hourStartMs, row.origin,
                                                      row.bytesIn, row.bytesOut, row.connections);
      if (written.ok()) continue;
      first = std::move(written);
    }
    failed.push_back(std::move(row));
  }
  if (!failed.empty()) {
    const std::lock_guard lock(mutex_);
    for (const auto& row : failed) mergeLocked(row);
  }
  return first;
}

void UsageRecorder::start() {
  task_.start();
}

void UsageRecorder::stop() {
  task_.stop();  // its final round flushes what is pending
}

size_t UsageRecorder::pending() const {
  const std::lock_guard lock(mutex_);
  return pending_.size();
}

uint64_t UsageRecorder::droppedRows() const {
  const std::lock_guard lock(mutex_);
  return droppedRows_;
}

}  // namespace ot::controld
