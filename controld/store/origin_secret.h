// controld's origin secret (docs/pools-origins.md) in the meta row "origin_secret": 32 random
// bytes as 64 lowercase hex digits, made by the first controld that needs it and then shared by
// every controld on that database. Never leaves the database and the process.
#pragma once

#include "common/result.h"
#include "controld/base/origin_credentials.h"
#include "controld/store/store.h"

namespace ot::controld {

inline constexpr const char* kOriginSecretMetaKey = "origin_secret";

// Reads the secret, creating it when absent (insert-if-absent, then read again, so controlds
// starting together on one database all end up with the row that won). Blocks on storage;
// kInvalid when the row holds something else than 64 hex digits.
[[nodiscard]] Result<OriginSecret> loadOriginSecret(MetaStore& store);

}  // namespace ot::controld
