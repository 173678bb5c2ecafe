// SqlStore: durable issuance jobs with leases. A job is claimed by one conditional UPDATE that
// only matches while it is pending, due and unleased (or its lease expired), so of several
// controlds racing for a job exactly one wins; results are recorded only by the lease holder.
#include <soci/soci.h>

#include <algorithm>

#include "controld/store/sql_job_row.h"
#include "controld/store/sql_store.h"

namespace ot::controld {
namespace {

// How many due jobs one claim looks at per round; a lost race moves on to the next.
constexpr int kClaimCandidates = 16;
// Each lost race means another runner made progress, so rounds end; this only bounds the
// pathological case.
constexpr int kClaimRounds = 64;

Result<std::optional<Job>> selectJob(soci::session& sql, const std::string& id) {
  JobRow row;
  soci::statement st =
      (sql.prepare << std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = :id",
       soci::into(row.id), soci::into(row.kind), soci::into(row.tunnelId), soci::into(row.status),
       soci::into(row.attempts), soci::into(row.queuedAt), soci::into(row.nextRunAt),
       soci::into(row.leaseOwner), soci::into(row.leaseUntil), soci::into(row.lastError),
       soci::use(id));
  if (!st.execute(true)) return std::optional<Job>{};
  auto job = toJob(row);
  if (!job) return job.error();
  return std::optional<Job>{std::move(job).value()};
}

Error emptyOwner() {
  return Error{ErrorKind::kInvalid, "a lease owner must not be empty"};
}

}  // namespace

Result<bool> SqlStore::addJob(const Job& job) {
  if (job.id.empty()) return Error{ErrorKind::kInvalid, "a job needs an ID"};
  return run<bool>("addJob", [&](soci::session& sql) -> Result<bool> {
    const std::string kind = jobKindName(job.kind);
    const std::string status = jobStatusName(job.status);
    int attempts = job.attempts;
    long long queuedAt = job.queuedAtMs;
    long long nextRunAt = job.nextRunAtMs;
    long long leaseUntil = job.leaseUntilMs;
    try {
      sql << std::string("INSERT INTO jobs (") + kJobColumns +
                 ") VALUES (:id, :kind, :tunnel_id, :status, :attempts, :queued_at,"
                 " :next_run_at, :lease_owner, :lease_until, :last_error)",
          soci::use(job.id), soci::use(kind), soci::use(job.tunnelId), soci::use(status),
          soci::use(attempts), soci::use(queuedAt), soci::use(nextRunAt), soci::use(job.leaseOwner),
          soci::use(leaseUntil), soci::use(job.lastError);
    } catch (const soci::soci_error& error) {
      if (isDuplicateKey(error)) return false;
      throw;
    }
    return true;
  });
}

Result<std::optional<Job>> SqlStore::getJob(const std::string& id) {
  return run<std::optional<Job>>("getJob", [&](soci::session& sql) { return selectJob(sql, id); });
}

Result<std::optional<Job>> SqlStore::claimJob(const std::string& owner, int64_t nowMs,
                                              int64_t leaseMs, bool includeIssue) {
  if (owner.empty()) return emptyOwner();
  if (leaseMs < 1) return Error{ErrorKind::kInvalid, "a lease must last at least 1 ms"};
  return run<std::optional<Job>>("claimJob", [&](soci::session& sql) -> Result<std::optional<Job>> {
    long long now = nowMs;
    long long until = nowMs + leaseMs;
    // Renewals and the API domain's certificate first, so a flood of first issuance cannot
    // hold them up; then the longest-waiting.
    const std::string candidates =
        std::string("SELECT id FROM jobs WHERE status = 'pending' AND next_run_at <= :now") +
        " AND (lease_owner = '' OR lease_until <= :now_again)" +
        (includeIssue ? "" : " AND kind <> 'issue'") +
        " ORDER BY CASE WHEN kind = 'issue' THEN 1 ELSE 0 END, next_run_at, id"
        " LIMIT " +
        std::to_string(kClaimCandidates);
    for (int round = 0; round < kClaimRounds; ++round) {
      std::vector<std::string> ids;
      {
        std::string id;
        soci::statement st =
            (sql.prepare << candidates, soci::into(id), soci::use(now), soci::use(now));
        st.execute();
        while (st.fetch()) ids.push_back(id);
      }
      if (ids.empty()) return std::optional<Job>{};
      for (const std::string& id : ids) {
        // The same conditions again, atomically with taking the lease. attempts counts
        // claims, so an attempt cut short by a crash still counts.
        soci::statement claim =
            (sql.prepare << "UPDATE jobs SET lease_owner = :owner, lease_until = :until,"
                            " attempts = attempts + 1 WHERE id = :id AND status = 'pending'"
                            " AND next_run_at <= :now AND (lease_owner = ''"
                            " OR lease_until <= :now_again)",
             soci::use(owner), soci::use(until), soci::use(id), soci::use(now), soci::use(now));
        claim.execute(true);
        if (claim.get_affected_rows() == 1) return selectJob(sql, id);
      }
    }
    return std::optional<Job>{};
  });
}

Result<bool> SqlStore::extendLease(const std::string& jobId, const std::string& owner,
                                   int64_t leaseUntilMs) {
  if (owner.empty()) return emptyOwner();
  return run<bool>("extendLease", [&](soci::session& sql) -> Result<bool> {
    long long until = leaseUntilMs;
    soci::statement st = (sql.prepare << "UPDATE jobs SET lease_until = :until WHERE id = :id"
                                         " AND lease_owner = :owner AND status = 'pending'",
                          soci::use(until), soci::use(jobId), soci::use(owner));
    st.execute(true);
    return st.get_affected_rows() == 1;
  });
}

Result<bool> SqlStore::finishJob(const Job& job, const std::string& owner) {
  // An empty owner would match every unleased job.
  if (owner.empty()) return emptyOwner();
  return run<bool>("finishJob", [&](soci::session& sql) -> Result<bool> {
    const std::string status = jobStatusName(job.status);
    int attempts = job.attempts;
    long long nextRunAt = job.nextRunAtMs;
    soci::statement st =
        (sql.prepare
             << "UPDATE jobs SET status = :status, attempts = :attempts,"
                " next_run_at = :next_run_at, last_error = :last_error,"
                " lease_owner = '', lease_until = 0 WHERE id = :id AND lease_owner = :owner",
         soci::use(status), soci::use(attempts), soci::use(nextRunAt), soci::use(job.lastError),
         soci::use(job.id), soci::use(owner));
    st.execute(true);
    return st.get_affected_rows() == 1;
  });
}

Status SqlStore::releaseLeases(const std::string& owner) {
  if (owner.empty()) return emptyOwner();
  return run<Ok>("releaseLeases", [&](soci::session& sql) -> Result<Ok> {
    sql << "UPDATE jobs SET lease_owner = '', lease_until = 0 WHERE lease_owner = :owner",
        soci::use(owner);
    return Ok{};
  });
}

Result<int64_t> SqlStore::countJobs(JobStatus status, int64_t sinceMs) {
  return run<int64_t>("countJobs", [&](soci::session& sql) -> Result<int64_t> {
    const std::string name = jobStatusName(status);
    const long long since = sinceMs;
    long long count = 0;
    sql << "SELECT COUNT(*) FROM jobs WHERE status = :status AND next_run_at >= :since",
        soci::into(count), soci::use(name), soci::use(since);
    return int64_t{count};
  });
}

Result<std::vector<Job>> SqlStore::leasedJobs(int64_t nowMs, int limit) {
  return run<std::vector<Job>>("leasedJobs", [&](soci::session& sql) -> Result<std::vector<Job>> {
    long long now = nowMs;
    JobRow row;
    soci::statement st =
        (sql.prepare << std::string("SELECT ") + kJobColumns +
                            " FROM jobs WHERE status = 'pending' AND lease_owner <> ''"
                            " AND lease_until > :now ORDER BY id LIMIT " +
                            std::to_string(std::max(limit, 0)),
         soci::into(row.id), soci::into(row.kind), soci::into(row.tunnelId), soci::into(row.status),
         soci::into(row.attempts), soci::into(row.queuedAt), soci::into(row.nextRunAt),
         soci::into(row.leaseOwner), soci::into(row.leaseUntil), soci::into(row.lastError),
         soci::use(now));
    st.execute();
    std::vector<Job> jobs;
    while (st.fetch()) {
      auto job = toJob(row);
      if (!job) return job.error();
      jobs.push_back(std::move(job).value());
    }
    return jobs;
  });
}

Result<std::vector<Job>> SqlStore::failedJobs(JobKind kind, const std::string& errorPrefix,
                                              const std::string& afterId, int limit) {
  return run<std::vector<Job>>("failedJobs", [&](soci::session& sql) -> Result<std::vector<Job>> {
    const std::string kindName = jobKindName(kind);
    // The prefix is compared with SUBSTR, not LIKE, so no character in it is a wildcard.
    const int prefixLength = static_cast<int>(errorPrefix.size());
    JobRow row;
    soci::statement st =
        (sql.prepare << std::string("SELECT ") + kJobColumns +
                            " FROM jobs WHERE status = 'failed' AND kind = :kind AND id > :after"
                            " AND SUBSTR(last_error, 1, :length) = :prefix ORDER BY id LIMIT " +
                            std::to_string(std::max(limit, 0)),
         soci::into(row.id), soci::into(row.kind), soci::into(row.tunnelId), soci::into(row.status),
         soci::into(row.attempts), soci::into(row.queuedAt), soci::into(row.nextRunAt),
         soci::into(row.leaseOwner), soci::into(row.leaseUntil), soci::into(row.lastError),
         soci::use(kindName), soci::use(afterId), soci::use(prefixLength), soci::use(errorPrefix));
    st.execute();
    std::vector<Job> jobs;
    while (st.fetch()) {
      auto job = toJob(row);
      if (!job) return job.error();
      // MySQL's PAD SPACE collation ignores trailing spaces in '=': check the prefix exactly.
      if (job->lastError.compare(0, errorPrefix.size(), errorPrefix) != 0) continue;
      jobs.push_back(std::move(job).value());
    }
    return jobs;
  });
}

Result<bool> SqlStore::requeueFailedJob(const std::string& id, const std::string& expectedLastError,
                                        const std::string& lastError, int64_t nowMs) {
  return run<bool>("requeueFailedJob", [&](soci::session& sql) -> Result<bool> {
    long long now = nowMs;
    // As in compareAndSetMeta, the length check makes the comparison exact under PAD SPACE.
    soci::statement st =
        (sql.prepare << "UPDATE jobs SET status = 'pending', attempts = 0, queued_at = :now,"
                        " next_run_at = :now_again, last_error = :last_error, lease_owner = '',"
                        " lease_until = 0 WHERE id = :id AND status = 'failed'"
                        " AND last_error = :expected AND LENGTH(last_error) = LENGTH(:expected2)",
         soci::use(now), soci::use(now), soci::use(lastError), soci::use(id),
         soci::use(expectedLastError), soci::use(expectedLastError));
    st.execute(true);
    return st.get_affected_rows() == 1;
  });
}

}  // namespace ot::controld
