// The MariaDB Connector/C handle under a SOCI session, for what SOCI does not expose (TLS
// checks, the socket).
#pragma once

#include <mysql.h>

namespace soci {
class session;
}

namespace ot::controld {

// The session's MYSQL handle, or nullptr when the session is closed or not a MySQL session.
[[nodiscard]] MYSQL* mysqlConnectionOf(soci::session& sql);

}  // namespace ot::controld
