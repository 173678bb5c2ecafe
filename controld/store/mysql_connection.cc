#include "controld/store/mysql_connection.h"

#include <soci/mysql/soci-mysql.h>
#include <soci/soci.h>

namespace ot::controld {

MYSQL* mysqlConnectionOf(soci::session& sql) {
  soci::details::session_backend* backend = sql.get_backend();
  if (backend == nullptr || backend->get_backend_name() != "mysql") return nullptr;
  // SOCI does not export the typeinfo for dynamic_cast; the backend name vouches for the type.
  return static_cast<soci::mysql_session_backend*>(backend)->conn_;
}

}  // namespace ot::controld
