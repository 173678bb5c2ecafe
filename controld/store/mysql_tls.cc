#include "controld/store/mysql_tls.h"

#include <dlfcn.h>
#include <mysql.h>
#include <soci/soci.h>

#include <string>

#include "controld/store/mysql_connection.h"

// Replaces libmariadb's mysql_ssl_set() for the whole process (see the header). Same contract:
// returns 0 on success; null arguments leave that setting unset.
extern "C" int STDCALL mysql_ssl_set(MYSQL* mysql, const char* key, const char* cert,
                                     const char* ca, const char* capath, const char* cipher) {
  my_bool on = 1;
  int failed = 0;
  failed |= mysql_optionsv(mysql, MYSQL_OPT_SSL_ENFORCE, &on);
  failed |= mysql_optionsv(mysql, MYSQL_OPT_SSL_KEY, key);
  failed |= mysql_optionsv(mysql, MYSQL_OPT_SSL_CERT, cert);
  failed |= mysql_optionsv(mysql, MYSQL_OPT_SSL_CA, ca);
  failed |= mysql_optionsv(mysql, MYSQL_OPT_SSL_CAPATH, capath);
  failed |= mysql_optionsv(mysql, MYSQL_OPT_SSL_CIPHER, cipher);
  failed |= mysql_optionsv(mysql, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &on);
  return failed != 0 ? 1 : 0;
}

namespace ot::controld {

bool serverNameCheckInstalled() {
  // What a lookup from libsoci_mysql.so finds first in the global scope.
  void* resolved = dlsym(RTLD_DEFAULT, "mysql_ssl_set");
  return resolved != nullptr && resolved == reinterpret_cast<void*>(&mysql_ssl_set);
}

Status checkMysqlTls(soci::session& sql) {
  MYSQL* connection = mysqlConnectionOf(sql);
  if (connection == nullptr) return Error{ErrorKind::kInternal, "not a MySQL session"};
  if (mysql_get_ssl_cipher(connection) == nullptr) {
    return Error{ErrorKind::kUnavailable, "the database connection does not use TLS"};
  }
  my_bool verify = 0;
  if (mysql_get_optionv(connection, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify) != 0 ||
      verify == 0) {
    return Error{ErrorKind::kInternal,
                 "the database connection was opened without server certificate verification"};
  }
  return Ok{};
}

}  // namespace ot::controld
