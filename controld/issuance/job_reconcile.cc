// JobRunner's reconcile, run on every machine every reconcile_interval_ms: it adds the first
// issuance jobs that a bind recorded but failed to queue, and queues once more each first
// issuance that gave up on a transient failure (job_policy.h). Both only insert-if-absent or
// compare-and-set, so machines reconciling at once add or requeue each job once.
#include <utility>

#include "common/log.h"
#include "controld/issuance/job_runner.h"

namespace ot::controld {
namespace {

const log::Logger kJobReconcileLog("controld.jobs");

// Rows read per query by the reconcile.
constexpr int kReconcilePage = 500;

}  // namespace

Result<int> JobRunner::reconcile() {
  const int64_t now = config_.nowMs();
  auto added = addMissingJobs(now);
  if (!added) return added.error();
  auto requeued = requeueTransientFailures(now);
  if (!requeued) return requeued.error();
  return *added + *requeued;
}

Result<int> JobRunner::addMissingJobs(int64_t nowMs) {
  int added = 0;
  std::string after;
  while (true) {
    auto page = stores_.tunnels.listTunnels(after, kReconcilePage);
    if (!page) {
      kJobReconcileLog.warn("cannot read tunnels for the issuance reconcile",
                            {{"error", page.error().message}});
      return page.error();
    }
    for (const StoredTunnel& tunnel : *page) {
      const TunnelRecord& record = tunnel.record;
      after = record.id;
      if (record.deleted() || !record.issuing() || record.certificate.id.empty()) continue;
      auto existing = stores_.jobs.getJob(record.certificate.id);
      if (!existing) return existing.error();
      if (*existing) continue;
      const Job job = pendingJob(JobKind::kIssue, record.certificate.id, record.id, nowMs);
      auto inserted = stores_.jobs.addJob(job);
      if (!inserted) return inserted.error();
      if (*inserted) {
        ++added;
        kJobReconcileLog.info("queued a missing issuance job",
                              {{"tunnel", record.id}, {"certificate", job.id}});
      }
    }
    if (static_cast<int>(page->size()) < kReconcilePage) break;
  }
  return added;
}

Result<int> JobRunner::requeueTransientFailures(int64_t nowMs) {
  int requeued = 0;
  std::string after;
  const std::string mark(kTransientGiveUpMark);
  while (true) {
    auto page = stores_.jobs.failedJobs(JobKind::kIssue, mark, after, kReconcilePage);
    if (!page) {
      kJobReconcileLog.warn("cannot read failed jobs for the issuance reconcile",
                            {{"error", page.error().message}});
      return page.error();
    }
    for (const Job& job : *page) {
      after = job.id;
      auto done = requeue(job, nowMs);
      if (!done) {
        kJobReconcileLog.warn(
            "cannot requeue a failed issuance",
            {{"tunnel", job.tunnelId}, {"job", job.id}, {"error", done.error().message}});
        continue;  // the next reconcile tries again
      }
      if (*done) ++requeued;
    }
    if (static_cast<int>(page->size()) < kReconcilePage) break;
  }
  return requeued;
}

Result<bool> JobRunner::requeue(const Job& job, int64_t nowMs) {
  auto loaded = stores_.tunnels.getTunnel(job.tunnelId);
  if (!loaded) return loaded.error();
  if (!*loaded) return false;
  StoredTunnel stored = std::move(**loaded);
  CertificateInfo& certificate = stored.record.certificate;
  if (stored.record.deleted() || certificate.id != job.id) return false;
  // The record first, naming its revision (a conflict waits for the next reconcile): the job's
  // first run must find the certificate issuing. A machine that stops between the two writes
  // leaves the record issuing beside the failed job, which the next reconcile requeues here.
  bool written = false;
  if (certificate.state == CertificateState::kFailed) {
    certificate.state = CertificateState::kIssuing;
    certificate.error.clear();
    auto revision = stores_.tunnels.updateTunnel(stored.record, stored.revision);
    if (!revision) return revision.error();
    stored.revision = *revision;
    written = true;
  } else if (certificate.state != CertificateState::kIssuing) {
    return false;
  }
  auto requeued =
      stores_.jobs.requeueFailedJob(job.id, job.lastError, requeuedErrorText(job.lastError), nowMs);
  if (!requeued) return requeued.error();
  if (written) publisher_.publishRecord(stored);
  if (*requeued) {
    kJobReconcileLog.info("requeued a first issuance that failed on a transient error",
                          {{"tunnel", job.tunnelId}, {"job", job.id}, {"error", job.lastError}});
  }
  return *requeued;
}

}  // namespace ot::controld
