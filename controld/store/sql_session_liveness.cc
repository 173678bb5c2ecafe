#include "controld/store/sql_session_liveness.h"

#include <sys/socket.h>

#include <cerrno>

#include "controld/store/mysql_connection.h"

namespace ot::controld {

bool serverEndedSession(soci::session& sql) {
  MYSQL* connection = mysqlConnectionOf(sql);
  if (connection == nullptr) return false;
  const my_socket fd = mysql_get_socket(connection);
  if (fd < 0) return true;
  char byte = 0;
  for (;;) {
    const ssize_t peeked = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (peeked < 0 && errno == EINTR) continue;
    // (EWOULDBLOCK is EAGAIN on Linux.) Nothing to read on an idle session is the one healthy
    // answer: end of stream (0), pending bytes (> 0) and socket errors (ECONNRESET) all mean the
    // server is gone or going.
    return !(peeked < 0 && errno == EAGAIN);
  }
}

}  // namespace ot::controld
