#include "controld/relays/attach_bookkeeper.h"

#include <utility>
#include <vector>

#include "common/log.h"
#include "controld/domain_cert/certificate_pem.h"
#include "controld/issuance/job_policy.h"

namespace ot::controld {
namespace {

const log::Logger& attachBookkeeperLogger() {
  static const log::Logger instance("controld.attach");
  return instance;
}

// Writes of a record that keeps changing underneath (a bind, an issuance) before giving up until
// the next pass.
constexpr int kWriteAttempts = 3;

PeriodicTaskOptions passSchedule(std::chrono::milliseconds interval) {
  PeriodicTaskOptions schedule;
  schedule.initialDelay = interval;
  schedule.finalRoundOnStop = true;
  return schedule;
}

// When the certificate is due for renewal: the alarm the record holds, else what the leaf's
// validity says (else the longest lead before its expiry, when the chain does not parse).
int64_t renewalTime(const TunnelRecord& record) {
  if (record.renewAtMs) return *record.renewAtMs;
  const CertificateInfo& certificate = record.certificate;
  if (auto validity = leafValidity(certificate.chainPem); validity.ok()) {
    return renewAtMs(validity->notBeforeMs, validity->notAfterMs);
  }
  return certificate.notAfterMs - kRenewBeforeMs;
}

}  // namespace

AttachFollowUp attachFollowUp(const TunnelRecord& record, int64_t nowMs, int64_t writeEveryMs) {
  AttachFollowUp followUp;
  if (record.deleted()) return followUp;
  followUp.writeLastConnected =
      !record.lastConnectedAtMs || nowMs - *record.lastConnectedAtMs >= writeEveryMs;
  const CertificateInfo& certificate = record.certificate;
  if (certificate.state != CertificateState::kReady || certificate.id.empty() ||
      certificate.notAfterMs <= 0) {
    return followUp;
  }
  const int64_t renewAt = renewalTime(record);
  if (nowMs >= renewAt) {
    // Named like the alarm's job (job_policy.h), so the alarm and the attach add it once.
    followUp.renewal =
        pendingJob(JobKind::kRenew, renewalJobId(certificate, renewAt), record.id, nowMs);
  } else if (!record.renewAtMs) {
    followUp.rearmAlarm = renewAt;
  }
  return followUp;
}

AttachBookkeeper::AttachBookkeeper(TunnelStore& tunnels, JobStore& jobs, JobNotifier* notifier,
                                   AttachBookkeeperOptions options)
    : tunnels_(tunnels),
      jobs_(jobs),
      notifier_(notifier),
      options_(std::move(options)),
      task_(
          [this] {
            const Status flushed = flush();
            if (!flushed.ok()) {
              attachBookkeeperLogger().warn(
                  "attach bookkeeping not done yet; will retry",
                  {{"error", flushed.error().message}, {"pending", pending()}});
            }
            return options_.interval;
          },
          passSchedule(options_.interval)) {}

AttachBookkeeper::~AttachBookkeeper() {
  stop();
}

int64_t AttachBookkeeper::nowMs() const {
  return options_.nowMs ? options_.nowMs() : unixNowMs();
}

void AttachBookkeeper::noteAttached(const std::string& tunnelId) {
  const int64_t now = nowMs();
  const std::lock_guard lock(mutex_);
  if (auto it = recent_.find(tunnelId);
      it != recent_.end() && now - it->second < options_.writeEveryMs) {
    return;
  }
  if (pending_.contains(tunnelId)) return;
  if (pending_.size() >= options_.maxPending) {
    ++dropped_;
    return;
  }
  pending_.insert(tunnelId);
}

void AttachBookkeeper::remember(const std::string& tunnelId, int64_t lastConnectedAtMs) {
  const std::lock_guard lock(mutex_);
  recent_[tunnelId] = lastConnectedAtMs;
}

Status AttachBookkeeper::followUp(const std::string& tunnelId, int64_t now) {
  for (int attempt = 0; attempt < kWriteAttempts; ++attempt) {
    auto loaded = tunnels_.getTunnel(tunnelId);
    if (!loaded.ok()) return loaded.error();
    if (!loaded->has_value() || (*loaded)->record.deleted()) return Ok{};
    StoredTunnel tunnel = std::move(**loaded);
    const AttachFollowUp todo = attachFollowUp(tunnel.record, now, options_.writeEveryMs);

    if (todo.renewal) {
      auto added = jobs_.addJob(*todo.renewal);
      if (!added.ok()) return added.error();
      if (*added) {
        attachBookkeeperLogger().info("certificate renewal queued on attach",
                                      {{"tunnel", tunnelId},
                                       {"certificate", tunnel.record.certificate.id},
                                       {"not_after_ms", tunnel.record.certificate.notAfterMs}});
        if (notifier_ != nullptr) notifier_->jobAdded();
      }
    }
    if (!todo.writeLastConnected && !todo.rearmAlarm) {
      remember(tunnelId, tunnel.record.lastConnectedAtMs.value_or(now));
      return Ok{};
    }
    if (todo.writeLastConnected) tunnel.record.lastConnectedAtMs = now;
    if (todo.rearmAlarm) tunnel.record.renewAtMs = todo.rearmAlarm;
    auto written = tunnels_.updateTunnel(tunnel.record, tunnel.revision);
    if (written.ok()) {
      remember(tunnelId, *tunnel.record.lastConnectedAtMs);
      const std::lock_guard lock(mutex_);
      if (todo.writeLastConnected) ++writes_;
      return Ok{};
    }
    if (written.error().kind != ErrorKind::kConflict) return written.error();
  }
  return Error{ErrorKind::kConflict, "tunnel " + tunnelId + " kept changing; later"};
}

Status AttachBookkeeper::flush() {
  const std::lock_guard flushing(flushMutex_);
  const int64_t now = nowMs();
  std::unordered_set<std::string> batch;
  {
    const std::lock_guard lock(mutex_);
    batch.swap(pending_);
    std::erase_if(recent_,
                  [&](const auto& entry) { return now - entry.second >= options_.writeEveryMs; });
  }
  Status first = Ok{};
  std::vector<std::string> failed;
  for (const auto& tunnelId : batch) {
    // After one failure the rest are kept without trying: the database is likely down.
    if (first.ok()) {
      Status done = followUp(tunnelId, now);
      if (done.ok()) continue;
      first = std::move(done);
    }
    failed.push_back(tunnelId);
  }
  if (!failed.empty()) {
    const std::lock_guard lock(mutex_);
    for (auto& tunnelId : failed) {
      if (pending_.size() >= options_.maxPending) {
        ++dropped_;
        continue;
      }
      pending_.insert(std::move(tunnelId));
    }
  }
  return first;
}

void AttachBookkeeper::start() {
  task_.start();
}

void AttachBookkeeper::stop() {
  task_.stop();
}

size_t AttachBookkeeper::pending() const {
  const std::lock_guard lock(mutex_);
  return pending_.size();
}

uint64_t AttachBookkeeper::dropped() const {
  const std::lock_guard lock(mutex_);
  return dropped_;
}

uint64_t AttachBookkeeper::writes() const {
  const std::lock_guard lock(mutex_);
  return writes_;
}

}  // namespace ot::controld
