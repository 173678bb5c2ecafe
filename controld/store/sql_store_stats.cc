// SqlStore: the admin stats' counts. Grouped counts over the tunnels and jobs tables, read once per
// operator request; COUNT(*) is BIGINT in both dialects and each grouping column is a small
// integer or a status name, so the rows read the same from MariaDB and SQLite.
#include <soci/soci.h>

#include "controld/store/sql_store.h"

namespace ot::controld {

Result<RecordCounts> SqlStore::recordCounts(int64_t nowMs) {
  return run<RecordCounts>("recordCounts", [&](soci::session& sql) -> Result<RecordCounts> {
    RecordCounts counts;
    int deleted = 0;
    int issuing = 0;
    int alarmed = 0;
    long long count = 0;
    soci::statement tunnels =
        (sql.prepare << "SELECT deleted, issuing,"
                        " CASE WHEN alarm_at IS NULL THEN 0 ELSE 1 END, COUNT(*)"
                        " FROM tunnels GROUP BY deleted, issuing,"
                        " CASE WHEN alarm_at IS NULL THEN 0 ELSE 1 END",
         soci::into(deleted), soci::into(issuing), soci::into(alarmed), soci::into(count));
    tunnels.execute();
    while (tunnels.fetch()) {
      if (deleted != 0) {
        counts.deleted += count;
        continue;
      }
      counts.tunnels += count;
      if (issuing != 0) counts.issuing += count;
      if (alarmed != 0) counts.alarms += count;
    }

    std::string status;
    soci::statement jobs = (sql.prepare << "SELECT status, COUNT(*) FROM jobs GROUP BY status",
                            soci::into(status), soci::into(count));
    jobs.execute();
    while (jobs.fetch()) {
      switch (parseJobStatus(status).value_or(JobStatus::kAbandoned)) {
        case JobStatus::kPending:
          counts.jobsPending += count;
          break;
        case JobStatus::kDone:
          counts.jobsDone += count;
          break;
        case JobStatus::kFailed:
          counts.jobsFailed += count;
          break;
        case JobStatus::kAbandoned:
          counts.jobsAbandoned += count;
          break;
      }
    }

    long long now = nowMs;
    long long leased = 0;
    sql << "SELECT COUNT(*) FROM jobs WHERE status = 'pending' AND lease_owner <> ''"
           " AND lease_until > :now",
        soci::into(leased), soci::use(now);
    counts.jobsLeased = leased;
    return counts;
  });
}

}  // namespace ot::controld
