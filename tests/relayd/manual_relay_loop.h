// A private libuv loop with a RelayContext whose clock is a ManualClock, for unit tests of the
// relay's core (BridgeSession, VisitorStream) that drive time by hand. A rig derives from it: the
// loop and context are made before the rig's own members and closed after them (every handle
// closed, the loop checked empty).
#pragma once

#include <doctest/doctest.h>
#include <uv.h>

#include <cstdint>
#include <optional>

#include "common/clock.h"
#include "common/metrics.h"
#include "relayd/relay_context.h"
#include "relayd/relay_metrics.h"
#include "relayd/relayd_config.h"

namespace ot::test {

struct ManualRelayLoop {
  uv_loop_t loop{};
  ot::metrics::Metrics registry;
  ot::relayd::RelayMetrics metrics{registry};
  ot::relayd::RelaydConfig config;
  std::optional<ot::ManualClock> clock;
  std::optional<ot::relayd::RelayContext> context;

  ManualRelayLoop() {
    REQUIRE(uv_loop_init(&loop) == 0);
    clock.emplace(static_cast<int64_t>(uv_now(&loop)));
    context.emplace(&loop, config, metrics);
    context->clock = clock->clock();
  }
  ~ManualRelayLoop() {
    context->closeHandles();
    uv_run(&loop, UV_RUN_DEFAULT);
    context.reset();
    CHECK(uv_loop_close(&loop) == 0);
  }
  ManualRelayLoop(const ManualRelayLoop&) = delete;
  ManualRelayLoop& operator=(const ManualRelayLoop&) = delete;
};

}  // namespace ot::test
