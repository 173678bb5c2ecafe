// otctl usage ID [--range 24h|30d]: a tunnel's usage (payload bytes and visitor connections) over
// the window, in total and per named origin (docs/pools-usage.md).
#include <cstdio>
#include <memory>
#include <string>

#include "otctl/commands.h"
#include "otctl/exit_codes.h"
#include "otctl/output.h"

namespace ot::otctl {
namespace {

void usageRow(Table& table, const std::string& name, int64_t in, int64_t out, int64_t connections) {
  table.row({name, std::to_string(in), std::to_string(out), std::to_string(connections)});
}

int usage(Client& client, const std::string& id, const std::string& range) {
  av1::TunnelUsageRequest request;
  request.set_tunnel_id(id);
  request.set_range(range);
  av1::TunnelUsageResponse response;
  const grpc::Status status = client.stub().TunnelUsage(client.context().get(), request, &response);
  if (!status.ok()) return client.fail("usage", status);
  if (client.options().json) {
    std::printf("%s\n", toJson(response).c_str());
    return kExitOk;
  }
  std::printf("%s usage over the last %s (%s to %s)\n", id.c_str(), response.range().c_str(),
              formatTime(response.from_unix_ms()).c_str(),
              formatTime(response.to_unix_ms()).c_str());
  Table table({{"ORIGIN", 14}, {"BYTES_IN", 12}, {"BYTES_OUT", 12}, {"CONNECTIONS", 0}});
  const av1::UsageSeries& total = response.total();
  usageRow(table, "(total)", total.bytes_in(), total.bytes_out(), total.connections());
  int64_t in = 0;
  int64_t out = 0;
  int64_t connections = 0;
  for (const av1::UsageSeries& origin : response.origins()) {
    usageRow(table, origin.origin(), origin.bytes_in(), origin.bytes_out(), origin.connections());
    in += origin.bytes_in();
    out += origin.bytes_out();
    connections += origin.connections();
  }
  // What no named origin carried: clients attached without --origin (or a relay's origins past
  // its per-tunnel bound in one report).
  if (total.bytes_in() > in || total.bytes_out() > out || total.connections() > connections) {
    usageRow(table, "(unnamed)", total.bytes_in() - in, total.bytes_out() - out,
             total.connections() - connections);
  }
  return kExitOk;
}

}  // namespace

void addUsageCommands(CLI::App& app, Action& action) {
  auto id = std::make_shared<std::string>();
  auto range = std::make_shared<std::string>("24h");
  CLI::App* command =
      app.add_subcommand("usage", "a tunnel's usage in total and per origin (24h or 30d)");
  command->add_option("id", *id, "the tunnel's ID")->required();
  command->add_option("--range", *range, "24h (hourly) or 30d (daily)")
      ->check(CLI::IsMember({"24h", "30d"}))
      ->capture_default_str();
  command->callback([&action, id, range] {
    action = [id, range](Client& client) { return usage(client, *id, *range); };
  });
}

}  // namespace ot::otctl
