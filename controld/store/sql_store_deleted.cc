// SqlStore: the mesh's link-up check (docs/mesh.md "Events"): which of the tunnels with a bridge
// on this machine the database says are deleted. One statement per batch of IDs, bound as
// parameters (never spliced into the text), reading the derived `deleted` column only.
#include <soci/soci.h>

#include <algorithm>

#include "controld/store/sql_store.h"

namespace ot::controld {

Result<std::vector<std::string>> SqlStore::deletedAmong(const std::vector<std::string>& ids) {
  std::vector<std::string> deleted;
  for (size_t start = 0; start < ids.size(); start += kDeletedAmongBatch) {
    const size_t end = std::min(ids.size(), start + kDeletedAmongBatch);
    auto batch = run<std::vector<std::string>>(
        "deletedAmong", [&](soci::session& sql) -> Result<std::vector<std::string>> {
          std::string query = "SELECT id FROM tunnels WHERE deleted = 1 AND id IN (";
          for (size_t i = start; i < end; ++i) {
            if (i > start) query += ", ";
            query += ":p" + std::to_string(i - start);
          }
          query += ")";
          std::string id;
          soci::statement st(sql);
          st.exchange(soci::into(id));
          for (size_t i = start; i < end; ++i) st.exchange(soci::use(ids[i]));
          st.alloc();
          st.prepare(query);
          st.define_and_bind();
          std::vector<std::string> found;
          st.execute();
          while (st.fetch()) found.push_back(id);
          return found;
        });
    if (!batch.ok()) return batch.error();
    for (auto& id : batch.value()) deleted.push_back(std::move(id));
  }
  return deleted;
}

}  // namespace ot::controld
