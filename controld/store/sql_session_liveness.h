// Whether a pooled database session was ended by the server while it sat idle in the pool.
//
// A session kept across a MariaDB restart is dead, but the client library only finds out when a
// statement is sent and the answer never comes ("lost connection during query"). By then the
// statement may or may not have run, so it cannot be retried blindly. Checking the socket
// before the statement is sent tells a dead session apart while it is still safe to replace it.
#pragma once

namespace soci {
class session;
}

namespace ot::controld {

// True when the server has closed the session's connection or sent something unasked (an idle
// MySQL connection only receives data when the server is ending it: a "killed" or inactivity
// error, a TLS close_notify). Never blocks. SQLite sessions, and sessions with no backend, are
// never reported as ended.
[[nodiscard]] bool serverEndedSession(soci::session& sql);

}  // namespace ot::controld
