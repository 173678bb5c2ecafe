// otctl bridges ID, reset ID and drain: a tunnel's live bridges across the mesh, resetting a
// tunnel on every machine (or --here), and draining this machine's relayd.
#include <cstdio>
#include <memory>
#include <string>

#include "otctl/commands.h"
#include "otctl/exit_codes.h"
#include "otctl/output.h"

namespace ot::otctl {
namespace {

std::string joined(const google::protobuf::RepeatedPtrField<std::string>& routes) {
  std::string out;
  for (const std::string& route : routes) {
    if (!out.empty()) out += ",";
    out += route.empty() ? "(host)" : route;
  }
  return out;
}

int bridges(Client& client, const std::string& id) {
  av1::GetTunnelRequest request;
  request.set_tunnel_id(id);
  av1::GetTunnelResponse response;
  const grpc::Status status = client.stub().GetTunnel(client.context().get(), request, &response);
  if (!status.ok()) return client.fail("bridges", status);
  if (client.options().json) {
    JsonArray json;
    for (const av1::BridgeLocation& bridge : response.bridges()) json.item(toJson(bridge));
    json.end();
    return kExitOk;
  }
  if (response.bridges_size() == 0) {
    std::printf("%s has no live bridge\n", id.c_str());
    return kExitOk;
  }
  Table table({{"MACHINE", 14},
               {"BRIDGE", 8},
               {"ROUTES", 8},
               {"ORIGIN", 6},
               {"CLIENT", 0},
               {"ATTACHED", 0}});
  for (const av1::BridgeLocation& location : response.bridges()) {
    const auto& b = location.bridge();
    table.row({location.machine_id(), b.bridge_id(), joined(b.routes()), b.origin(),
               b.peer_address(), formatTime(b.attached_at_unix_ms())});
  }
  return kExitOk;
}

int reset(Client& client, const std::string& id, bool hereOnly) {
  av1::ResetTunnelRequest request;
  request.set_tunnel_id(id);
  request.set_here_only(hereOnly);
  av1::ResetTunnelResponse response;
  const grpc::Status status = client.stub().ResetTunnel(client.context().get(), request, &response);
  if (!status.ok()) return client.fail("reset", status);
  if (client.options().json) {
    std::printf("%s\n", toJson(response).c_str());
    return kExitOk;
  }
  // Per machine: what this machine's relayd closed, and for each peer whether the event reached
  // it and how many bridges its relayd had by the mesh table (it closes its own).
  std::printf(
      "%s reset: %u bridge(s) closed on this machine, %u peer(s) told%s; clients "
      "reconnect at once\n",
      id.c_str(), response.bridges_closed(), response.peers_notified(),
      hereOnly ? " (--here)" : "");
  Table table({{"MACHINE", 14}, {"TOLD", 6}, {"BRIDGES", 0}});
  for (const av1::MachineReset& machine : response.machines()) {
    const std::string told = machine.here() ? "here" : machine.told() ? "yes" : "NO";
    table.row({machine.machine_id(), told,
               std::to_string(machine.bridges()) + (machine.here() ? " closed" : " seen")});
  }
  return kExitOk;
}

int drain(Client& client, bool undo) {
  av1::DrainRelayRequest request;
  request.set_undo(undo);
  av1::DrainRelayResponse response;
  const grpc::Status status = client.stub().DrainRelay(client.context().get(), request, &response);
  if (!status.ok()) return client.fail("drain", status);
  if (client.options().json) {
    std::printf("%s\n", toJson(response).c_str());
  } else if (response.relays() == 0) {
    std::printf("no relayd is connected to this controld\n");
    return kExitFailed;
  } else {
    std::printf(undo ? "relayd serves again\n" : "relayd is draining (it keeps running)\n");
  }
  return kExitOk;
}

}  // namespace

void addBridgeCommands(CLI::App& app, Action& action) {
  auto id = std::make_shared<std::string>();
  CLI::App* list = app.add_subcommand("bridges", "a tunnel's live bridges on every machine");
  list->add_option("id", *id, "the tunnel's ID")->required();
  list->callback([&action, id] { action = [id](Client& client) { return bridges(client, *id); }; });
  auto here = std::make_shared<bool>(false);
  CLI::App* resetCommand = app.add_subcommand(
      "reset", "close a tunnel's bridges on every machine so its clients reconnect at once");
  resetCommand->add_option("id", *id, "the tunnel's ID")->required();
  resetCommand->add_flag("--here", *here, "on this machine only; the peers are not told");
  resetCommand->callback([&action, id, here] {
    action = [id, here](Client& client) { return reset(client, *id, *here); };
  });
  auto undo = std::make_shared<bool>(false);
  CLI::App* drainCommand =
      app.add_subcommand("drain", "drain this machine's relayd as SIGTERM does, without stopping");
  drainCommand->add_flag("--undo", *undo, "serve again");
  drainCommand->callback(
      [&action, undo] { action = [undo](Client& client) { return drain(client, *undo); }; });
}

}  // namespace ot::otctl
