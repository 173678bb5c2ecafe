// The operators' pages (the Admin service, docs/admin.md): tunnels and jobs read one bounded page
// at a time, keyset by ID, so a table of any size is listed without holding it. A role of its own
// beside store.h's: SqlStore implements it (sql_store_admin.cc) on SQLite and MariaDB alike.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "controld/store/store.h"

namespace ot::controld {

struct TunnelPageQuery {
  std::string afterId;   // "" for the first page
  std::string idPrefix;  // "" for any; otherwise [a-z0-9-] only
  bool includeDeleted = false;
  bool onlyDeleted = false;  // implies includeDeleted
  bool onlyIssuing = false;
  int limit = 100;  // 1..5000
};

struct JobPageQuery {
  std::string afterId;  // "" for the first page
  std::optional<JobStatus> status{};
  int limit = 100;  // 1..5000
};

class AdminStore {
 public:
  virtual ~AdminStore() = default;
  // Tunnels with an ID after after_id that match, by ID, at most `limit`.
  virtual Result<std::vector<StoredTunnel>> tunnelPage(const TunnelPageQuery& query) = 0;
  // Jobs with an ID after after_id (in `status` when set), by ID, at most `limit`.
  virtual Result<std::vector<Job>> jobPage(const JobPageQuery& query) = 0;
};

}  // namespace ot::controld
