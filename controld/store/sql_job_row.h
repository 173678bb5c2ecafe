// One row of the jobs table as SOCI reads it, and the Job it stands for: shared by the job
// queue's statements (sql_store_jobs.cc) and the operators' pages (sql_store_admin.cc), so the
// columns and their conversion are written once.
#pragma once

#include <soci/soci.h>

#include <string>

#include "common/result.h"
#include "controld/store/store.h"

namespace ot::controld {

struct JobRow {
  std::string id;
  std::string kind;
  std::string tunnelId;
  std::string status;
  int attempts = 0;
  long long queuedAt = 0;
  long long nextRunAt = 0;
  std::string leaseOwner;
  long long leaseUntil = 0;
  std::string lastError;
};

// The columns JobRow holds, in the order intoJobRow binds them.
inline constexpr const char* kJobColumns =
    "id, kind, tunnel_id, status, attempts, queued_at, next_run_at, lease_owner, lease_until,"
    " last_error";

// Binds every column of kJobColumns, in order, into `row` (before the statement's other uses).
void intoJobRow(soci::statement& statement, JobRow& row);

// An unknown kind or status (a row a newer version wrote) is an error naming the job.
[[nodiscard]] Result<Job> toJob(const JobRow& row);

}  // namespace ot::controld
