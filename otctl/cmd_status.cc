// otctl status ID: a tunnel's live health per origin and profile (docs/pools-status.md), the
// document GET /api/tunnel/{id}/status answers, as a table or (--json) as it is.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "otctl/commands.h"
#include "otctl/exit_codes.h"
#include "otctl/output.h"

namespace ot::otctl {
namespace {

std::string number(const nlohmann::json& value) {
  return value.is_number() ? value.dump() : "0";
}

std::string text(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int status(Client& client, const std::string& id) {
  av1::TunnelStatusRequest request;
  request.set_tunnel_id(id);
  av1::TunnelStatusResponse response;
  const grpc::Status rpc = client.stub().TunnelStatus(client.context().get(), request, &response);
  if (!rpc.ok()) return client.fail("status", rpc);
  if (client.options().json) {
    std::printf("%s\n", response.json().c_str());
    return kExitOk;
  }
  const auto doc = nlohmann::json::parse(response.json(), nullptr, false);
  if (!doc.is_object()) {
    std::fprintf(stderr, "otctl: status: controld answered something that is not JSON\n");
    return kExitFailed;
  }
  std::printf("%s: %s\n", id.c_str(), text(doc, "summary").c_str());
  const auto origins = doc.find("origins");
  if (origins == doc.end() || !origins->is_array() || origins->empty()) return kExitOk;
  if (doc.value("peerLinks", 0) > 0) {
    // The mesh table's view: links per origin on other machines (no per-profile detail there).
    std::printf("links on other machines of the mesh: %s\n", number(doc["peerLinks"]).c_str());
    for (const auto& origin : *origins) {
      if (origin.value("peerLinks", 0) == 0) continue;
      std::string machines;
      for (const auto& machine : origin.value("peerMachines", nlohmann::json::array())) {
        if (!machine.is_string()) continue;
        machines += (machines.empty() ? "" : ", ") + machine.get<std::string>();
      }
      const std::string name = text(origin, "name");
      std::printf("  %s: %s on %s\n", name.empty() ? "(unnamed)" : name.c_str(),
                  number(origin["peerLinks"]).c_str(), machines.c_str());
    }
  }
  Table table({{"ORIGIN", 8},
               {"PROFILE", 8},
               {"LINKS", 5},
               {"STREAMS", 7},
               {"WANTED", 6},
               {"UP", 4},
               {"NEXT TRY", 8},
               {"LAST ERROR", 0}});
  for (const auto& origin : *origins) {
    const std::string name = text(origin, "name");
    for (const auto& p : origin.value("profiles", nlohmann::json::array())) {
      const uint64_t next = p.value("nextTryMs", uint64_t{0});
      const bool reported = origin.value("reported", false);
      table.row({name.empty() ? "(unnamed)" : name, text(p, "name"), number(p["links"]),
                 number(p["openStreams"]), reported ? number(p["linksWanted"]) : "-",
                 reported ? number(p["linksUp"]) : "-",
                 next == 0 ? "-" : std::to_string((next + 999) / 1000) + "s",
                 text(p, "lastError")});
    }
  }
  return kExitOk;
}

}  // namespace

void addStatusCommands(CLI::App& app, Action& action) {
  auto id = std::make_shared<std::string>();
  CLI::App* command =
      app.add_subcommand("status", "a tunnel's live health: links per origin and profile");
  command->add_option("id", *id, "the tunnel's ID")->required();
  command->callback(
      [&action, id] { action = [id](Client& client) { return status(client, *id); }; });
}

}  // namespace ot::otctl
