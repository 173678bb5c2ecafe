// Turns what SOCI and the drivers throw into Error values the rest of controld branches on, and
// says whether the connection that threw can still be used. Shared by the schema migration and
// the store so that both classify failures the same way.
#pragma once

#include <exception>
#include <string>

#include "common/result.h"

namespace ot::controld {

struct SqlFailure {
  ErrorKind kind = ErrorKind::kInternal;
  bool dropConnection = false;  // the session is broken (or suspect): close it, reopen later
  std::string message;
};

// kUnavailable: the server cannot be reached or refused us (the connection is dropped).
// kTimeout: a statement or lock wait ran past its bound (a client-side read timeout also drops
// the connection, a server-side one keeps it). kConflict: duplicate key or deadlock.
[[nodiscard]] SqlFailure classifySqlFailure(const std::exception& error);

[[nodiscard]] bool isDuplicateKey(const std::exception& error);

}  // namespace ot::controld
