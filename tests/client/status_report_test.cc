// otunnel's `status` report built from the dialer's status (client/status_report.h).
#include "client/status_report.h"

#include <doctest/doctest.h>

using ot::client::AddressStatus;
using ot::client::DialerStatus;
using ot::client::ProfileStatus;
using ot::client::reportChanged;
using ot::client::statusReportOf;

namespace {

DialerStatus twoProfiles() {
  DialerStatus status;
  status.origin = "laptop";
  ProfileStatus up{"main", 0, "relay", 443, "", "", {}};
  up.addresses.push_back(AddressStatus{"127.0.0.1", 4, 4, 3, 0, ""});
  up.addresses.push_back(AddressStatus{"::1", 4, 3, 0, 900, "connection reset"});
  ProfileStatus down{"backup", 1, "relay2", 1, "", "", {}};
  down.addresses.push_back(AddressStatus{"127.0.20.9", 2, 0, 0, 7000, "connection refused"});
  status.profiles = {up, down};
  return status;
}

}  // namespace

TEST_CASE("status report: addresses summed per profile") {
  const auto report = statusReportOf(twoProfiles());
  REQUIRE(report.profiles.size() == 2);
  const auto& main = report.profiles[0];
  CHECK(main.name == "main");
  CHECK(main.index == 0);
  CHECK(main.linksWanted == 8);
  CHECK(main.linksUp == 7);
  CHECK(main.nextTryMs == 900);
  CHECK(main.lastError == "connection reset");
  const auto& backup = report.profiles[1];
  CHECK(backup.index == 1);
  CHECK(backup.linksWanted == 2);
  CHECK(backup.linksUp == 0);
  CHECK(backup.nextTryMs == 7000);
  CHECK(backup.lastError == "connection refused");
}

TEST_CASE("status report: a fully up address hides its old error; a lookup error wins") {
  DialerStatus status = twoProfiles();
  status.profiles[0].addresses[1] = AddressStatus{"::1", 4, 4, 0, 0, "old error"};
  status.profiles[1].resolveError = "cannot resolve relay2";
  const auto report = statusReportOf(status);
  CHECK(report.profiles[0].lastError.empty());
  CHECK(report.profiles[0].nextTryMs == 0);
  CHECK(report.profiles[1].lastError == "cannot resolve relay2");
}

TEST_CASE("status report: a countdown is no change, the rest is") {
  const auto before = statusReportOf(twoProfiles());  // profile 1 waits 7000 ms
  DialerStatus later = twoProfiles();
  later.profiles[1].addresses[0].nextTryMs = 6000;
  CHECK_FALSE(reportChanged(before, statusReportOf(later), 1000));
  later.profiles[1].addresses[0].nextTryMs = 0;  // the wait ended: a dial is running
  CHECK(reportChanged(before, statusReportOf(later), 1000));
  later = twoProfiles();
  later.profiles[0].addresses[1].attached = 4;
  CHECK(reportChanged(before, statusReportOf(later), 0));
  later = twoProfiles();
  later.profiles.pop_back();
  CHECK(reportChanged(before, statusReportOf(later), 0));
}

TEST_CASE("status report: a new wait begun between two ticks is a change") {
  const auto before = statusReportOf(twoProfiles());  // profile 1 waits 7000 ms
  DialerStatus later = twoProfiles();
  // 9 s on, the 7 s wait is over and the redial failed again: a new 7 s wait, same error. The
  // relay, counting the old wait down, would show 0 ("dialing") for the next 7 s.
  later.profiles[1].addresses[0].nextTryMs = 7000;
  CHECK(reportChanged(before, statusReportOf(later), 9000));
  // The countdown with a tick's jitter is not.
  later.profiles[1].addresses[0].nextTryMs = 1500;
  CHECK_FALSE(reportChanged(before, statusReportOf(later), 5000));
  later.profiles[1].addresses[0].nextTryMs = 2800;
  CHECK_FALSE(reportChanged(before, statusReportOf(later), 5000));
}
