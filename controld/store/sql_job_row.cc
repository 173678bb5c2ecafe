#include "controld/store/sql_job_row.h"

namespace ot::controld {

void intoJobRow(soci::statement& statement, JobRow& row) {
  statement.exchange(soci::into(row.id));
  statement.exchange(soci::into(row.kind));
  statement.exchange(soci::into(row.tunnelId));
  statement.exchange(soci::into(row.status));
  statement.exchange(soci::into(row.attempts));
  statement.exchange(soci::into(row.queuedAt));
  statement.exchange(soci::into(row.nextRunAt));
  statement.exchange(soci::into(row.leaseOwner));
  statement.exchange(soci::into(row.leaseUntil));
  statement.exchange(soci::into(row.lastError));
}

Result<Job> toJob(const JobRow& row) {
  const auto kind = parseJobKind(row.kind);
  const auto status = parseJobStatus(row.status);
  if (!kind || !status) {
    return Error{ErrorKind::kInternal, "job " + row.id + " has unknown kind or status"};
  }
  Job job;
  job.id = row.id;
  job.kind = *kind;
  job.tunnelId = row.tunnelId;
  job.status = *status;
  job.attempts = row.attempts;
  job.queuedAtMs = row.queuedAt;
  job.nextRunAtMs = row.nextRunAt;
  job.leaseOwner = row.leaseOwner;
  job.leaseUntilMs = row.leaseUntil;
  job.lastError = row.lastError;
  return job;
}

}  // namespace ot::controld
