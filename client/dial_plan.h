// What otunnel dials for warm failover (docs/pools-dialer.md), as pure logic: each profile keeps
// its links on every address its host resolves to, the first dials are spread out a little
// rather than all at once, and a profile's name is looked up again sooner while one of its
// addresses cannot attach, so a changed DNS answer is followed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "client/origin_profile.h"

namespace ot::client {

// Consecutive first dials are 10-50 ms apart.
inline constexpr uint64_t kStaggerMinMs = 10;
inline constexpr uint64_t kStaggerMaxMs = 50;
// A profile's host is looked up again this often, or sooner while an address has no link.
inline constexpr uint64_t kResolveEveryMs = 180'000;
inline constexpr uint64_t kResolveWhileFailingMs = 30'000;

struct PlannedAddress {
  size_t profile = 0;   // index into the profiles
  std::string address;  // IP literal
  int links = 0;

  bool operator==(const PlannedAddress&) const = default;
};

// The links per profile: its own links=N, else `defaultLinks`.
[[nodiscard]] int profileLinks(const ProfileSpec& profile, int defaultLinks);

// One entry per (profile, address), in profile order then address order.
[[nodiscard]] std::vector<PlannedAddress> planAddresses(
    const std::vector<ProfileSpec>& profiles,
    const std::vector<std::vector<std::string>>& addresses, int defaultLinks);

// The start delays of `count` dials: the first at `firstMs`, each next one kStaggerMinMs +
// random(kStaggerMaxMs - kStaggerMinMs) after the one before. `random(n)` is uniform in [0, n].
[[nodiscard]] std::vector<uint64_t> staggerDelaysMs(
    size_t count, uint64_t firstMs, const std::function<uint64_t(uint64_t)>& random);

// When to look a profile's host up again, after a lookup: soon while one of its addresses has no
// link attached (or the lookup failed), else every few minutes.
[[nodiscard]] uint64_t nextResolveInMs(bool someAddressDown);

}  // namespace ot::client
