#include "controld/store/sql_errors.h"

#include <soci/mysql/soci-mysql.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <array>
#include <string_view>

namespace ot::controld {
namespace {

// MySQL and MariaDB server error numbers we branch on (mysqld_error.h; not all are in the
// client headers Debian ships).
constexpr unsigned kErDupKey = 1022;
constexpr unsigned kErDupEntry = 1062;
constexpr unsigned kErDupEntryWithKeyName = 1586;
constexpr unsigned kErLockWaitTimeout = 1205;
constexpr unsigned kErLockDeadlock = 1213;
constexpr unsigned kErStatementTimeout = 1969;  // MariaDB: max_statement_time exceeded
constexpr unsigned kErQueryTimeout = 3024;      // MySQL: max_execution_time exceeded
constexpr unsigned kErNetReadInterrupted = 1159;
constexpr unsigned kErNetWriteInterrupted = 1161;
// The server is going away, refused us, or cannot serve this connection any more.
constexpr std::array<unsigned, 12> kErConnectionGone = {
    1040,  // too many connections
    1042,  // cannot get host name
    1043,  // bad handshake
    1044,  // access denied to the database
    1045,  // access denied for the user
    1049,  // unknown database
    1053,  // server shutdown in progress
    1152,  // aborted connection
    1153,  // packet too large (the connection is closed)
    1927,  // connection was killed
    4031,  // disconnected by the server for inactivity (MySQL 8)
    1226,  // user has exceeded a resource limit
};

// SQLite primary result codes (sqlite3.h), without the extended bits.
constexpr int kSqliteBusy = 5;
constexpr int kSqliteLocked = 6;
constexpr int kSqliteConstraint = 19;
constexpr std::array<int, 9> kSqliteUnusable = {
    3,   // PERM
    7,   // NOMEM
    8,   // READONLY
    10,  // IOERR
    11,  // CORRUPT
    13,  // FULL
    14,  // CANTOPEN
    15,  // PROTOCOL
    26,  // NOTADB
};

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

template <typename Array, typename T>
bool among(const Array& values, T value) {
  for (const auto& v : values) {
    if (v == value) return true;
  }
  return false;
}

SqlFailure classifyMysql(unsigned number, std::string message) {
  if (number == kErDupEntry || number == kErDupEntryWithKeyName || number == kErDupKey ||
      number == kErLockDeadlock) {
    return {ErrorKind::kConflict, false, std::move(message)};
  }
  if (number == kErLockWaitTimeout || number == kErStatementTimeout || number == kErQueryTimeout) {
    return {ErrorKind::kTimeout, false, std::move(message)};
  }
  if (number == kErNetReadInterrupted || number == kErNetWriteInterrupted) {
    return {ErrorKind::kTimeout, true, std::move(message)};
  }
  // 2000-2999 are the client library's own errors: cannot connect, server gone, lost connection
  // (a read or write timeout ends here too), TLS failures. The session is unusable after them.
  if (number >= 2000 && number < 3000) {
    const bool timedOut = contains(message, "timed out") || contains(message, "timeout") ||
                          contains(message, "Timeout");
    return {timedOut ? ErrorKind::kTimeout : ErrorKind::kUnavailable, true, std::move(message)};
  }
  if (among(kErConnectionGone, number)) return {ErrorKind::kUnavailable, true, std::move(message)};
  return {ErrorKind::kInternal, false, std::move(message)};
}

SqlFailure classifySqlite(int result, std::string message) {
  const int primary = result & 0xff;
  if (primary == kSqliteBusy || primary == kSqliteLocked) {
    return {ErrorKind::kTimeout, false, std::move(message)};
  }
  if (primary == kSqliteConstraint) {
    // Only a primary key can be violated on our tables; anything else (NOT NULL) is our bug.
    const bool duplicate = contains(message, "UNIQUE constraint failed");
    return {duplicate ? ErrorKind::kConflict : ErrorKind::kInternal, false, std::move(message)};
  }
  if (among(kSqliteUnusable, primary)) return {ErrorKind::kUnavailable, true, std::move(message)};
  return {ErrorKind::kInternal, false, std::move(message)};
}

}  // namespace

SqlFailure classifySqlFailure(const std::exception& error) {
  if (const auto* mysql = dynamic_cast<const soci::mysql_soci_error*>(&error)) {
    return classifyMysql(mysql->err_num_, mysql->get_error_message());
  }
  if (const auto* sqlite = dynamic_cast<const soci::sqlite3_soci_error*>(&error)) {
    return classifySqlite(sqlite->result(), sqlite->get_error_message());
  }
  if (const auto* sociError = dynamic_cast<const soci::soci_error*>(&error)) {
    std::string message = sociError->get_error_message();
    switch (sociError->get_error_category()) {
      case soci::soci_error::connection_error:
        return {ErrorKind::kUnavailable, true, std::move(message)};
      case soci::soci_error::constraint_violation:
        return {ErrorKind::kConflict, false, std::move(message)};
      default:
        break;
    }
    // Some SOCI paths throw a bare soci_error with the driver's text (e.g. a constraint failure
    // reported while stepping a SQLite statement).
    if (contains(message, "UNIQUE constraint failed") || contains(message, "Duplicate entry")) {
      return {ErrorKind::kConflict, false, std::move(message)};
    }
    if (contains(message, "database is locked")) {
      return {ErrorKind::kTimeout, false, std::move(message)};
    }
    return {ErrorKind::kInternal, false, std::move(message)};
  }
  return {ErrorKind::kInternal, true, error.what()};
}

bool isDuplicateKey(const std::exception& error) {
  if (const auto* mysql = dynamic_cast<const soci::mysql_soci_error*>(&error)) {
    return mysql->err_num_ == kErDupEntry || mysql->err_num_ == kErDupEntryWithKeyName ||
           mysql->err_num_ == kErDupKey;
  }
  if (const auto* sociError = dynamic_cast<const soci::soci_error*>(&error)) {
    return contains(sociError->get_error_message(), "UNIQUE constraint failed");
  }
  return false;
}

}  // namespace ot::controld
