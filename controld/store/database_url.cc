#include "controld/store/database_url.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <vector>

#include "common/text.h"

namespace ot::controld {
namespace {

Error invalidUrl(std::string message) {
  return Error{ErrorKind::kInvalid, std::move(message)};
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decoded text must not hold control characters: a NUL would cut the C strings the drivers get,
// and nothing legitimate needs the others.
std::optional<std::string> percentDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      const int high = hexValue(text[i + 1]);
      const int low = hexValue(text[i + 2]);
      if (high < 0 || low < 0) return std::nullopt;
      c = static_cast<char>(high * 16 + low);
      i += 2;
    }
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return std::nullopt;
    out.push_back(c);
  }
  return out;
}

std::optional<uint16_t> parsePort(std::string_view text) {
  if (text.empty() || text.size() > 5) return std::nullopt;
  uint32_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value == 0 || value > 65535) return std::nullopt;
  return static_cast<uint16_t>(value);
}

// "ssl_ca", "SSL-CA" and "sslca" all name the same parameter.
std::string canonicalParameter(std::string_view key) {
  std::string name = toLower(key);
  std::replace(name.begin(), name.end(), '_', '-');
  if (name == "sslca") return "ssl-ca";
  if (name == "sslcert") return "ssl-cert";
  if (name == "sslkey") return "ssl-key";
  if (name == "sslmode") return "ssl-mode";
  return name;
}

Result<DatabaseUrl> parseSqlite(std::string_view rest) {
  // sqlite:///abs is the URL spelling of sqlite:/abs; sqlite://host/... names a host we cannot use.
  if (rest.substr(0, 2) == "//") {
    rest.remove_prefix(2);
    if (rest.empty() || rest.front() != '/') {
      return invalidUrl(
          "sqlite URL must be sqlite:/absolute/path, sqlite:relative/path or "
          "sqlite:///absolute/path");
    }
  }
  if (rest.find('?') != std::string_view::npos || rest.find('#') != std::string_view::npos) {
    return invalidUrl("sqlite URL takes no query or fragment");
  }
  auto path = percentDecode(rest);
  if (!path) return invalidUrl("sqlite URL has a malformed %-escape or a control character");
  if (path->empty()) return invalidUrl("sqlite URL names no file");
  // Every pooled connection would get its own private in-memory database.
  if (*path == ":memory:")
    return invalidUrl("an in-memory SQLite database cannot be shared by a pool");
  // SOCI's sqlite3 connect string can quote spaces but has no escape for a double quote.
  if (path->find('"') != std::string::npos) return invalidUrl("sqlite path must not contain '\"'");
  DatabaseUrl url;
  url.backend = DatabaseBackend::kSqlite;
  url.sqlitePath = std::move(*path);
  url.loopback = true;
  return url;
}

Status applyQuery(std::string_view query, DatabaseUrl& url, std::optional<std::string>& mode) {
  std::vector<std::string> seen;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos) return invalidUrl("database URL parameter lacks '=' value");
    const std::string key = canonicalParameter(pair.substr(0, eq));
    auto value = percentDecode(pair.substr(eq + 1));
    if (!value) return invalidUrl("database URL parameter " + key + " has a malformed %-escape");
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      return invalidUrl("database URL repeats parameter " + key);
    }
    seen.push_back(key);
    if (value->empty()) return invalidUrl("database URL parameter " + key + " is empty");
    if (key == "ssl-mode") {
      mode = canonicalParameter(*value);
    } else if (key == "ssl-ca") {
      url.sslCa = std::move(*value);
    } else if (key == "ssl-cert") {
      url.sslCert = std::move(*value);
    } else if (key == "ssl-key") {
      url.sslKey = std::move(*value);
    } else {
      return invalidUrl("database URL has unknown parameter " + key +
                        " (known: ssl-mode, ssl-ca, ssl-cert, ssl-key)");
    }
  }
  return Ok{};
}

Status applyTlsPolicy(DatabaseUrl& url, const std::optional<std::string>& mode) {
  if (url.sslCert.empty() != url.sslKey.empty()) {
    return invalidUrl("ssl-cert and ssl-key go together");
  }
  if (mode && *mode != "disabled" && *mode != "verify-identity") {
    // REQUIRED and VERIFY_CA would check less than we can promise; PREFERRED could fall back to
    // plain text. SOCI 4.0.3 with MariaDB Connector/C cannot express them anyway.
    return invalidUrl("ssl-mode " + *mode +
                      " is not supported: use verify-identity (with ssl-ca), "
                      "or disabled for a loopback host");
  }
  if (mode && *mode == "disabled") {
    if (!url.loopback) {
      return invalidUrl("database host " + url.host +
                        " is not loopback: TLS with certificate verification is required, so "
                        "ssl-mode=disabled is refused");
    }
    if (!url.sslCa.empty() || !url.sslCert.empty()) {
      return invalidUrl("ssl-mode=disabled contradicts ssl-ca/ssl-cert");
    }
    url.tls = DatabaseTls::kDisabled;
    return Ok{};
  }
  if (url.sslCa.empty()) {
    if (mode) return invalidUrl("ssl-mode=verify-identity needs ssl-ca=<CA certificates file>");
    if (!url.sslCert.empty()) return invalidUrl("ssl-cert needs ssl-ca=<CA certificates file>");
    if (!url.loopback) {
      return invalidUrl("database host " + url.host +
                        " is not loopback: TLS is required; add ssl-ca=<CA certificates file> "
                        "(for a public certificate: /etc/ssl/certs/ca-certificates.crt)");
    }
    url.tls = DatabaseTls::kDisabled;
    return Ok{};
  }
  url.tls = DatabaseTls::kVerifyIdentity;
  return Ok{};
}

Result<DatabaseUrl> parseMysql(std::string_view rest) {
  if (rest.substr(0, 2) != "//") return invalidUrl("mysql URL must start with mysql://");
  rest.remove_prefix(2);
  if (rest.find('#') != std::string_view::npos) return invalidUrl("mysql URL takes no fragment");

  const size_t authorityEnd = rest.find_first_of("/?");
  const std::string_view authority = rest.substr(0, authorityEnd);
  std::string_view path;
  std::string_view query;
  if (authorityEnd != std::string_view::npos) {
    std::string_view tail = rest.substr(authorityEnd);
    const size_t q = tail.find('?');
    path = tail.substr(0, q);
    if (q != std::string_view::npos) query = tail.substr(q + 1);
  }

  DatabaseUrl url;
  url.backend = DatabaseBackend::kMysql;

  const size_t at = authority.rfind('@');
  if (at == std::string_view::npos)
    return invalidUrl("mysql URL names no user (mysql://user:pass@...)");
  const std::string_view userinfo = authority.substr(0, at);
  const std::string_view hostport = authority.substr(at + 1);
  const size_t colon = userinfo.find(':');
  auto user = percentDecode(userinfo.substr(0, colon));
  auto password = percentDecode(colon == std::string_view::npos ? std::string_view{}
                                                                : userinfo.substr(colon + 1));
  if (!user || !password) return invalidUrl("mysql URL user or password has a malformed %-escape");
  if (user->empty()) return invalidUrl("mysql URL names no user");
  url.user = std::move(*user);
  url.password = std::move(*password);

  std::string_view host;
  std::string_view port;
  if (!hostport.empty() && hostport.front() == '[') {
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos)
      return invalidUrl("mysql URL has an unterminated [IPv6] host");
    host = hostport.substr(1, close - 1);
    const std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return invalidUrl("mysql URL has junk after the [IPv6] host");
      port = after.substr(1);
      if (port.empty()) return invalidUrl("mysql URL has an empty port");
    }
  } else {
    const size_t portColon = hostport.rfind(':');
    host = hostport.substr(0, portColon);
    if (portColon != std::string_view::npos) {
      port = hostport.substr(portColon + 1);
      if (port.empty()) return invalidUrl("mysql URL has an empty port");
    }
  }
  auto decodedHost = percentDecode(host);
  if (!decodedHost || decodedHost->empty()) return invalidUrl("mysql URL names no host");
  url.host = std::move(*decodedHost);
  if (!port.empty()) {
    const auto number = parsePort(port);
    if (!number) return invalidUrl("mysql URL port must be 1-65535");
    url.port = *number;
  }

  if (!path.empty()) {
    auto database = percentDecode(path.substr(1));
    if (!database) return invalidUrl("mysql URL database has a malformed %-escape");
    if (database->find('/') != std::string::npos)
      return invalidUrl("mysql URL database contains '/'");
    url.database = std::move(*database);
  }

  url.loopback = isLoopbackHost(url.host);
  std::optional<std::string> mode;
  if (auto status = applyQuery(query, url, mode); !status) return status.error();
  if (auto status = applyTlsPolicy(url, mode); !status) return status.error();
  return url;
}

// A value in SOCI's mysql connect string: single-quoted, with backslash escapes.
std::string quoteMysqlValue(std::string_view value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\\' || c == '\'') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

int64_t wholeSeconds(int64_t ms) {
  return std::max<int64_t>(1, (ms + 999) / 1000);
}

}  // namespace

bool isLoopbackHost(std::string_view host) {
  const std::string name = toLower(host);
  if (name == "localhost" || name == "localhost.") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, name.c_str(), &v6) == 1) {
    static constexpr uint8_t kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    if (std::equal(std::begin(kLoopback), std::end(kLoopback), v6.s6_addr)) return true;
    // ::ffff:127.x.y.z, an IPv4 loopback address in IPv6 clothing.
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::equal(std::begin(kMapped), std::end(kMapped), v6.s6_addr) && v6.s6_addr[12] == 127;
  }
  return false;
}

Result<DatabaseUrl> parseDatabaseUrl(std::string_view text, std::string_view defaultSqlitePath) {
  if (text.empty()) {
    if (defaultSqlitePath.empty()) return invalidUrl("no database URL and no default SQLite path");
    return parseSqlite(defaultSqlitePath);
  }
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    return invalidUrl("database URL has no scheme (mysql://... or sqlite:...)");
  }
  const std::string scheme = toLower(text.substr(0, colon));
  const std::string_view rest = text.substr(colon + 1);
  if (scheme == "sqlite" || scheme == "sqlite3") return parseSqlite(rest);
  if (scheme == "mysql" || scheme == "mariadb") return parseMysql(rest);
  return invalidUrl("database URL scheme " + scheme + " is not supported (mysql or sqlite)");
}

std::string redactedDatabaseUrl(const DatabaseUrl& url) {
  if (url.backend == DatabaseBackend::kSqlite) return "sqlite:" + url.sqlitePath;
  std::string out = "mysql://" + url.user;
  if (!url.password.empty()) out += ":***";
  out += "@";
  out += url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  if (url.port != 0) out += ":" + std::to_string(url.port);
  out += "/" + url.database;
  if (url.tls == DatabaseTls::kVerifyIdentity) {
    out += "?ssl-mode=verify-identity&ssl-ca=" + url.sslCa;
    if (!url.sslCert.empty()) out += "&ssl-cert=" + url.sslCert;
  } else {
    out += "?ssl-mode=disabled";
  }
  return out;
}

std::string sociConnectString(const DatabaseUrl& url, const DatabaseTimeouts& timeouts) {
  if (url.backend == DatabaseBackend::kSqlite) {
    // SOCI's sqlite3 parser splits on spaces and understands double quotes around a value.
    const bool quote = url.sqlitePath.find(' ') != std::string::npos;
    std::string out = "db=";
    out += quote ? "\"" + url.sqlitePath + "\"" : url.sqlitePath;
    out += " timeout=" + std::to_string(wholeSeconds(timeouts.busyMs));
    return out;
  }
  std::string out = "host=" + quoteMysqlValue(url.host);
  if (url.port != 0) out += " port=" + std::to_string(url.port);
  out += " user=" + quoteMysqlValue(url.user);
  if (!url.password.empty()) out += " password=" + quoteMysqlValue(url.password);
  if (!url.database.empty()) out += " db=" + quoteMysqlValue(url.database);
  out += " charset=utf8mb4";
  out += " connect_timeout=" + std::to_string(wholeSeconds(timeouts.connectMs));
  out += " read_timeout=" + std::to_string(wholeSeconds(timeouts.readWriteMs));
  out += " write_timeout=" + std::to_string(wholeSeconds(timeouts.readWriteMs));
  if (url.tls == DatabaseTls::kVerifyIdentity) {
    out += " sslca=" + quoteMysqlValue(url.sslCa);
    if (!url.sslCert.empty()) {
      out += " sslcert=" + quoteMysqlValue(url.sslCert);
      out += " sslkey=" + quoteMysqlValue(url.sslKey);
    }
  }
  return out;
}

}  // namespace ot::controld
