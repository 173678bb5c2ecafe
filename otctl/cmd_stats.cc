// otctl stats and otctl mesh.
#include <cstdio>

#include "otctl/commands.h"
#include "otctl/exit_codes.h"
#include "otctl/output.h"

namespace ot::otctl {
namespace {

void line(const char* name, const std::string& value) {
  std::printf("%-22s %s\n", name, value.c_str());
}

void line(const char* name, uint64_t value) {
  line(name, std::to_string(value));
}

int stats(Client& client) {
  av1::StatsResponse response;
  const grpc::Status status = client.stub().Stats(client.context().get(), {}, &response);
  if (!status.ok()) return client.fail("stats", status);
  if (client.options().json) {
    // The same object POST /api/admin/stats answers: one gatherer, one shape.
    std::printf("%s\n", response.json().c_str());
    return kExitOk;
  }
  const av1::MachineStats& machine = response.machine();
  line("machine",
       machine.machine_id() + (machine.region().empty() ? "" : " (" + machine.region() + ")"));
  line("relayd connected", machine.relay_connected() ? "yes" : "no");
  line("tunnels", response.tunnels());
  line("deleted tunnels", response.deleted_tunnels());
  line("issuing", response.issuing_tunnels());
  line("alarms set", response.alarms_due());
  line("jobs pending", response.jobs_pending());
  line("jobs failed", response.jobs_failed());
  line("bridges (here)", response.bridges());
  line("bridges (cluster)", response.cluster_bridges());
  line("visitor connections", response.visitor_connections());
  line("forwarded out", machine.forwarded_out());
  line("forwarded in", machine.forwarded_in());
  line("forward failures", machine.forward_failures());
  line("open fds", machine.open_fds());
  line("started", formatTime(machine.started_at_unix_ms()));
  return kExitOk;
}

const char* peerStateName(av1::PeerState state) {
  switch (state) {
    case av1::PEER_STATE_UP:
      return "up";
    case av1::PEER_STATE_CONNECTING:
      return "connecting";
    case av1::PEER_STATE_UNREACHABLE:
      return "unreachable";
    default:
      return "?";
  }
}

int meshView(Client& client) {
  av1::MeshViewResponse response;
  const grpc::Status status = client.stub().MeshView(client.context().get(), {}, &response);
  if (!status.ok()) return client.fail("mesh", status);
  if (client.options().json) {
    std::printf("%s\n", toJson(response).c_str());
    return kExitOk;
  }
  std::printf("mesh seen from %s: %s\n", response.machine_id().c_str(),
              response.complete() ? "complete" : "INCOMPLETE (a peer is not linked)");
  Table machines({{"MACHINE", 14},
                  {"REGION", 6},
                  {"ADDRESS", 0},
                  {"BRIDGES", 0},
                  {"TUNNELS", 0},
                  {"ROUTES", 0},
                  {"DRAINING", 0},
                  {"STARTED", 0}});
  for (const av1::MeshMachine& m : response.machines()) {
    machines.row({m.machine_id() + (m.self() ? " *" : ""), m.region(), m.forward_address(),
                  std::to_string(m.bridges()), std::to_string(m.tunnels()),
                  std::to_string(m.routes()), m.draining() ? "yes" : "no",
                  formatTime(m.started_at_unix_ms())});
  }
  if (response.peers_size() > 0) {
    std::printf("\n");
    Table peers({{"PEER ADDRESS", 22}, {"STATE", 11}, {"MACHINE", 0}});
    for (const av1::MeshPeer& p : response.peers()) {
      peers.row({p.address(), peerStateName(p.state()), p.machine_id()});
    }
  }
  return kExitOk;
}

}  // namespace

void addStatsCommands(CLI::App& app, Action& action) {
  app.add_subcommand("stats", "counts of tunnels, jobs and bridges; this machine; the cluster")
      ->callback([&action] { action = stats; });
  app.add_subcommand("mesh", "this machine's view of the region mesh")->callback([&action] {
    action = meshView;
  });
}

}  // namespace ot::otctl
