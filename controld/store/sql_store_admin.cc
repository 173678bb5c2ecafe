// SqlStore: the operators' pages (the Admin service's tunnel and job lists). Keyset by the primary
// key, so each page is one index range read whatever the table's size, and a list of 100,000
// tunnels is never held at once. The filters are fixed fragments of SQL chosen by flags; every
// value (the keyset position, the prefix bounds, the status) is bound, never spliced.
#include <soci/soci.h>

#include <algorithm>

#include "controld/store/sql_job_row.h"
#include "controld/store/sql_store.h"

namespace ot::controld {
namespace {

constexpr int kMaxPage = 5000;

// The upper bound of IDs starting with `prefix`: '{' sorts after every character a tunnel ID may
// hold ([a-z0-9-]), in SQLite's BINARY and MariaDB's utf8mb4_bin collations alike.
std::string prefixEnd(const std::string& prefix) {
  return prefix + "{";
}

bool validPrefix(const std::string& prefix) {
  return std::all_of(prefix.begin(), prefix.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

}  // namespace

Result<std::vector<StoredTunnel>> SqlStore::tunnelPage(const TunnelPageQuery& query) {
  if (query.limit < 1 || query.limit > kMaxPage) {
    return Error{ErrorKind::kInvalid, "tunnelPage limit must be 1.." + std::to_string(kMaxPage)};
  }
  if (!validPrefix(query.idPrefix)) {
    return Error{ErrorKind::kInvalid, "an ID prefix holds only a-z, 0-9 and '-'"};
  }
  return run<std::vector<StoredTunnel>>(
      "tunnelPage", [&](soci::session& sql) -> Result<std::vector<StoredTunnel>> {
        std::string text =
            "SELECT id, record, revision FROM tunnels WHERE id > :after AND id >= :low"
            " AND id < :high";
        if (query.onlyDeleted) {
          text += " AND deleted = 1";
        } else if (!query.includeDeleted) {
          text += " AND deleted = 0";
        }
        if (query.onlyIssuing) text += " AND issuing = 1";
        text += " ORDER BY id LIMIT " + std::to_string(query.limit);
        const std::string low = query.idPrefix;
        const std::string high = prefixEnd(query.idPrefix);
        std::string id;
        std::string json;
        long long revision = 0;
        soci::statement st =
            (sql.prepare << text, soci::into(id), soci::into(json), soci::into(revision),
             soci::use(query.afterId), soci::use(low), soci::use(high));
        std::vector<StoredTunnel> tunnels;
        st.execute();
        while (st.fetch()) {
          auto record = tunnelRecordFromJson(json);
          if (!record) {
            return Error{ErrorKind::kInternal, "stored record of tunnel " + id +
                                                   " is unreadable: " + record.error().message};
          }
          tunnels.push_back(StoredTunnel{std::move(record).value(), revision});
        }
        return tunnels;
      });
}

Result<std::vector<Job>> SqlStore::jobPage(const JobPageQuery& query) {
  if (query.limit < 1 || query.limit > kMaxPage) {
    return Error{ErrorKind::kInvalid, "jobPage limit must be 1.." + std::to_string(kMaxPage)};
  }
  return run<std::vector<Job>>("jobPage", [&](soci::session& sql) -> Result<std::vector<Job>> {
    std::string text = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id > :after";
    const std::string status = query.status ? jobStatusName(*query.status) : "";
    if (query.status) text += " AND status = :status";
    text += " ORDER BY id LIMIT " + std::to_string(query.limit);
    JobRow row;
    soci::statement st(sql);
    intoJobRow(st, row);
    st.exchange(soci::use(query.afterId));
    if (query.status) st.exchange(soci::use(status));
    st.alloc();
    st.prepare(text);
    st.define_and_bind();
    std::vector<Job> jobs;
    st.execute();
    while (st.fetch()) {
      auto job = toJob(row);
      if (!job) return job.error();
      jobs.push_back(std::move(job).value());
    }
    return jobs;
  });
}

}  // namespace ot::controld
