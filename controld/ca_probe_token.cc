#include "controld/ca_probe_token.h"

#include <charconv>

namespace ot::controld {

std::string encodeCaProbeToken(const CaProbeToken& token) {
  return token.owner + " " + std::to_string(token.until_ms);
}

std::optional<CaProbeToken> decodeCaProbeToken(std::string_view text) {
  const size_t space = text.rfind(' ');
  if (space == std::string_view::npos) return std::nullopt;
  CaProbeToken token;
  token.owner = std::string(text.substr(0, space));
  const std::string_view number = text.substr(space + 1);
  const auto [end, error] =
      std::from_chars(number.data(), number.data() + number.size(), token.until_ms);
  if (error != std::errc{} || end != number.data() + number.size() || token.until_ms < 0) {
    return std::nullopt;
  }
  if (token.owner.find(' ') != std::string::npos) return std::nullopt;
  return token;
}

Result<bool> takeCaProbeToken(Store& store, const std::string& owner, int64_t now_ms) {
  if (owner.empty()) return Error{ErrorKind::kInvalid, "a probe token owner must not be empty"};
  const std::string mine = encodeCaProbeToken({owner, now_ms + kCaProbeTokenMs});
  auto current = store.getMeta(kCaProbeMetaKey);
  if (!current) return current.error();
  if (!current->has_value()) {
    auto inserted = store.insertMetaIfAbsent(kCaProbeMetaKey, mine);
    if (!inserted) return inserted.error();
    return *inserted;  // false: another machine inserted first
  }
  const auto token = decodeCaProbeToken(**current);
  const bool free =
      !token || token->owner.empty() || token->owner == owner || token->until_ms <= now_ms;
  if (!free) return false;
  // Compare-and-set against what was read: of two machines taking it at once, one wins.
  return store.compareAndSetMeta(kCaProbeMetaKey, **current, mine);
}

void releaseCaProbeToken(Store& store, const std::string& owner, int64_t now_ms) {
  auto current = store.getMeta(kCaProbeMetaKey);
  if (!current || !current->has_value()) return;
  const auto token = decodeCaProbeToken(**current);
  if (!token || token->owner != owner) return;
  (void)store.compareAndSetMeta(kCaProbeMetaKey, **current,
                                encodeCaProbeToken({std::string(), now_ms}));
}

}  // namespace ot::controld
