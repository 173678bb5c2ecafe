#include "client/dial_plan.h"

#include <doctest/doctest.h>

#include "client/backoff.h"
#include "client/bridge_link.h"

namespace {

using namespace ot::client;

ProfileSpec profile(std::string name, int links) {
  ProfileSpec spec;
  spec.name = std::move(name);
  spec.host = "relay.example";
  spec.port = 443;
  spec.links = links;
  return spec;
}

}  // namespace

TEST_CASE("client dial plan: every address of every profile gets the profile's links") {
  const std::vector<ProfileSpec> profiles = {profile("a", 0), profile("b", 2)};
  const std::vector<std::vector<std::string>> addresses = {{"192.0.2.1", "2001:db8::1"},
                                                           {"198.51.100.7"}};
  const auto plan = planAddresses(profiles, addresses, 4);
  REQUIRE(plan.size() == 3);
  CHECK(plan[0] == PlannedAddress{0, "192.0.2.1", 4});
  CHECK(plan[1] == PlannedAddress{0, "2001:db8::1", 4});
  CHECK(plan[2] == PlannedAddress{1, "198.51.100.7", 2});
  CHECK(profileLinks(profile("c", 0), 4) == 4);
  CHECK(profileLinks(profile("c", 7), 4) == 7);
}

TEST_CASE("client dial plan: first dials are staggered 10-50 ms apart, not all at once") {
  const auto low = staggerDelaysMs(4, 0, [](uint64_t) { return uint64_t{0}; });
  CHECK(low == std::vector<uint64_t>{0, 10, 20, 30});
  const auto high = staggerDelaysMs(3, 100, [](uint64_t n) { return n; });
  CHECK(high == std::vector<uint64_t>{100, 150, 200});
  const auto real = staggerDelaysMs(16, 0, uniformRandom);
  for (size_t i = 1; i < real.size(); ++i) {
    CHECK(real[i] - real[i - 1] >= kStaggerMinMs);
    CHECK(real[i] - real[i - 1] <= kStaggerMaxMs);
  }
  CHECK(staggerDelaysMs(0, 0, uniformRandom).empty());
}

TEST_CASE("client dial plan: a failing address makes the name be looked up again sooner") {
  CHECK(nextResolveInMs(true) == 30'000);
  CHECK(nextResolveInMs(false) == 180'000);
}

TEST_CASE("client dial plan: an address's links back off up to 60 s with jitter") {
  Backoff top([](uint64_t n) { return n; }, 250, kLinkBackoffCapMs);
  uint64_t last = 0;
  for (int i = 0; i < 20; ++i) last = top.nextDelayMs();
  CHECK(last == 60'000);
  Backoff bottom([](uint64_t) { return uint64_t{0}; }, 250, kLinkBackoffCapMs);
  for (int i = 0; i < 20; ++i) last = bottom.nextDelayMs();
  CHECK(last == 30'000);  // equal jitter: half the cap at the least
  // Busy answers ("come back soon") still retry within 3 s.
  Backoff busy([](uint64_t n) { return n; }, 250, kLinkBackoffCapMs);
  for (int i = 0; i < 5; ++i) CHECK(busy.nextDelayMs(RetryHint{RetryKind::kBusy, 0}) <= 3'000);
}
