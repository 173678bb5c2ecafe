// Server certificate verification for MySQL connections made through SOCI 4.0.3.
//
// The gap: SOCI's mysql backend turns TLS on only by calling mysql_ssl_set() when the connect
// string has sslca, and exposes no way to set MYSQL_OPT_SSL_VERIFY_SERVER_CERT. With Debian's
// MariaDB Connector/C 3.3 that means the chain is checked against the CA (the handshake fails on
// a certificate it did not issue) but the server's name is never compared with the host, so any
// certificate from that CA (any public certificate, with the system bundle) would be accepted.
// Connector/C reads no option file unless asked to, and SOCI cannot ask.
//
// The fix: this file defines mysql_ssl_set() itself. The executable's definition takes
// precedence over libmariadb's for the call inside libsoci_mysql.so (ELF symbol interposition),
// and ours does what the library's does (enforce TLS, set key, certificate, CA, CA path, cipher,
// through the public mysql_optionsv API) and also sets MYSQL_OPT_SSL_VERIFY_SERVER_CERT. Every
// TLS connection therefore verifies chain and name (IP literals against IP SANs), during the
// handshake, before any credential is sent.
//
// Because interposition depends on how the binary is linked, it is checked, fail-closed:
// serverNameCheckInstalled() before a TLS URL is used at all, and checkMysqlTls() after each
// connect (TLS in use, verification flag set on the connection).
#pragma once

#include "common/result.h"

namespace soci {
class session;
}

namespace ot::controld {

// True when the mysql_ssl_set() that SOCI's backend will call is ours.
[[nodiscard]] bool serverNameCheckInstalled();

// For a session opened with sslca: fails unless the connection uses TLS and was opened with
// server certificate verification on.
[[nodiscard]] Status checkMysqlTls(soci::session& sql);

}  // namespace ot::controld
