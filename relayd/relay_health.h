// What relayd's GET /health (HTTP_LISTEN) says: whether a load balancer should send traffic here.
// 200 "ok" only while relayd serves with controld behind it; 503 "starting" until the first control
// session is accepted (no tunnel records and no API certificate yet), "draining" from SIGTERM on,
// and "control_down" once the control session has been down CONTROL_DOWN_GRACE_MS (30 s by
// default; why that long: docs/relayd.md, Health). The body is JSON and names the state.
//
// Pure logic: the session changes and the time are passed in. Loop thread only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ot::relayd {

enum class HealthState : uint8_t { kStarting, kOk, kControlDown, kDraining };

[[nodiscard]] std::string_view healthStateName(HealthState state);

struct HealthReport {
  HealthState state = HealthState::kStarting;
  bool controlConnected = false;
  uint64_t controlDownMs = 0;  // how long the session has been down (0 while up)

  [[nodiscard]] bool healthy() const { return state == HealthState::kOk; }
  [[nodiscard]] int httpStatus() const { return healthy() ? 200 : 503; }
};

class RelayHealth {
 public:
  RelayHealth(uint64_t controlDownGraceMs, uint64_t startedAtMs)
      : graceMs_(controlDownGraceMs), downSinceMs_(startedAtMs) {}

  // The control session was accepted (true) or lost (false) at `nowMs`.
  void controlSession(bool up, uint64_t nowMs);

  [[nodiscard]] HealthReport report(bool draining, uint64_t nowMs) const;

 private:
  uint64_t graceMs_;
  uint64_t downSinceMs_;  // when the session went down (or relayd started)
  bool up_ = false;
  bool everUp_ = false;
};

// {"status":"ok","control":"up","machine":"m-...","region":"local"}; "control_down_ms" is added
// while the session is down.
[[nodiscard]] std::string healthBody(const HealthReport& report, std::string_view machine,
                                     std::string_view region);

}  // namespace ot::relayd
