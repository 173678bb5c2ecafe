// DATABASE_URL parsing: backends, percent-decoding, the TLS policy, the SOCI connect string and
// the redacted form for logs.
#include "controld/store/database_url.h"

#include <doctest/doctest.h>

namespace ot::controld {
namespace {

DatabaseUrl parsed(std::string_view text) {
  auto url = parseDatabaseUrl(text, "default.db");
  REQUIRE_MESSAGE(url.ok(), (url.ok() ? "" : url.error().message));
  return url.value();
}

std::string refusal(std::string_view text) {
  auto url = parseDatabaseUrl(text, "default.db");
  REQUIRE_FALSE(url.ok());
  CHECK(url.error().kind == ErrorKind::kInvalid);
  return url.error().message;
}

TEST_CASE("database URL: SQLite forms and the default") {
  CHECK(parsed("").backend == DatabaseBackend::kSqlite);
  CHECK(parsed("").sqlitePath == "default.db");
  CHECK(parsed("sqlite:/var/lib/opentunnel/ot.db").sqlitePath == "/var/lib/opentunnel/ot.db");
  CHECK(parsed("sqlite:data/ot.db").sqlitePath == "data/ot.db");
  CHECK(parsed("sqlite:///var/lib/ot.db").sqlitePath == "/var/lib/ot.db");
  CHECK(parsed("SQLITE:x.db").sqlitePath == "x.db");
  CHECK(parsed("sqlite:/tmp/with%20space.db").sqlitePath == "/tmp/with space.db");
  CHECK(parsed("sqlite:x.db").loopback);

  refusal("sqlite:");
  refusal("sqlite://host/x.db");
  refusal("sqlite::memory:");
  refusal("sqlite:/tmp/a%22b.db");  // a double quote
  refusal("sqlite:/tmp/a%00b.db");  // NUL
  refusal("sqlite:/tmp/x.db?mode=ro");
  CHECK_FALSE(parseDatabaseUrl("", "").ok());
}

TEST_CASE("database URL: MySQL parts, percent-decoded") {
  const DatabaseUrl url = parsed(
      "mysql://ot%40app:p%3As%2Fw%25rd%20x@db.internal:3307/open%5Ftunnel"
      "?ssl-ca=/etc/ssl/certs/ca-certificates.crt");
  CHECK(url.backend == DatabaseBackend::kMysql);
  CHECK(url.user == "ot@app");
  CHECK(url.password == "p:s/w%rd x");
  CHECK(url.host == "db.internal");
  CHECK(url.port == 3307);
  CHECK(url.database == "open_tunnel");
  CHECK(url.tls == DatabaseTls::kVerifyIdentity);
  CHECK(url.sslCa == "/etc/ssl/certs/ca-certificates.crt");
  CHECK_FALSE(url.loopback);

  const DatabaseUrl plain = parsed("mariadb://root@127.0.0.1/");
  CHECK(plain.user == "root");
  CHECK(plain.password.empty());
  CHECK(plain.port == 0);
  CHECK(plain.database.empty());
  CHECK(plain.tls == DatabaseTls::kDisabled);
  CHECK(plain.loopback);

  const DatabaseUrl v6 = parsed("mysql://u:p@[::1]:3306/db");
  CHECK(v6.host == "::1");
  CHECK(v6.port == 3306);
  CHECK(v6.loopback);
  // The last '@' ends the user part, so an unencoded '@' in the password still parses.
  CHECK(parsed("mysql://u:p@ss@localhost/db").password == "p@ss");

  refusal("mysql://db.internal/x");  // no user
  refusal("mysql://:p@localhost/x");
  refusal("mysql://u:p@/x");
  refusal("mysql://u:p@localhost:0/x");
  refusal("mysql://u:p@localhost:65536/x");
  refusal("mysql://u:p@localhost:33a/x");
  refusal("mysql://u:p@localhost:/x");
  refusal("mysql://u:p@[::1/x");
  refusal("mysql://u:p@[::1]x/x");
  refusal("mysql://u:p%2@localhost/x");
  refusal("mysql://u:p%zz@localhost/x");
  refusal("mysql://u:p@localhost/a/b");
  refusal("mysql://u:p@localhost/x#frag");
  refusal("mysql:u:p@localhost/x");
  refusal("postgres://u:p@localhost/x");
  refusal("localhost");
}

TEST_CASE("database URL: TLS is required with verification unless the host is loopback") {
  CHECK(refusal("mysql://u:p@db.example.com/ot").find("TLS is required") != std::string::npos);
  refusal("mysql://u:p@10.0.0.5/ot");
  refusal("mysql://u:p@db.example.com/ot?ssl-mode=disabled");
  refusal("mysql://u:p@db.example.com/ot?ssl-mode=required&ssl-ca=/ca.pem");
  refusal("mysql://u:p@db.example.com/ot?ssl-mode=verify-ca&ssl-ca=/ca.pem");
  refusal("mysql://u:p@db.example.com/ot?ssl-mode=preferred&ssl-ca=/ca.pem");
  refusal("mysql://u:p@db.example.com/ot?ssl-mode=verify-identity");  // no CA
  refusal("mysql://u:p@localhost/ot?ssl-mode=disabled&ssl-ca=/ca.pem");
  refusal("mysql://u:p@localhost/ot?ssl-cert=/c.pem&ssl-key=/k.pem");  // client cert, no CA
  refusal("mysql://u:p@db/ot?ssl-ca=/ca.pem&ssl-cert=/c.pem");         // cert without key
  refusal("mysql://u:p@db/ot?ssl-ca=/a.pem&sslca=/b.pem");             // repeated
  refusal("mysql://u:p@db/ot?ssl-ca=");
  refusal("mysql://u:p@db/ot?ssl-ca");
  refusal("mysql://u:p@db/ot?ssl-ca=/ca.pem&sslverify=0");  // unknown: never ignored

  const DatabaseUrl remote = parsed(
      "mysql://u:p@db.example.com/ot?SSL_MODE=VERIFY_IDENTITY&sslca=/ca.pem"
      "&ssl_cert=/c.pem&ssl-key=/k.pem");
  CHECK(remote.tls == DatabaseTls::kVerifyIdentity);
  CHECK(remote.sslCert == "/c.pem");
  CHECK(remote.sslKey == "/k.pem");

  CHECK(parsed("mysql://u:p@localhost/ot?ssl-mode=disabled").tls == DatabaseTls::kDisabled);
  // A CA turns verification on for loopback hosts too.
  CHECK(parsed("mysql://u:p@127.0.0.1/ot?ssl-ca=/ca.pem").tls == DatabaseTls::kVerifyIdentity);
}

TEST_CASE("database URL: loopback hosts") {
  CHECK(isLoopbackHost("localhost"));
  CHECK(isLoopbackHost("LocalHost"));
  CHECK(isLoopbackHost("127.0.0.1"));
  CHECK(isLoopbackHost("127.255.0.9"));
  CHECK(isLoopbackHost("::1"));
  CHECK(isLoopbackHost("0:0:0:0:0:0:0:1"));
  CHECK(isLoopbackHost("::ffff:127.0.0.1"));
  CHECK_FALSE(isLoopbackHost("128.0.0.1"));
  CHECK_FALSE(isLoopbackHost("10.0.0.1"));
  CHECK_FALSE(isLoopbackHost("::2"));
  CHECK_FALSE(isLoopbackHost("::ffff:10.0.0.1"));
  CHECK_FALSE(isLoopbackHost("127.1"));  // not how inet_pton (or we) read an address
  CHECK_FALSE(isLoopbackHost("localhost.example.com"));
  CHECK_FALSE(isLoopbackHost("db.localhost"));
  CHECK_FALSE(isLoopbackHost(""));
}

TEST_CASE("database URL: SOCI connect strings quote values and carry the bounds") {
  DatabaseTimeouts timeouts;
  timeouts.connectMs = 20000;
  timeouts.readWriteMs = 10001;  // rounded up to whole seconds
  timeouts.busyMs = 250;         // at least one second

  CHECK(sociConnectString(parsed("mysql://ot:it's%5Cx@127.0.0.1:3307/db"), timeouts) ==
        "host='127.0.0.1' port=3307 user='ot' password='it\\'s\\\\x' db='db' charset=utf8mb4"
        " connect_timeout=20 read_timeout=11 write_timeout=11");
  CHECK(sociConnectString(parsed("mysql://ot@db.example.com/ot?ssl-ca=/ca%20dir/ca.pem"
                                 "&ssl-cert=/c.pem&ssl-key=/k.pem"),
                          timeouts) ==
        "host='db.example.com' user='ot' db='ot' charset=utf8mb4 connect_timeout=20"
        " read_timeout=11 write_timeout=11 sslca='/ca dir/ca.pem' sslcert='/c.pem'"
        " sslkey='/k.pem'");
  CHECK(sociConnectString(parsed("sqlite:/var/ot.db"), timeouts) == "db=/var/ot.db timeout=1");
  CHECK(sociConnectString(parsed("sqlite:/var/my%20ot.db"), timeouts) ==
        "db=\"/var/my ot.db\" timeout=1");
}

TEST_CASE("database URL: the redacted form never shows the password") {
  const DatabaseUrl url = parsed("mysql://ot:sup3r-s3cret@db.example.com:3306/ot?ssl-ca=/ca.pem");
  const std::string redacted = redactedDatabaseUrl(url);
  CHECK(redacted ==
        "mysql://ot:***@db.example.com:3306/ot?ssl-mode=verify-identity&ssl-ca=/ca.pem");
  CHECK(redacted.find("sup3r") == std::string::npos);
  CHECK(redactedDatabaseUrl(parsed("mysql://ot@[::1]/ot")) ==
        "mysql://ot@[::1]/ot?ssl-mode=disabled");
  CHECK(redactedDatabaseUrl(parsed("sqlite:/var/ot.db")) == "sqlite:/var/ot.db");
}

}  // namespace
}  // namespace ot::controld
