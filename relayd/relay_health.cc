#include "relayd/relay_health.h"

#include <nlohmann/json.hpp>

namespace ot::relayd {

std::string_view healthStateName(HealthState state) {
  switch (state) {
    case HealthState::kStarting:
      return "starting";
    case HealthState::kOk:
      return "ok";
    case HealthState::kControlDown:
      return "control_down";
    case HealthState::kDraining:
      return "draining";
  }
  return "starting";
}

void RelayHealth::controlSession(bool up, uint64_t nowMs) {
  if (up == up_) return;
  up_ = up;
  if (up) {
    everUp_ = true;
  } else {
    downSinceMs_ = nowMs;
  }
}

HealthReport RelayHealth::report(bool draining, uint64_t nowMs) const {
  HealthReport report;
  report.controlConnected = up_;
  report.controlDownMs = up_ || nowMs < downSinceMs_ ? 0 : nowMs - downSinceMs_;
  if (draining) {
    report.state = HealthState::kDraining;
  } else if (!everUp_) {
    report.state = HealthState::kStarting;
  } else if (!up_ && report.controlDownMs >= graceMs_) {
    report.state = HealthState::kControlDown;
  } else {
    report.state = HealthState::kOk;
  }
  return report;
}

std::string healthBody(const HealthReport& report, std::string_view machine,
                       std::string_view region) {
  nlohmann::ordered_json body;
  body["status"] = healthStateName(report.state);
  body["control"] = report.controlConnected ? "up" : "down";
  if (!report.controlConnected) body["control_down_ms"] = report.controlDownMs;
  body["machine"] = machine;
  body["region"] = region;
  return body.dump() + "\n";
}

}  // namespace ot::relayd
