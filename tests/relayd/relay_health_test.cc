#include "relayd/relay_health.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

using ot::relayd::HealthState;
using ot::relayd::RelayHealth;

TEST_CASE("relay health: starting until the first control session, then ok") {
  RelayHealth health(30'000, 1'000);
  auto report = health.report(false, 1'000);
  CHECK(report.state == HealthState::kStarting);
  CHECK(report.httpStatus() == 503);
  // Never having had controld is "starting" however long it lasts, not "control_down".
  CHECK(health.report(false, 100'000).state == HealthState::kStarting);
  health.controlSession(true, 100'000);
  report = health.report(false, 100'001);
  CHECK(report.state == HealthState::kOk);
  CHECK(report.httpStatus() == 200);
  CHECK(report.controlConnected);
}

TEST_CASE("relay health: a control session down past the grace period is control_down") {
  RelayHealth health(30'000, 0);
  health.controlSession(true, 10);
  health.controlSession(false, 1'000);
  auto report = health.report(false, 30'999);
  CHECK(report.state == HealthState::kOk);  // within the grace: still send traffic here
  CHECK_FALSE(report.controlConnected);
  CHECK(report.controlDownMs == 29'999);
  report = health.report(false, 31'000);
  CHECK(report.state == HealthState::kControlDown);
  CHECK(report.httpStatus() == 503);
  health.controlSession(true, 40'000);
  CHECK(health.report(false, 40'000).state == HealthState::kOk);
  // A new outage counts from its own start.
  health.controlSession(false, 50'000);
  CHECK(health.report(false, 79'999).state == HealthState::kOk);
  CHECK(health.report(false, 80'000).state == HealthState::kControlDown);
}

TEST_CASE("relay health: draining wins over everything") {
  RelayHealth health(30'000, 0);
  CHECK(health.report(true, 0).state == HealthState::kDraining);
  health.controlSession(true, 1);
  CHECK(health.report(true, 2).state == HealthState::kDraining);
  CHECK(health.report(true, 2).httpStatus() == 503);
}

TEST_CASE("relay health: the body names the state, the session, the machine and the region") {
  RelayHealth health(1'000, 0);
  health.controlSession(true, 0);
  auto body = nlohmann::json::parse(ot::relayd::healthBody(health.report(false, 5), "m-1", "fra"));
  CHECK(body["status"] == "ok");
  CHECK(body["control"] == "up");
  CHECK_FALSE(body.contains("control_down_ms"));
  CHECK(body["machine"] == "m-1");
  CHECK(body["region"] == "fra");
  health.controlSession(false, 10);
  body = nlohmann::json::parse(ot::relayd::healthBody(health.report(false, 2'010), "m-1", "fra"));
  CHECK(body["status"] == "control_down");
  CHECK(body["control"] == "down");
  CHECK(body["control_down_ms"] == 2'000);
}
