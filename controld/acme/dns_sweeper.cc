#include "controld/acme/dns_sweeper.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "controld/store/meta_lease.h"

namespace ot::controld {
namespace {

const log::Logger kDnsSweeperLog("controld.dns_sweeper");

PeriodicTaskOptions sweepSchedule(int64_t initialDelayMs) {
  PeriodicTaskOptions schedule;
  schedule.initialDelay = std::chrono::milliseconds(initialDelayMs);
  return schedule;
}
constexpr std::string_view kChallengePrefix = "_acme-challenge.";

std::string normalized(std::string_view name) {
  std::string out = toLower(name);
  while (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

// The name a challenge record is for: "_acme-challenge.abc.example.com" and "*.abc.example.com"
// both give "abc.example.com".
std::string challengedName(std::string_view name) {
  std::string out = normalized(name);
  if (out.rfind(kChallengePrefix, 0) == 0) out.erase(0, kChallengePrefix.size());
  if (out.rfind("*.", 0) == 0) out.erase(0, 2);
  return out;
}

bool underDomain(const std::string& name, const std::string& domain) {
  if (name == domain) return true;
  return name.size() > domain.size() + 1 &&
         name.compare(name.size() - domain.size(), domain.size(), domain) == 0 &&
         name[name.size() - domain.size() - 1] == '.';
}

}  // namespace

bool looksLikeChallengeValue(std::string_view value) {
  return value.size() == 43 && std::all_of(value.begin(), value.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_';
         });
}

std::vector<TxtRecord> staleChallengeRecords(const std::vector<TxtRecord>& records,
                                             const std::string& domain,
                                             const std::set<std::string>& active, int64_t nowMs,
                                             int64_t minAgeMs, size_t limit) {
  const std::string zone = normalized(domain);
  std::set<std::string> busy;
  for (const std::string& name : active) busy.insert(challengedName(name));
  std::vector<TxtRecord> stale;
  if (zone.empty()) return stale;
  for (const TxtRecord& record : records) {
    const std::string name = normalized(record.name);
    if (name.rfind(kChallengePrefix, 0) != 0) continue;
    const std::string target = name.substr(kChallengePrefix.size());
    if (!underDomain(target, zone)) continue;
    if (!looksLikeChallengeValue(record.value)) continue;
    if (record.createdUnixMs <= 0 || record.createdUnixMs > nowMs - minAgeMs) continue;
    if (busy.count(target) != 0) continue;
    stale.push_back(record);
  }
  std::stable_sort(stale.begin(), stale.end(), [](const TxtRecord& a, const TxtRecord& b) {
    return a.createdUnixMs < b.createdUnixMs;
  });
  if (stale.size() > limit) stale.resize(limit);
  return stale;
}

DnsSweeper::DnsSweeper(MetaStore& store, DnsProvider& provider, DnsSweeperOptions options,
                       DnsRecordMetrics* metrics)
    : store_(store),
      provider_(provider),
      options_(std::move(options)),
      metrics_(metrics),
      task_([this] { return sweepRound(); }, sweepSchedule(options_.initialDelayMs)) {
  if (options_.leaseMs <= 0) options_.leaseMs = options_.intervalMs;
}

DnsSweeper::~DnsSweeper() {
  stop();
}

void DnsSweeper::start() {
  task_.start();
}

void DnsSweeper::stop() {
  task_.stop();
}

int64_t DnsSweeper::now() const {
  if (options_.nowMs) return options_.nowMs();
  return unixNowMs();
}

std::chrono::milliseconds DnsSweeper::sweepRound() {
  auto report = sweepOnce();
  if (!report) {
    kDnsSweeperLog.warn("challenge record sweep failed", {{"error", report.error().message}});
  }
  return std::chrono::milliseconds(options_.intervalMs);
}

Result<std::optional<int64_t>> DnsSweeper::takeLease(int64_t nowMs) {
  // Another machine's unexpired lease keeps this one out; our own (an earlier sweep) is renewed.
  const int64_t until = nowMs + options_.leaseMs;
  auto taken = takeMetaLease(store_, kDnsSweeperMetaKey, options_.owner, nowMs, until);
  if (!taken) return taken.error();
  return *taken ? std::optional<int64_t>(until) : std::nullopt;
}

Result<DnsSweepReport> DnsSweeper::sweepOnce() {
  DnsSweepReport report;
  if (task_.stopping()) {
    report.stopped = true;
    return report;
  }
  const int64_t started = now();
  auto lease = takeLease(started);
  if (!lease) return lease.error();
  if (!*lease) return report;
  report.leased = true;
  const int64_t leaseUntil = **lease;

  std::set<std::string> active;
  if (options_.activeNames) {
    auto names = options_.activeNames();
    if (!names) return names.error();
    active = std::move(*names);
  }
  auto listed = provider_.listChallengeRecords(options_.domain);
  if (!listed) return listed.error();
  report.listed = listed->size();
  const std::vector<TxtRecord> stale = staleChallengeRecords(
      *listed, options_.domain, active, started, options_.minAgeMs, options_.maxDeletes);
  report.stale = stale.size();

  const int64_t gapMs =
      options_.deletesPerSecond > 0 ? static_cast<int64_t>(1000.0 / options_.deletesPerSecond) : 0;
  std::string firstError;
  for (size_t i = 0; i < stale.size(); ++i) {
    if (i > 0 && task_.waitStopping(std::chrono::milliseconds(gapMs))) {
      report.stopped = true;
      break;
    }
    if (now() >= leaseUntil) break;  // another machine may take over from here
    const Status deleted = provider_.deleteTxt(stale[i]);
    if (deleted) {
      ++report.deleted;
      if (metrics_ != nullptr) metrics_->swept.Increment();
    } else {
      ++report.failed;
      if (metrics_ != nullptr) metrics_->deleteFailed.Increment();
      if (firstError.empty()) firstError = stale[i].name + ": " + deleted.error().message;
    }
  }
  if (report.deleted > 0 || report.failed > 0) {
    kDnsSweeperLog.info("swept leftover challenge records",
                        {{"provider", provider_.name()},
                         {"listed", static_cast<int64_t>(report.listed)},
                         {"deleted", static_cast<int64_t>(report.deleted)},
                         {"failed", static_cast<int64_t>(report.failed)}});
  }
  if (!firstError.empty()) {
    kDnsSweeperLog.warn(
        "could not delete leftover challenge records",
        {{"failed", static_cast<int64_t>(report.failed)}, {"first_error", firstError}});
  }
  return report;
}

}  // namespace ot::controld
