#include "controld/store/meta_lease.h"

#include <charconv>

namespace ot::controld {

std::string encodeMetaLease(const MetaLease& lease) {
  return lease.owner + "@" + std::to_string(lease.untilMs);
}

std::optional<MetaLease> decodeMetaLease(std::string_view text) {
  const size_t at = text.rfind('@');
  if (at == std::string_view::npos) return std::nullopt;
  MetaLease lease;
  lease.owner = std::string(text.substr(0, at));
  const std::string_view number = text.substr(at + 1);
  const auto [end, error] =
      std::from_chars(number.data(), number.data() + number.size(), lease.untilMs);
  if (error != std::errc{} || end != number.data() + number.size() || lease.untilMs < 0) {
    return std::nullopt;
  }
  return lease;
}

Result<bool> takeMetaLease(MetaStore& store, const std::string& key, const std::string& owner,
                           int64_t nowMs, int64_t untilMs) {
  if (owner.empty()) return Error{ErrorKind::kInvalid, "a lease owner must not be empty"};
  const std::string mine = encodeMetaLease({owner, untilMs});
  auto current = store.getMeta(key);
  if (!current) return current.error();
  if (!current->has_value()) return store.insertMetaIfAbsent(key, mine);  // false: lost the race
  const auto lease = decodeMetaLease(**current);
  const bool held =
      lease && !lease->owner.empty() && lease->owner != owner && lease->untilMs > nowMs;
  if (held) return false;
  return store.compareAndSetMeta(key, **current, mine);
}

void releaseMetaLease(MetaStore& store, const std::string& key, const std::string& owner,
                      int64_t nowMs) {
  auto current = store.getMeta(key);
  if (!current || !current->has_value()) return;
  const auto lease = decodeMetaLease(**current);
  if (!lease || lease->owner != owner) return;
  (void)store.compareAndSetMeta(key, **current, encodeMetaLease({std::string(), nowMs}));
}

}  // namespace ot::controld
