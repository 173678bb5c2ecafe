// otunnel: the tunnel client (the origin half). main parses the command line, provisions the
// tunnel (blocking, before the loop), then runs a TunnelClient (tunnel_client.h: the loop, the
// bridge pool, signals and the certificate watcher). stdout gets exactly one line, the tunnel's
// URL; everything else goes to stderr.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <variant>

#include "client/api_client.h"
#include "client/command_line.h"
#include "client/provision.h"
#include "client/server_url.h"
#include "client/tunnel_client.h"
#include "client/tunnel_state.h"
#include "common/allocator_tuning.h"
#include "common/log.h"

namespace {

using namespace ot::client;

void say(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
}

int run(const CommandLine& line) {
  ot::log::init({.format = ot::log::Format::kText, .level = line.logLevel, .target = "otunnel"});
  std::string stateDir = line.stateDir;
  if (stateDir.empty()) {
    auto found = defaultStateDir([](const char* name) { return std::getenv(name); });
    if (!found) {
      say("otunnel: no state directory: pass --state-dir or set OTUNNEL_STATE_DIR or HOME");
      return 2;
    }
    stateDir = *found;
  }
  ApiClientOptions apiOptions;
  apiOptions.server = line.server;
  apiOptions.caFile = line.caFile;
  const ApiClient api(apiOptions);

  ProvisionOptions provisionOptions;
  provisionOptions.stateDir = stateDir;
  provisionOptions.wantedId = line.wantedId;
  provisionOptions.wildcard = !line.routes.empty();
  provisionOptions.passthrough = !line.terminateTls;
  provisionOptions.issueTimeout = line.issueTimeout;
  provisionOptions.say = say;
  auto provisioned = provisionTunnel(api, provisionOptions);
  if (!provisioned) {
    say("otunnel: " + provisioned.error().message);
    return 1;
  }
  const std::string url = publicUrl(provisioned->state.hostname, line.server);
  const auto printUrl = [&url] {
    std::printf("%s\n", url.c_str());
    std::fflush(stdout);
  };
  if (line.provisionOnly) {
    printUrl();
    return 0;
  }
  if (line.server.scheme == "http") {
    say("otunnel: note: an http:// server is for development; bridges still use TLS to " +
        line.server.hostPort());
  }

  TunnelClient client(line, apiOptions, std::move(provisioned).value());
  return client.run(printUrl);
}

}  // namespace

int main(int argc, char** argv) {
  // A visitor or the relay closing a socket mid-write must be an EPIPE, not the end of otunnel.
  std::signal(SIGPIPE, SIG_IGN);
  (void)ot::memory::tuneAllocatorForStreaming();  // refused only costs speed
  auto parsed = parseCommandLine(argc, argv);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  return run(std::get<CommandLine>(parsed));
}
