// Credentials out of log lines: connection strings are redacted before anyone logs them.
// Pure string handling; used by the daemons when they report which database they use.
#pragma once

#include <string>
#include <string_view>

namespace ot::log {

// A connection string with its credentials removed, safe to log: the user:password@ part of a
// URL (everything up to the last '@' before the query, so an unescaped '@' or '/' in a password
// does not leak it), and the values of password/secret/token-like key=value parameters, in a
// query string or a "db=x user=y password=z" style string, replaced with "***".
[[nodiscard]] std::string redactUrl(std::string_view url);

}  // namespace ot::log
