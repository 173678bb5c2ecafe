#include "controld/store/meta_lease.h"

#include <charconv>

namespace ot::controld {

std::string encodeMetaLease(const MetaLease& lease) {
  return lease.owner + "@" + std::to_string(lease.until_ms);
}

std::optional<MetaLease> decodeMetaLease(std::string_view text) {
  const size_t at = text.rfind('@');
  if (at == std::string_view::npos) return std::nullopt;
  MetaLease lease;
  lease.owner = std::string(text.substr(0, at));
  const std::string_view number = text.substr(at + 1);
  const auto [end, error] =
      std::from_chars(number.data(), number.data() + number.size(), lease.until_ms);
  if (error != std::errc{} || end != number.data() + number.size() || lease.until_ms < 0) {
    return std::nullopt;
  }
  return lease;
}

Result<bool> takeMetaLease(MetaStore& store, const std::string& key, const std::string& owner,
                           int64_t now_ms, int64_t until_ms) {
  if (owner.empty()) return Error{ErrorKind::kInvalid, "a lease owner must not be empty"};
  const std::string mine = encodeMetaLease({owner, until_ms});
  auto current = store.getMeta(key);
  if (!current) return current.error();
  if (!current->has_value()) return store.insertMetaIfAbsent(key, mine);  // false: lost the race
  const auto lease = decodeMetaLease(**current);
  const bool held =
      lease && !lease->owner.empty() && lease->owner != owner && lease->until_ms > now_ms;
  if (held) return false;
  return store.compareAndSetMeta(key, **current, mine);
}

void releaseMetaLease(MetaStore& store, const std::string& key, const std::string& owner,
                      int64_t now_ms) {
  auto current = store.getMeta(key);
  if (!current || !current->has_value()) return;
  const auto lease = decodeMetaLease(**current);
  if (!lease || lease->owner != owner) return;
  (void)store.compareAndSetMeta(key, **current, encodeMetaLease({std::string(), now_ms}));
}

}  // namespace ot::controld
