// relayd: the data plane. Parses its configuration, raises the open-file limit, and runs the
// relay on this thread's event loop until SIGTERM has drained it.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <string>

#include "common/allocator_tuning.h"
#include "common/log.h"
#include "common/machine_identity.h"
#include "relayd/relay_server.h"
#include "relayd/relayd_config.h"

namespace {

// Bridges and visitors are descriptors: take every one the hard limit allows.
void raiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
  (void)getrlimit(RLIMIT_NOFILE, &limit);
  ot::log::info("open file limit", {{"soft", std::to_string(limit.rlim_cur)}});
}

}  // namespace

int main(int argc, char** argv) {
  ot::relayd::RelaydConfig config;
  CLI::App app{"relayd: OpenTunnel's data plane (SNI routing, bridges, visitor splicing)"};
  ot::relayd::addRelaydFlags(app, config);
  if (auto code = ot::config::parseCommandLine(app, argc, argv)) return *code;
  if (const std::string error = ot::relayd::finishRelaydConfig(config); !error.empty()) {
    std::fprintf(stderr, "relayd: %s\n", error.c_str());
    return 2;
  }

  // Machine and region go on every line from here on (the fields are added once, here).
  auto machineId = ot::resolveMachineId(config.identity);
  if (!machineId.ok()) {
    std::fprintf(stderr, "relayd: %s\n", machineId.error().message.c_str());
    return 2;
  }
  config.identity.machineId = std::move(machineId).value();
  ot::log::init({.format = *ot::log::parseFormat(config.logFormat),
                 .level = *ot::log::parseLevel(config.logLevel),
                 .target = "relayd",
                 .trailingFields = {{"machine", config.identity.machineId},
                                    {"region", config.identity.region}}});
  // A visitor that resets while we write to it must cost an EPIPE, not the process.
  std::signal(SIGPIPE, SIG_IGN);
  raiseOpenFileLimit();
  if (!ot::memory::tuneAllocatorForStreaming()) ot::log::debug("allocator tuning refused");
  // Free pages left inside the heap by handshake bursts go back to the kernel (~1.6 KiB per idle
  // bridge after a ramp; docs/capacity.md).
  ot::memory::HeapTrimmer trimmer;
  trimmer.start();
  ot::relayd::RelayServer server(std::move(config));
  const int code = server.run();
  trimmer.stop();
  return code;
}
