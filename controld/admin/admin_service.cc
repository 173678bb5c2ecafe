#include "controld/admin/admin_service.h"

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "controld/relays/record_convert.h"

namespace ot::controld {
namespace {

const log::Logger& adminServiceLogger() {
  static const log::Logger instance("controld.admin");
  return instance;
}

// Rows one call reads at most when a filter storage cannot apply drops some: bounds the call's
// time whatever the table's size; the client goes on from next_page_token.
constexpr int kScanPage = 500;
constexpr int kMaxScanned = 5000;
constexpr int64_t kDefaultWithinMs = 14LL * 24 * 3600 * 1000;
constexpr int kDeleteAttempts = 3;

grpc::Status badTunnelId(const std::string& id) {
  return {grpc::StatusCode::INVALID_ARGUMENT, "not a tunnel ID: \"" + id + "\""};
}

grpc::Status noSuchTunnel(const std::string& id) {
  return {grpc::StatusCode::NOT_FOUND, "no tunnel " + id};
}

}  // namespace

AdminService::AdminService(AdminServiceContext context) : context_(std::move(context)) {}

int64_t AdminService::now() const {
  return context_.nowMs ? context_.nowMs() : unixNowMs();
}

mesh::MeshNode* AdminService::meshNode() const {
  return context_.mesh ? context_.mesh() : nullptr;
}

std::map<std::string, uint32_t> AdminService::bridgeCounts(const std::vector<std::string>& ids) {
  std::map<std::string, uint32_t> counts;
  for (const std::string& id : ids) {
    counts[id] = static_cast<uint32_t>(context_.registry->bridgeCount(id));
  }
  if (mesh::MeshNode* node = meshNode(); node != nullptr && !ids.empty()) {
    for (const mesh::BridgeEntry& bridge : node->peerBridgesOf(ids)) ++counts[bridge.tunnelId];
  }
  return counts;
}

Status AdminService::scan(TunnelPageQuery query, int want, const Keep& keep,
                          google::protobuf::RepeatedPtrField<av1::TunnelSummary>& out,
                          std::string& next) {
  next.clear();
  if (context_.pages == nullptr) return Error{ErrorKind::kInternal, "no pages in this store"};
  int scanned = 0;
  while (true) {
    // Unfiltered, one row more than asked says whether a next page exists; filtered, whole scan
    // pages, since any number of rows may be dropped.
    query.limit = keep ? kScanPage : want + 1;
    auto page = context_.pages->tunnelPage(query);
    if (!page) return page.error();
    std::vector<std::string> ids;
    ids.reserve(page->size());
    for (const StoredTunnel& tunnel : *page) ids.push_back(tunnel.record.id);
    const auto counts = bridgeCounts(ids);
    for (const StoredTunnel& tunnel : *page) {
      ++scanned;
      const uint32_t bridges = counts.at(tunnel.record.id);
      if (keep && !keep(tunnel, bridges)) continue;
      *out.Add() = tunnelSummary(tunnel, bridges);
      if (out.size() >= want) {
        // More may follow; the next call starts after this one (and finds nothing when none do).
        next = tunnel.record.id;
        return Ok{};
      }
    }
    if (static_cast<int>(page->size()) < query.limit) return Ok{};  // the end of the table
    query.afterId = page->back().record.id;
    if (scanned >= kMaxScanned) {
      next = query.afterId;
      return Ok{};
    }
  }
}

grpc::Status AdminService::Stats(grpc::ServerContext*, const av1::StatsRequest*,
                                 av1::StatsResponse* response) {
  auto inputs = context_.gatherStats();
  if (!inputs) return grpcStatus(inputs.error());
  *response = statsResponse(*inputs, now());
  const auto relays = context_.hub->relays();
  av1::MachineStats* machine = response->mutable_machine();
  machine->set_relay_connected(!relays.empty());
  if (!relays.empty()) machine->set_relay_epoch(relays.front().epoch);
  return grpc::Status::OK;
}

grpc::Status AdminService::ListTunnels(grpc::ServerContext*, const av1::ListTunnelsRequest* request,
                                       av1::ListTunnelsResponse* response) {
  if (!validTunnelPageToken(request->page_token())) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "not a page token of ListTunnels"};
  }
  TunnelPageQuery query;
  query.afterId = request->page_token();
  query.idPrefix = request->id_prefix();
  query.includeDeleted = request->include_deleted();
  query.onlyDeleted = request->only_deleted();
  query.onlyIssuing = request->only_issuing();
  const bool online = request->only_online();
  const auto state = request->certificate_state();
  Keep keep;
  if (online || state != opentunnel::control::v1::CERTIFICATE_STATE_UNSPECIFIED) {
    keep = [online, state](const StoredTunnel& tunnel, uint32_t bridges) {
      if (online && bridges == 0) return false;
      return state == opentunnel::control::v1::CERTIFICATE_STATE_UNSPECIFIED ||
             toProtoState(tunnel.record.certificate.state) == state;
    };
  }
  std::string next;
  const Status scanned = scan(std::move(query), adminPageSize(request->page_size()), keep,
                              *response->mutable_tunnels(), next);
  if (!scanned) return grpcStatus(scanned.error());
  response->set_next_page_token(next);
  return grpc::Status::OK;
}

grpc::Status AdminService::GetTunnel(grpc::ServerContext*, const av1::GetTunnelRequest* request,
                                     av1::GetTunnelResponse* response) {
  const std::string& id = request->tunnel_id();
  if (!isValidTunnelId(id)) return badTunnelId(id);
  auto loaded = context_.store->getTunnel(id);
  if (!loaded) return grpcStatus(loaded.error());
  if (!loaded->has_value()) return noSuchTunnel(id);
  const StoredTunnel& tunnel = **loaded;
  uint32_t bridges = 0;
  for (const BridgeEntry& bridge : context_.registry->bridgesOf(id)) {
    *response->add_bridges() = localBridgeLocation(context_.machineId, bridge);
    ++bridges;
  }
  if (mesh::MeshNode* node = meshNode()) {
    for (const mesh::BridgeEntry& bridge : node->peerBridgesOf({id})) {
      *response->add_bridges() = peerBridgeLocation(bridge);
      ++bridges;
    }
  }
  *response->mutable_summary() = tunnelSummary(tunnel, bridges);
  response->set_record_json(toJson(tunnel.record));
  response->set_alarm_at_unix_ms(tunnel.record.renewAtMs.value_or(0));
  return grpc::Status::OK;
}

grpc::Status AdminService::DeleteTunnel(grpc::ServerContext*,
                                        const av1::DeleteTunnelRequest* request,
                                        av1::DeleteTunnelResponse* response) {
  const std::string& id = request->tunnel_id();
  if (!isValidTunnelId(id)) return badTunnelId(id);
  // As the API's DELETE: the record kept as a tombstone (its ID stays taken), written only at the
  // revision read; a write in between (an attach's bookkeeping) is read again.
  for (int attempt = 0; attempt < kDeleteAttempts; ++attempt) {
    auto loaded = context_.store->getTunnel(id);
    if (!loaded) return grpcStatus(loaded.error());
    if (!loaded->has_value()) return noSuchTunnel(id);
    StoredTunnel tunnel = std::move(**loaded);
    if (tunnel.record.deleted()) {
      response->set_already_deleted(true);
      return grpc::Status::OK;
    }
    tunnel.record.deletedAtMs = now();
    tunnel.record.renewAtMs.reset();
    auto written = context_.store->updateTunnel(tunnel.record, tunnel.revision);
    if (!written) {
      if (written.error().kind == ErrorKind::kConflict) continue;
      return grpcStatus(written.error());
    }
    context_.publisher->publishDeleted(id);
    adminServiceLogger().info("tunnel deleted by an operator", {{"tunnel", id}});
    return grpc::Status::OK;
  }
  return {grpc::StatusCode::ABORTED, "tunnel " + id + " kept changing; try again"};
}

grpc::Status AdminService::ResetTunnel(grpc::ServerContext*, const av1::ResetTunnelRequest* request,
                                       av1::ResetTunnelResponse* response) {
  const std::string& id = request->tunnel_id();
  if (!isValidTunnelId(id)) return badTunnelId(id);
  auto loaded = context_.store->getTunnel(id);
  if (!loaded) return grpcStatus(loaded.error());
  if (!loaded->has_value()) return noSuchTunnel(id);
  // This machine's relayd closes the tunnel's bridges (close 4000: the clients redial at once)
  // and drops its cached record; every linked peer gets tunnel_reset and does the same, unless
  // here_only (docs/pools-reset.md).
  TunnelResetter resetter(*context_.registry, *context_.hub, context_.mesh, context_.machineId);
  const TunnelResetOutcome outcome = resetter.reset(id, request->here_only());
  response->set_bridges_closed(outcome.bridgesHere);
  response->set_peers_notified(outcome.peersTold);
  for (const MachineResetOutcome& machine : outcome.machines) {
    av1::MachineReset* out = response->add_machines();
    out->set_machine_id(machine.machine);
    out->set_here(machine.here);
    out->set_told(machine.told);
    out->set_bridges(machine.bridges);
  }
  adminServiceLogger().info(
      "tunnel reset by an operator",
      {{"tunnel", id}, {"bridges", outcome.bridgesHere}, {"peers", outcome.peersTold}});
  return grpc::Status::OK;
}

grpc::Status AdminService::DrainTunnel(grpc::ServerContext*, const av1::DrainTunnelRequest* request,
                                       av1::DrainTunnelResponse* response) {
  const std::string& id = request->tunnel_id();
  if (!isValidTunnelId(id)) return badTunnelId(id);
  const size_t bridges = context_.registry->bridgeCount(id);
  opentunnel::control::v1::Command command;
  command.mutable_drain_tunnel()->set_tunnel_id(id);
  context_.hub->sendCommand("", std::move(command));
  response->set_bridges_drained(static_cast<uint32_t>(bridges));
  response->set_peers_notified(0);
  return grpc::Status::OK;
}

grpc::Status AdminService::DrainRelay(grpc::ServerContext*, const av1::DrainRelayRequest* request,
                                      av1::DrainRelayResponse* response) {
  opentunnel::control::v1::Command command;
  command.mutable_drain_relay()->set_undo(request->undo());
  const RelayHub::CommandSent sent = context_.hub->sendCommand("", std::move(command));
  response->set_relays(static_cast<uint32_t>(sent.relays));
  // Draining, relayd tells controld itself (its Draining message: the mesh node leaves); serving
  // again it sends nothing, so the node rejoins here.
  if (request->undo()) {
    if (mesh::MeshNode* node = meshNode()) node->setLeaving(false);
  }
  adminServiceLogger().info(request->undo() ? "relayd told to serve again by an operator"
                                            : "relayd told to drain by an operator",
                            {{"relays", sent.relays}});
  return grpc::Status::OK;
}

grpc::Status AdminService::ListJobs(grpc::ServerContext*, const av1::ListJobsRequest* request,
                                    av1::ListJobsResponse* response) {
  if (!validJobPageToken(request->page_token())) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "not a page token of ListJobs"};
  }
  if (context_.pages == nullptr) return {grpc::StatusCode::UNIMPLEMENTED, "no pages in this store"};
  JobPageQuery query;
  query.afterId = request->page_token();
  if (!request->status().empty()) {
    query.status = parseJobStatus(request->status());
    if (!query.status) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "no job status \"" + request->status() + "\" (pending, done, failed, abandoned)"};
    }
  }
  const int size = adminPageSize(request->page_size());
  query.limit = size + 1;  // one more: is there a next page?
  auto page = context_.pages->jobPage(query);
  if (!page) return grpcStatus(page.error());
  const bool more = static_cast<int>(page->size()) > size;
  if (more) page->pop_back();
  for (const Job& job : *page) *response->add_jobs() = jobSummary(job);
  if (more) response->set_next_page_token(page->back().id);
  return grpc::Status::OK;
}

grpc::Status AdminService::RetryJob(grpc::ServerContext*, const av1::RetryJobRequest* request,
                                    av1::RetryJobResponse*) {
  const std::string& id = request->job_id();
  if (id.empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "a job ID is required"};
  auto loaded = context_.store->getJob(id);
  if (!loaded) return grpcStatus(loaded.error());
  if (!loaded->has_value()) return {grpc::StatusCode::NOT_FOUND, "no job " + id};
  const Job& job = **loaded;
  if (job.status != JobStatus::kFailed) {
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "job " + id + " is " + jobStatusName(job.status) + ", not failed"};
  }
  // Compare-and-set on the failure read: a machine's reconcile requeueing it first wins.
  auto requeued = context_.store->requeueFailedJob(id, job.lastError, job.lastError, now());
  if (!requeued) return grpcStatus(requeued.error());
  if (!*requeued) return {grpc::StatusCode::ABORTED, "job " + id + " changed meanwhile"};
  if (context_.jobs != nullptr) context_.jobs->jobAdded();
  adminServiceLogger().info("job retried by an operator", {{"job", id}});
  return grpc::Status::OK;
}

grpc::Status AdminService::ExpiringCertificates(grpc::ServerContext*,
                                                const av1::ExpiringCertificatesRequest* request,
                                                av1::ExpiringCertificatesResponse* response) {
  if (!validTunnelPageToken(request->page_token())) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "not a page token of ExpiringCertificates"};
  }
  if (request->within_ms() < 0) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "within_ms must not be negative"};
  }
  const int64_t within = request->within_ms() == 0 ? kDefaultWithinMs : request->within_ms();
  const int64_t before = now() + within;
  TunnelPageQuery query;
  query.afterId = request->page_token();
  std::string next;
  const Status scanned = scan(
      std::move(query), kScanPage,
      [before](const StoredTunnel& tunnel, uint32_t) {
        const int64_t notAfter = tunnel.record.certificate.notAfterMs;
        return notAfter > 0 && notAfter <= before;
      },
      *response->mutable_tunnels(), next);
  if (!scanned) return grpcStatus(scanned.error());
  response->set_next_page_token(next);
  return grpc::Status::OK;
}

grpc::Status AdminService::MeshView(grpc::ServerContext*, const av1::MeshViewRequest*,
                                    av1::MeshViewResponse* response) {
  std::optional<mesh::ClusterView> view;
  if (mesh::MeshNode* node = meshNode()) view = node->clusterView();
  if (view) {
    *response = meshViewResponse(context_.machineId, *view);
    return grpc::Status::OK;
  }
  // No mesh (INTERNAL_LISTEN unset): this machine alone, complete.
  response->set_machine_id(context_.machineId);
  response->set_complete(true);
  av1::MeshMachine* self = response->add_machines();
  self->set_machine_id(context_.machineId);
  self->set_self(true);
  const BridgeTotals totals = context_.registry->totals();
  self->set_bridges(static_cast<uint32_t>(totals.bridges));
  self->set_tunnels(static_cast<uint32_t>(totals.tunnels));
  return grpc::Status::OK;
}

}  // namespace ot::controld
