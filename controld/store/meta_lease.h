// A lease kept in one meta row, for work that one machine of a cluster at a time may do: the
// sweep of leftover challenge records (dns_sweeper.h), the CA cool-down probe (job_runner.h) and
// creating the domain key (server_certificates.h). A holder that dies loses the lease when its
// expiry passes; one that finishes early may release it.
//
// The row's value is "<owner>@<until_ms>" (the owner may itself contain '@'); a released lease
// has an empty owner. Taking reads the row, then inserts it or compare-and-sets it against what
// was read, so of two machines taking it at the same moment exactly one wins.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "controld/store/store.h"

namespace ot::controld {

struct MetaLease {
  std::string owner;  // empty: released
  int64_t untilMs = 0;
  bool operator==(const MetaLease&) const = default;
};

// Pure.
[[nodiscard]] std::string encodeMetaLease(const MetaLease& lease);
[[nodiscard]] std::optional<MetaLease> decodeMetaLease(std::string_view text);

// Takes the lease `key` for `owner` until `until_ms`, or renews it when it is already `owner`'s.
// true: `owner` holds it now; false: another owner's lease runs past now_ms, or another machine
// took it first. A released, expired or unreadable value is taken over. Blocks on the store.
[[nodiscard]] Result<bool> takeMetaLease(MetaStore& store, const std::string& key,
                                         const std::string& owner, int64_t nowMs, int64_t untilMs);
// Releases the lease if `owner` still holds it; errors are left to the expiry.
void releaseMetaLease(MetaStore& store, const std::string& key, const std::string& owner,
                      int64_t nowMs);

}  // namespace ot::controld
