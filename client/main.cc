// otunnel: the tunnel client (the origin half). main parses the command line, provisions the
// tunnel (blocking, before the loop), then runs a TunnelClient (tunnel_client.h: the loop, the
// bridge pool, signals and the certificate watcher). stdout gets exactly one line, the tunnel's
// URL; everything else goes to stderr.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "client/api_client.h"
#include "client/command_line.h"
#include "client/dialer_status.h"
#include "client/origin_material.h"
#include "client/provision.h"
#include "client/server_url.h"
#include "client/tunnel_client.h"
#include "client/tunnel_state.h"
#include "common/allocator_tuning.h"
#include "common/clock.h"
#include "common/log.h"

namespace {

using namespace ot::client;

void say(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
}

// `otunnel status`: every <id>.status.json in the state directory. 0 when one is running, 1 when
// none is (no file, or only stale ones), 2 when a file cannot be read.
int printStatus(const std::string& stateDir, bool json) {
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(stateDir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".status.json")) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    if (json) {
      std::printf("{\"running\": false, \"tunnels\": []}\n");
    } else {
      std::printf("otunnel: not running (no status in %s)\n", stateDir.c_str());
    }
    return 1;
  }
  const uint64_t now = static_cast<uint64_t>(ot::unixNowMs());
  bool anyRunning = false;
  nlohmann::json tunnels = nlohmann::json::array();
  for (const std::string& path : files) {
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto parsed = parseStatusJson(text);
    if (!parsed.ok()) {
      say("otunnel: " + path + ": " + parsed.error().message);
      return 2;
    }
    const bool running = !statusStale(parsed->updatedUnixMs, now);
    anyRunning = anyRunning || running;
    if (json) {
      nlohmann::json document = nlohmann::json::parse(text, nullptr, false);
      document["running"] = running;
      document["ageMs"] = now > parsed->updatedUnixMs ? now - parsed->updatedUnixMs : 0;
      tunnels.push_back(std::move(document));
    } else {
      std::printf("%s", renderStatusTable(*parsed, now).c_str());
    }
  }
  if (json) {
    const nlohmann::json out = {{"running", anyRunning}, {"tunnels", std::move(tunnels)}};
    std::printf("%s\n", out.dump(2).c_str());
  }
  return anyRunning ? 0 : 1;
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
  if (line.statusCommand) return printStatus(stateDir, line.statusJson);
  ApiClientOptions apiOptions;
  apiOptions.server = line.server;
  apiOptions.caFile = line.caFile;
  const ApiClient api(apiOptions);

  if (!line.credential.empty()) {
    // A second origin: the owner's state file without its token, no provisioning.
    auto material = loadOriginMaterial(stateFilePath(stateDir, line.server), line.terminateTls);
    if (!material) {
      say("otunnel: " + material.error().message);
      return 1;
    }
    if (line.provisionOnly) {
      std::printf("%s\n", publicUrl(material->state.hostname, line.server).c_str());
      return 0;
    }
    CommandLine running = line;
    running.stateDir = stateDir;
    const std::string url = publicUrl(material->state.hostname, line.server);
    TunnelClient client(running, apiOptions, std::move(material).value());
    return client.run([&url] {
      std::printf("%s\n", url.c_str());
      std::fflush(stdout);
    });
  }
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

  CommandLine running = line;
  running.stateDir = stateDir;  // the status file goes next to the state
  TunnelClient client(running, apiOptions, std::move(provisioned).value());
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
