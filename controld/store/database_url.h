// DATABASE_URL: which database controld uses and how it connects. Pure: parses and formats
// strings, touches no network or file. The SOCI connect string it produces holds the password;
// only redactedDatabaseUrl() may reach a log.
//
//   mysql://user:pass@host:port/db?ssl-ca=/path/ca.pem   (also mariadb://; parts percent-encoded)
//   sqlite:/absolute/path.db   sqlite:relative.db   sqlite:///absolute/path.db
//   (empty)                                                the default SQLite path
//
// MySQL query parameters: ssl-mode (disabled | verify-identity), ssl-ca, ssl-cert, ssl-key
// ('_' may replace '-'; sslca, sslcert, sslkey are accepted too). Unknown parameters are refused
// so that a typo cannot quietly weaken TLS.
//
// TLS policy: a host that is not loopback (localhost, 127.0.0.0/8, ::1) must use TLS with the
// server's certificate verified, chain and name: ssl-ca is then required (it may name the system
// bundle, /etc/ssl/certs/ca-certificates.crt, for a server with a public certificate). Only
// verify-identity exists because it is the only mode we can make SOCI 4.0.3 enforce: see
// controld/store/mysql_tls.h. A loopback host without ssl-ca connects in plain text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace ot::controld {

enum class DatabaseBackend { kSqlite, kMysql };
enum class DatabaseTls { kDisabled, kVerifyIdentity };

struct DatabaseUrl {
  DatabaseBackend backend = DatabaseBackend::kSqlite;
  std::string sqlitePath;  // kSqlite

  // kMysql. port 0 means the default (3306); an empty database selects none.
  std::string user;
  std::string password;
  std::string host;  // without brackets for IPv6
  uint16_t port = 0;
  std::string database;
  DatabaseTls tls = DatabaseTls::kDisabled;
  std::string sslCa;
  std::string sslCert;
  std::string sslKey;
  bool loopback = false;  // the host is this machine (always true for SQLite)
};

// `default_sqlite_path` is used when `url` is empty.
[[nodiscard]] Result<DatabaseUrl> parseDatabaseUrl(std::string_view url,
                                                   std::string_view defaultSqlitePath);

// The URL without its password, for logs: mysql://user:***@host:port/db?ssl-mode=...
[[nodiscard]] std::string redactedDatabaseUrl(const DatabaseUrl& url);

// Bounds that go into the connect string. SOCI's options are whole seconds, so each is rounded
// up (at least 1 s).
struct DatabaseTimeouts {
  int64_t connectMs = 20000;
  int64_t readWriteMs = 12000;  // client-side backstop for a server that stopped answering
  int64_t busyMs = 10000;       // SQLite: how long a writer waits for the lock
};

// The connect string for SOCI's mysql or sqlite3 backend. Holds the password.
[[nodiscard]] std::string sociConnectString(const DatabaseUrl& url,
                                            const DatabaseTimeouts& timeouts);

// localhost, 127.0.0.0/8, ::1 (and ::ffff:127.x.y.z). Names other than localhost are not
// resolved: they count as remote.
[[nodiscard]] bool isLoopbackHost(std::string_view host);

}  // namespace ot::controld
