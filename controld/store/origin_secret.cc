#include "controld/store/origin_secret.h"

#include <algorithm>
#include <string>

#include "common/crypto.h"

namespace ot::controld {
namespace {

Result<OriginSecret> decode(const std::string& text) {
  const auto bytes = crypto::fromHex(text);
  if (!bytes || bytes->size() != kOriginSecretSize) {
    return Error{ErrorKind::kInvalid,
                 std::string("meta row ") + kOriginSecretMetaKey + " is not 64 hex digits"};
  }
  OriginSecret secret{};
  std::copy(bytes->begin(), bytes->end(), secret.begin());
  return secret;
}

}  // namespace

Result<OriginSecret> loadOriginSecret(MetaStore& store) {
  Result<std::optional<std::string>> stored = store.getMeta(kOriginSecretMetaKey);
  if (!stored.ok()) return stored.error();
  if (!stored->has_value()) {
    const auto random = crypto::randomBytes(kOriginSecretSize);
    if (!random) return Error{ErrorKind::kInternal, "no randomness available"};
    Result<bool> inserted = store.insertMetaIfAbsent(kOriginSecretMetaKey, crypto::toHex(*random));
    if (!inserted.ok()) return inserted.error();
    // Whoever inserted first, the row now holds the one secret every controld uses.
    stored = store.getMeta(kOriginSecretMetaKey);
    if (!stored.ok()) return stored.error();
    if (!stored->has_value()) {
      return Error{ErrorKind::kInternal, std::string("meta row ") + kOriginSecretMetaKey +
                                             " is missing right after it was written"};
    }
  }
  return decode(**stored);
}

}  // namespace ot::controld
