#include "client/dial_plan.h"

namespace ot::client {

int profileLinks(const ProfileSpec& profile, int defaultLinks) {
  return profile.links > 0 ? profile.links : defaultLinks;
}

std::vector<PlannedAddress> planAddresses(const std::vector<ProfileSpec>& profiles,
                                          const std::vector<std::vector<std::string>>& addresses,
                                          int defaultLinks) {
  std::vector<PlannedAddress> plan;
  for (size_t i = 0; i < profiles.size() && i < addresses.size(); ++i) {
    for (const std::string& address : addresses[i]) {
      plan.push_back({i, address, profileLinks(profiles[i], defaultLinks)});
    }
  }
  return plan;
}

std::vector<uint64_t> staggerDelaysMs(size_t count, uint64_t firstMs,
                                      const std::function<uint64_t(uint64_t)>& random) {
  std::vector<uint64_t> delays;
  delays.reserve(count);
  uint64_t at = firstMs;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) at += kStaggerMinMs + random(kStaggerMaxMs - kStaggerMinMs);
    delays.push_back(at);
  }
  return delays;
}

uint64_t nextResolveInMs(bool someAddressDown) {
  return someAddressDown ? kResolveWhileFailingMs : kResolveEveryMs;
}

}  // namespace ot::client
