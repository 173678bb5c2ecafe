// JobRunner: what happens to one claimed job (see job_runner.h for the order of the steps).
#include <algorithm>
#include <chrono>
#include <utility>

#include "common/log.h"
#include "controld/analytics/controld_events.h"
#include "controld/domain_cert/server_certificates.h"
#include "controld/issuance/csr_check.h"
#include "controld/issuance/job_runner.h"

namespace ot::controld {
namespace {

const log::Logger kJobAttemptLog("controld.jobs");

}  // namespace

JobRunner::Want JobRunner::wants(const Job& job, const TunnelRecord& record) {
  if (record.deleted()) return Want::kAbandon;
  const CertificateInfo& certificate = record.certificate;
  if (job.kind == JobKind::kRenew) {
    if (!isRenewalOf(job.id, certificate)) return Want::kAbandon;
    return certificate.state == CertificateState::kReady ? Want::kRun : Want::kAbandon;
  }
  if (certificate.id != job.id) return Want::kAbandon;
  switch (certificate.state) {
    case CertificateState::kIssuing:
      return Want::kRun;
    // The outcome reached the record but not the job (the machine stopped in between).
    case CertificateState::kReady:
      return Want::kAlreadyDone;
    case CertificateState::kFailed:
      return Want::kAlreadyFailed;
    case CertificateState::kNone:
      return Want::kAbandon;
  }
  return Want::kAbandon;
}

JobOutcome JobRunner::runJob(Job job, const std::atomic<bool>& cancel) {
  const auto started = std::chrono::steady_clock::now();
  JobOutcome outcome = JobOutcome::kDropped;
  try {
    outcome = job.kind == JobKind::kServer ? runServerJob(job, cancel) : runTunnelJob(job, cancel);
  } catch (const std::exception& error) {
    // Nothing recorded: the lease runs out and the job is tried again.
    kJobAttemptLog.error("issuance job failed unexpectedly",
                         {{"job", job.id}, {"error", error.what()}});
  }
  kJobAttemptLog.debug(
      "issuance job ran",
      {{"job", job.id}, {"kind", jobKindName(job.kind)}, {"outcome", jobOutcomeName(outcome)}});
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
  if (config_.onAttempt && outcome != JobOutcome::kDeferred && outcome != JobOutcome::kDropped) {
    config_.onAttempt(job.kind, outcome, took.count());
  }
  if (config_.events) {
    if (auto event = certificateEvent(job, outcome, took.count(), config_.nowMs())) {
      config_.events(std::move(*event));
    }
  }
  return outcome;
}

JobOutcome JobRunner::runTunnelJob(Job& job, const std::atomic<bool>& cancel) {
  auto loaded = stores_.tunnels.getTunnel(job.tunnelId);
  if (!loaded) return deferForStorage(job, loaded.error(), "getTunnel");
  const Want want = *loaded ? wants(job, (*loaded)->record) : Want::kAbandon;
  switch (want) {
    case Want::kAbandon:
      kJobAttemptLog.info(
          "certificate no longer wanted",
          {{"tunnel", job.tunnelId}, {"job", job.id}, {"kind", jobKindName(job.kind)}});
      return finish(job, JobStatus::kAbandoned, "no longer wanted", JobOutcome::kAbandoned);
    case Want::kAlreadyDone:
      return finish(job, JobStatus::kDone, "", JobOutcome::kDone);
    case Want::kAlreadyFailed:
      return finish(job, JobStatus::kFailed, (*loaded)->record.certificate.error,
                    JobOutcome::kFailed);
    case Want::kRun:
      break;
  }
  const TunnelRecord& record = (*loaded)->record;
  auto names = tunnelNames(record);
  if (!names) {
    kJobAttemptLog.error("certificate request refused before issuance",
                         {{"tunnel", record.id},
                          {"certificate", record.certificate.id},
                          {"kind", jobKindName(job.kind)},
                          {"error", names.error().message}});
    return giveUp(job, "refused: " + names.error().message, true);
  }
  const IssueRequest request{record.certificate.csrPem, std::move(names).value()};
  kJobAttemptLog.info("certificate issuance attempt", {{"tunnel", record.id},
                                                       {"certificate", record.certificate.id},
                                                       {"kind", jobKindName(job.kind)},
                                                       {"attempt", job.attempts}});
  FailureDetail detail;
  auto issued = issuer_.issueDetailed(request, cancel, detail);
  if (!issued && cancel.load()) {
    // Shutting down or the lease is gone: whoever holds the job next starts it again.
    kJobAttemptLog.info(
        "certificate issuance attempt interrupted",
        {{"tunnel", job.tunnelId}, {"job", job.id}, {"error", issued.error().message}});
    return JobOutcome::kDropped;
  }
  reportToCooldown(issued.ok(), detail);
  if (!issued) {
    if (config_.onFailure) config_.onFailure(job.kind, detail);
    return recordFailure(job, issued.error(), detail);
  }
  return recordIssued(job, *issued);
}

void JobRunner::reportToCooldown(bool issued, const FailureDetail& detail) {
  if (cooldown_ == nullptr) return;
  if (issued) {
    cooldown_->recordSuccess();
  } else {
    cooldown_->recordFailure(detail);
  }
}

Result<std::vector<std::string>> JobRunner::tunnelNames(const TunnelRecord& record) const {
  auto csr = checkTunnelCsr(record.certificate.csrPem, record.id, config_.domain);
  if (!csr) return csr.error();
  if (csr->names != record.certificate.identifiers) {
    return Error{ErrorKind::kInvalid, "the record's identifiers are not the names of its CSR"};
  }
  if (record.hostname != csr->names.front()) {
    return Error{ErrorKind::kInvalid, "the record's hostname is not the name of its CSR"};
  }
  return std::move(csr).value().names;
}

JobOutcome JobRunner::recordIssued(Job& job, const IssuedCertificate& issued) {
  if (!stillLeased(job)) return JobOutcome::kDropped;
  auto written = updateIfWanted(job, [&](TunnelRecord& record) {
    CertificateInfo& certificate = record.certificate;
    certificate.state = CertificateState::kReady;
    certificate.chainPem = issued.chainPem;
    certificate.notAfterMs = issued.notAfterMs;
    certificate.error.clear();
    record.renewAtMs = renewAtMs(issued.notBeforeMs, issued.notAfterMs);
  });
  if (!written) return deferForStorage(job, written.error(), "updateTunnel");
  if (!*written) {
    kJobAttemptLog.info("certificate issued but no longer wanted",
                        {{"tunnel", job.tunnelId}, {"job", job.id}});
    return finish(job, JobStatus::kAbandoned, "no longer wanted", JobOutcome::kAbandoned);
  }
  const JobOutcome outcome = finish(job, JobStatus::kDone, "", JobOutcome::kDone);
  // The record holds the certificate whatever became of the job row: the relays may use it.
  publisher_.publishRecord(**written);
  kJobAttemptLog.info(job.kind == JobKind::kRenew ? "certificate renewed" : "certificate issued",
                      {{"tunnel", job.tunnelId},
                       {"certificate", (*written)->record.certificate.id},
                       {"attempt", job.attempts},
                       {"not_after_ms", issued.notAfterMs}});
  return outcome;
}

RetryDecision JobRunner::retryAfterFailure(const Job& job, const FailureDetail& detail) {
  const int64_t now = config_.nowMs();
  RetryDecision decision =
      decideRetry(config_.retry, detail.failure, job.attempts, job.queuedAtMs, now, jitter());
  if (decision.retry && detail.retryAfterMs > 0) {
    decision.nextRunAtMs = std::max(decision.nextRunAtMs, now + detail.retryAfterMs);
  }
  return decision;
}

JobOutcome JobRunner::recordFailure(Job& job, const Error& error, const FailureDetail& detail) {
  kJobAttemptLog.warn("certificate issuance attempt failed",
                      {{"tunnel", job.tunnelId},
                       {"job", job.id},
                       {"kind", jobKindName(job.kind)},
                       {"attempt", job.attempts},
                       {"error_class", detail.reason},
                       {"retry_class", failureClassName(detail.failure)},
                       {"http_status", detail.httpStatus},
                       {"error", error.message}});
  // A tunnel deleted or rebound meanwhile ends the job as abandoned, not failed.
  auto loaded = stores_.tunnels.getTunnel(job.tunnelId);
  if (!loaded) return deferForStorage(job, loaded.error(), "getTunnel");
  if (!*loaded || wants(job, (*loaded)->record) != Want::kRun) {
    return finish(job, JobStatus::kAbandoned, "no longer wanted", JobOutcome::kAbandoned);
  }
  const RetryDecision decision = retryAfterFailure(job, detail);
  if (!decision.retry) {
    return giveUp(job, error.message, false, detail.failure == FailureClass::kTransient);
  }
  job.nextRunAtMs = decision.nextRunAtMs;
  const JobOutcome outcome = finish(job, JobStatus::kPending, error.message, JobOutcome::kRetry);
  if (outcome == JobOutcome::kRetry) {
    noteRetryAt(decision.nextRunAtMs);
    kJobAttemptLog.info("retrying certificate issuance",
                        {{"tunnel", job.tunnelId},
                         {"job", job.id},
                         {"attempt", job.attempts},
                         {"next_run_at_ms", decision.nextRunAtMs}});
  }
  return outcome;
}

JobOutcome JobRunner::giveUp(Job& job, const std::string& message, bool refused, bool transient) {
  if (!stillLeased(job)) return JobOutcome::kDropped;
  const int64_t now = config_.nowMs();
  bool kept = false;  // a renewal that leaves the current certificate in place
  auto written = updateIfWanted(job, [&](TunnelRecord& record) {
    CertificateInfo& certificate = record.certificate;
    certificate.error = message;
    kept = job.kind == JobKind::kRenew && !refused && now < certificate.notAfterMs;
    if (kept) {
      record.renewAtMs = std::min(now + config_.renewalRetryMs, certificate.notAfterMs);
    } else {
      certificate.state = CertificateState::kFailed;
      record.renewAtMs.reset();
    }
  });
  if (!written) return deferForStorage(job, written.error(), "updateTunnel");
  if (!*written)
    return finish(job, JobStatus::kAbandoned, "no longer wanted", JobOutcome::kAbandoned);
  // A first issuance the CA or the network failed for its whole window is marked for the
  // reconcile's one requeue (job_policy.h); the record's error stays the plain message.
  const bool requeueable = transient && job.kind == JobKind::kIssue;
  const JobOutcome outcome = finish(
      job, JobStatus::kFailed, requeueable ? std::string(kTransientGiveUpMark) + message : message,
      refused ? JobOutcome::kRefused : JobOutcome::kFailed);
  publisher_.publishRecord(**written);
  kJobAttemptLog.error("certificate issuance gave up", {{"tunnel", job.tunnelId},
                                                        {"job", job.id},
                                                        {"kind", jobKindName(job.kind)},
                                                        {"attempt", job.attempts},
                                                        {"certificate_kept", kept},
                                                        {"error", message}});
  return outcome;
}

JobOutcome JobRunner::runServerJob(Job& job, const std::atomic<bool>& cancel) {
  if (!serverJobNumber(job.id, config_.domain)) {
    kJobAttemptLog.warn("a domain certificate job for another domain", {{"job", job.id}});
    return finish(job, JobStatus::kAbandoned, "not this server's domain", JobOutcome::kAbandoned);
  }
  auto named = stores_.meta.getMeta(serverJobMetaKey(config_.domain));
  if (!named) return deferForStorage(job, named.error(), "getMeta");
  if (!*named || **named != job.id) {
    return finish(job, JobStatus::kAbandoned, "superseded", JobOutcome::kAbandoned);
  }
  auto row = stores_.certificates.getServerCertificate(config_.domain);
  if (!row) return deferForStorage(job, row.error(), "getServerCertificate");
  if (!*row || (*row)->keyPem.empty()) {
    return recordServerFailure(job, Error{ErrorKind::kInternal, "the domain key is missing"},
                               failureDetailFromKind(ErrorKind::kInternal));
  }
  ServerCertificate stored = std::move(**row);
  // An earlier run stored a certificate and stopped before finishing the job.
  if (!serverCertificateDue(stored, config_.nowMs())) {
    return finish(job, JobStatus::kDone, "", JobOutcome::kDone);
  }
  auto csr = checkServerCsr(stored.csrPem, config_.domain);
  if (!csr) {
    kJobAttemptLog.error("domain certificate request refused before issuance",
                         {{"job", job.id}, {"error", csr.error().message}});
    if (!stillLeased(job)) return JobOutcome::kDropped;
    return finish(job, JobStatus::kFailed, "refused: " + csr.error().message, JobOutcome::kRefused);
  }
  const IssueRequest request{stored.csrPem, csr->names};
  kJobAttemptLog.info("domain certificate issuance attempt",
                      {{"job", job.id}, {"attempt", job.attempts}});
  FailureDetail detail;
  auto issued = issuer_.issueDetailed(request, cancel, detail);
  if (!issued && cancel.load()) {
    kJobAttemptLog.info("domain certificate issuance interrupted",
                        {{"job", job.id}, {"error", issued.error().message}});
    return JobOutcome::kDropped;
  }
  reportToCooldown(issued.ok(), detail);
  if (!issued) {
    if (config_.onFailure) config_.onFailure(job.kind, detail);
    return recordServerFailure(job, issued.error(), detail);
  }
  return recordServerIssued(job, std::move(stored), *issued);
}

JobOutcome JobRunner::recordServerIssued(Job& job, ServerCertificate row,
                                         const IssuedCertificate& issued) {
  if (!stillLeased(job)) return JobOutcome::kDropped;
  row.chainPem = issued.chainPem;
  row.notAfterMs = issued.notAfterMs;
  const Status put = stores_.certificates.putServerCertificate(row);
  if (!put) return deferForStorage(job, put.error(), "putServerCertificate");
  const JobOutcome outcome = finish(job, JobStatus::kDone, "", JobOutcome::kDone);
  kJobAttemptLog.info("domain certificate issued",
                      {{"domain", row.domain}, {"job", job.id}, {"not_after_ms", row.notAfterMs}});
  if (serverHandler_) {
    serverHandler_(row);
  } else {
    publisher_.publishApiCertificate({row.chainPem, row.keyPem, row.notAfterMs});
  }
  return outcome;
}

JobOutcome JobRunner::recordServerFailure(Job& job, const Error& error,
                                          const FailureDetail& detail) {
  kJobAttemptLog.warn("domain certificate issuance attempt failed",
                      {{"job", job.id},
                       {"attempt", job.attempts},
                       {"error_class", detail.reason},
                       {"retry_class", failureClassName(detail.failure)},
                       {"http_status", detail.httpStatus},
                       {"error", error.message}});
  const RetryDecision decision = retryAfterFailure(job, detail);
  if (decision.retry) {
    job.nextRunAtMs = decision.nextRunAtMs;
    const JobOutcome outcome = finish(job, JobStatus::kPending, error.message, JobOutcome::kRetry);
    if (outcome == JobOutcome::kRetry) noteRetryAt(decision.nextRunAtMs);
    return outcome;
  }
  if (!stillLeased(job)) return JobOutcome::kDropped;
  // ServerCertificates asks for a new job at its next check while the certificate is due.
  kJobAttemptLog.error("domain certificate issuance gave up",
                       {{"job", job.id}, {"error", error.message}});
  return finish(job, JobStatus::kFailed, error.message, JobOutcome::kFailed);
}

Result<std::optional<StoredTunnel>> JobRunner::updateIfWanted(
    const Job& job, const std::function<void(TunnelRecord&)>& change) {
  for (int attempt = 0; attempt < config_.recordAttempts; ++attempt) {
    auto loaded = stores_.tunnels.getTunnel(job.tunnelId);
    if (!loaded) return loaded.error();
    if (!*loaded || wants(job, (*loaded)->record) != Want::kRun) {
      return std::optional<StoredTunnel>{};
    }
    StoredTunnel stored = std::move(**loaded);
    change(stored.record);
    auto revision = stores_.tunnels.updateTunnel(stored.record, stored.revision);
    if (revision) {
      stored.revision = *revision;
      return std::optional<StoredTunnel>{std::move(stored)};
    }
    if (revision.error().kind != ErrorKind::kConflict) return revision.error();
  }
  return Error{ErrorKind::kConflict, "the tunnel kept changing while its certificate was recorded"};
}

bool JobRunner::stillLeased(const Job& job) {
  // Extending doubles as the check: it matches only while this machine holds the lease, and it
  // leaves a full lease for the writes that follow.
  auto extended =
      stores_.jobs.extendLease(job.id, config_.owner, config_.nowMs() + config_.leaseMs);
  if (!extended) {
    kJobAttemptLog.warn("cannot confirm a job lease; its result is dropped",
                        {{"job", job.id}, {"error", extended.error().message}});
    return false;
  }
  if (!*extended) {
    kJobAttemptLog.warn("lost the job lease; its result is dropped", {{"job", job.id}});
    return false;
  }
  return true;
}

JobOutcome JobRunner::finish(Job& job, JobStatus status, const std::string& error,
                             JobOutcome outcome) {
  job.status = status;
  job.lastError = carryRequeuedMark(job.lastError, error);
  // A finished job never runs again: its next_run_at records when it ended (for the
  // certificate_jobs{status="failed"} gauge, which counts the last 24 h).
  if (status != JobStatus::kPending) job.nextRunAtMs = config_.nowMs();
  auto finished = stores_.jobs.finishJob(job, config_.owner);
  if (!finished) {
    kJobAttemptLog.warn("cannot record a job's outcome; it runs again after its lease",
                        {{"job", job.id}, {"error", finished.error().message}});
    return JobOutcome::kDropped;
  }
  if (!*finished) {
    kJobAttemptLog.warn("lost the job lease; its result is dropped", {{"job", job.id}});
    return JobOutcome::kDropped;
  }
  return outcome;
}

JobOutcome JobRunner::deferForStorage(Job& job, const Error& error, const char* operation) {
  kJobAttemptLog.warn("storage trouble while running an issuance job; trying it again later",
                      {{"job", job.id}, {"operation", operation}, {"error", error.message}});
  // Not an issuance attempt: give back the one the claim counted.
  job.attempts = std::max(0, job.attempts - 1);
  job.nextRunAtMs = config_.nowMs() + config_.retry.baseDelayMs;
  const JobOutcome outcome = finish(job, JobStatus::kPending, job.lastError, JobOutcome::kDeferred);
  if (outcome == JobOutcome::kDeferred) noteRetryAt(job.nextRunAtMs);
  return outcome;
}

}  // namespace ot::controld
