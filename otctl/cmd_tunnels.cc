// otctl tunnels list|show|delete and otctl certs: lists are read page by page and printed as each
// page arrives, so 100,000 tunnels never sit in otctl's memory either.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "otctl/commands.h"
#include "otctl/exit_codes.h"
#include "otctl/output.h"

namespace ot::otctl {
namespace {

namespace cv1 = ::opentunnel::control::v1;

const char* certName(cv1::CertificateState state) {
  switch (state) {
    case cv1::CERTIFICATE_STATE_NONE:
      return "none";
    case cv1::CERTIFICATE_STATE_ISSUING:
      return "issuing";
    case cv1::CERTIFICATE_STATE_READY:
      return "ready";
    case cv1::CERTIFICATE_STATE_FAILED:
      return "failed";
    default:
      return "?";
  }
}

// The stored record's pool, one line per origin: how it reaches the relays (docs/pools-direct.md).
// Read from record_json, so an older controld's answer prints what its records hold.
void printOrigins(const std::string& recordJson) {
  const auto record = nlohmann::json::parse(recordJson, nullptr, false);
  if (!record.is_object()) return;
  const auto origins = record.find("origins");
  if (origins == record.end() || !origins->is_array() || origins->empty()) return;
  const char* label = "origins";
  for (const auto& origin : *origins) {
    if (!origin.is_object()) continue;
    const std::string name = origin.value("name", std::string("?"));
    std::string how = "dials the relays";
    const auto direct = origin.find("direct");
    if (direct != origin.end() && direct->is_object()) {
      how = "direct: relays dial " + direct->value("address", std::string("?")) + ", " +
            std::to_string(direct->value("links", 0u)) + " links each";
    }
    std::printf("%-16s %s (%s)\n", label, name.c_str(), how.c_str());
    label = "";
  }
}

Table tunnelTable() {
  return Table({{"ID", 12},
                {"STATE", 7},
                {"CERT", 7},
                {"BRIDGES", 0},
                {"CREATED", 20},
                {"LAST CONNECTED", 20},
                {"CERT EXPIRES", 0}});
}

void tunnelRow(Table& table, const av1::TunnelSummary& t) {
  const char* state = t.deleted() ? "deleted" : t.bridges() > 0 ? "online" : "offline";
  table.row({t.tunnel_id(), state, certName(t.certificate_state()), std::to_string(t.bridges()),
             formatTime(t.created_at_unix_ms()), formatTime(t.last_connected_at_unix_ms()),
             formatTime(t.certificate_not_after_unix_ms())});
}

struct ListOptions {
  bool deleted = false;
  bool onlyDeleted = false;
  bool issuing = false;
  bool online = false;
  std::string cert;
  std::string prefix;
  uint32_t pageSize = 500;
  uint64_t limit = 0;
};

int listTunnels(Client& client, const ListOptions& options) {
  av1::ListTunnelsRequest request;
  request.set_page_size(options.pageSize);
  request.set_include_deleted(options.deleted);
  request.set_only_deleted(options.onlyDeleted);
  request.set_only_issuing(options.issuing);
  request.set_only_online(options.online);
  request.set_id_prefix(options.prefix);
  if (!options.cert.empty()) {
    cv1::CertificateState state = cv1::CERTIFICATE_STATE_UNSPECIFIED;
    for (auto candidate : {cv1::CERTIFICATE_STATE_NONE, cv1::CERTIFICATE_STATE_ISSUING,
                           cv1::CERTIFICATE_STATE_READY, cv1::CERTIFICATE_STATE_FAILED}) {
      if (options.cert == certName(candidate)) state = candidate;
    }
    if (state == cv1::CERTIFICATE_STATE_UNSPECIFIED) {
      std::fprintf(stderr, "otctl: --cert is none, issuing, ready or failed\n");
      return kExitUsage;
    }
    request.set_certificate_state(state);
  }
  Table table = tunnelTable();
  JsonArray json;
  uint64_t shown = 0;
  while (true) {
    av1::ListTunnelsResponse page;
    const grpc::Status status = client.stub().ListTunnels(client.context().get(), request, &page);
    if (!status.ok()) {
      if (client.options().json) json.end();
      return client.fail("tunnels list", status);
    }
    for (const av1::TunnelSummary& tunnel : page.tunnels()) {
      if (options.limit != 0 && shown >= options.limit) break;
      ++shown;
      if (client.options().json) {
        json.item(toJson(tunnel));
      } else {
        tunnelRow(table, tunnel);
      }
    }
    std::fflush(stdout);
    if (page.next_page_token().empty() || (options.limit != 0 && shown >= options.limit)) break;
    request.set_page_token(page.next_page_token());
  }
  if (client.options().json) {
    json.end();
  } else if (shown == 0) {
    std::printf("no tunnels\n");
  }
  return kExitOk;
}

int showTunnel(Client& client, const std::string& id) {
  av1::GetTunnelRequest request;
  request.set_tunnel_id(id);
  av1::GetTunnelResponse response;
  const grpc::Status status = client.stub().GetTunnel(client.context().get(), request, &response);
  if (!status.ok()) return client.fail("tunnels show", status);
  if (client.options().json) {
    std::printf("%s\n", toJson(response).c_str());
    return kExitOk;
  }
  const av1::TunnelSummary& t = response.summary();
  std::printf("%-16s %s\n", "id", t.tunnel_id().c_str());
  std::printf("%-16s %s\n", "hostname", t.hostname().c_str());
  std::printf("%-16s %s\n", "state",
              t.deleted()       ? "deleted"
              : t.bridges() > 0 ? "online"
                                : "offline");
  std::printf("%-16s %s\n", "certificate", certName(t.certificate_state()));
  std::printf("%-16s %s\n", "cert expires", formatTime(t.certificate_not_after_unix_ms()).c_str());
  std::printf("%-16s %llu\n", "revision", static_cast<unsigned long long>(t.revision()));
  std::printf("%-16s %s\n", "created", formatTime(t.created_at_unix_ms()).c_str());
  std::printf("%-16s %s\n", "last connected", formatTime(t.last_connected_at_unix_ms()).c_str());
  std::printf("%-16s %s\n", "renewal alarm", formatTime(response.alarm_at_unix_ms()).c_str());
  std::printf("%-16s %u\n", "bridges", t.bridges());
  printOrigins(response.record_json());
  return kExitOk;
}

int deleteTunnel(Client& client, const std::string& id) {
  av1::DeleteTunnelRequest request;
  request.set_tunnel_id(id);
  av1::DeleteTunnelResponse response;
  const grpc::Status status =
      client.stub().DeleteTunnel(client.context().get(), request, &response);
  if (!status.ok()) return client.fail("tunnels delete", status);
  if (client.options().json) {
    std::printf("%s\n", toJson(response).c_str());
  } else {
    std::printf("%s %s\n", id.c_str(),
                response.already_deleted() ? "was already deleted" : "deleted");
  }
  return kExitOk;
}

int expiringCertificates(Client& client, int64_t withinMs) {
  av1::ExpiringCertificatesRequest request;
  request.set_within_ms(withinMs);
  Table table = tunnelTable();
  JsonArray json;
  uint64_t shown = 0;
  while (true) {
    av1::ExpiringCertificatesResponse page;
    const grpc::Status status =
        client.stub().ExpiringCertificates(client.context().get(), request, &page);
    if (!status.ok()) {
      if (client.options().json) json.end();
      return client.fail("certs", status);
    }
    for (const av1::TunnelSummary& tunnel : page.tunnels()) {
      ++shown;
      if (client.options().json) {
        json.item(toJson(tunnel));
      } else {
        tunnelRow(table, tunnel);
      }
    }
    if (page.next_page_token().empty()) break;
    request.set_page_token(page.next_page_token());
  }
  if (client.options().json) {
    json.end();
  } else if (shown == 0) {
    std::printf("no certificate expires within that time\n");
  }
  return kExitOk;
}

}  // namespace

void addTunnelCommands(CLI::App& app, Action& action) {
  CLI::App* tunnels = app.add_subcommand("tunnels", "list, show or delete tunnels");
  tunnels->require_subcommand(1);

  auto list = std::make_shared<ListOptions>();
  CLI::App* listCommand = tunnels->add_subcommand("list", "tunnels in ID order, page by page");
  listCommand->add_flag("--deleted", list->deleted, "include deleted tunnels");
  listCommand->add_flag("--only-deleted", list->onlyDeleted, "only deleted tunnels");
  listCommand->add_flag("--issuing", list->issuing, "only tunnels with a certificate issuing");
  listCommand->add_flag("--online", list->online,
                        "only tunnels with a live bridge (the mesh's too)");
  listCommand->add_option("--cert", list->cert, "only this certificate state")
      ->check(CLI::IsMember({"none", "issuing", "ready", "failed"}));
  listCommand->add_option("--prefix", list->prefix, "only IDs starting with this");
  listCommand->add_option("--page-size", list->pageSize, "tunnels per request (at most 500)")
      ->check(CLI::Range(1, 500))
      ->capture_default_str();
  listCommand->add_option("--limit", list->limit, "stop after this many (0: all)");
  listCommand->callback(
      [&action, list] { action = [list](Client& client) { return listTunnels(client, *list); }; });

  auto id = std::make_shared<std::string>();
  CLI::App* show = tunnels->add_subcommand("show", "one tunnel's record and state");
  show->add_option("id", *id, "the tunnel's ID")->required();
  show->callback(
      [&action, id] { action = [id](Client& client) { return showTunnel(client, *id); }; });
  CLI::App* remove = tunnels->add_subcommand("delete", "delete a tunnel (as the API's DELETE)");
  remove->add_option("id", *id, "the tunnel's ID")->required();
  remove->callback(
      [&action, id] { action = [id](Client& client) { return deleteTunnel(client, *id); }; });

  auto within = std::make_shared<std::string>("14d");
  CLI::App* certs = app.add_subcommand("certs", "tunnels whose certificate expires soon");
  certs->add_option("--within", *within, "how soon: 14d, 36h, 90m, 45s")->capture_default_str();
  certs->callback([&action, within] {
    action = [within](Client& client) {
      const auto ms = parseDuration(*within);
      if (!ms || *ms == 0) {
        std::fprintf(stderr, "otctl: --within is a duration such as 14d, 36h or 90m\n");
        return kExitUsage;
      }
      return expiringCertificates(client, *ms);
    };
  });
}

}  // namespace ot::otctl
