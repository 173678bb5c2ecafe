#include "controld/admin/admin_convert.h"

#include <algorithm>
#include <set>

#include "controld/relays/record_convert.h"

namespace ot::controld {
namespace {

constexpr size_t kMaxTokenLength = 191;

template <typename T>
uint32_t clampU32(T value) {
  return static_cast<uint32_t>(std::min<uint64_t>(static_cast<uint64_t>(value), UINT32_MAX));
}

av1::PeerState peerState(mesh::PeerState state) {
  switch (state) {
    case mesh::PeerState::kUp:
      return av1::PEER_STATE_UP;
    case mesh::PeerState::kConnecting:
      return av1::PEER_STATE_CONNECTING;
    case mesh::PeerState::kUnreachable:
      return av1::PEER_STATE_UNREACHABLE;
  }
  return av1::PEER_STATE_UNSPECIFIED;
}

}  // namespace

int adminPageSize(uint32_t requested) {
  if (requested == 0) return 100;
  return static_cast<int>(std::min<uint32_t>(requested, 500));
}

bool validTunnelPageToken(const std::string& token) {
  return token.empty() || isValidTunnelId(token);
}

bool validJobPageToken(const std::string& token) {
  if (token.size() > kMaxTokenLength) return false;
  return std::all_of(token.begin(), token.end(), [](char c) { return c > ' ' && c < 0x7f; });
}

av1::TunnelSummary tunnelSummary(const StoredTunnel& tunnel, uint32_t bridges) {
  const TunnelRecord& record = tunnel.record;
  av1::TunnelSummary out;
  out.set_tunnel_id(record.id);
  out.set_hostname(record.hostname);
  out.set_revision(static_cast<uint64_t>(tunnel.revision));
  out.set_certificate_state(toProtoState(record.certificate.state));
  out.set_deleted(record.deleted());
  out.set_created_at_unix_ms(record.createdAtMs);
  out.set_last_connected_at_unix_ms(record.lastConnectedAtMs.value_or(0));
  out.set_bridges(bridges);
  out.set_certificate_not_after_unix_ms(record.certificate.notAfterMs);
  return out;
}

av1::JobSummary jobSummary(const Job& job) {
  av1::JobSummary out;
  out.set_job_id(job.id);
  out.set_kind(jobKindName(job.kind));
  out.set_tunnel_id(job.tunnelId);
  out.set_status(jobStatusName(job.status));
  out.set_attempts(clampU32(std::max(job.attempts, 0)));
  out.set_queued_at_unix_ms(job.queuedAtMs);
  out.set_next_run_at_unix_ms(job.nextRunAtMs);
  out.set_lease_owner(job.leaseOwner);
  out.set_lease_until_unix_ms(job.leaseUntilMs);
  out.set_last_error(job.lastError);
  return out;
}

av1::BridgeLocation localBridgeLocation(const std::string& machineId, const BridgeEntry& bridge) {
  av1::BridgeLocation out;
  out.set_machine_id(machineId);
  auto* b = out.mutable_bridge();
  b->set_bridge_id(bridge.bridgeId);
  b->set_tunnel_id(bridge.tunnelId);
  for (const std::string& route : bridge.routes) b->add_routes(route);
  b->set_origin(bridge.origin);
  b->set_profile(bridge.profile);
  b->set_max_conns(bridge.maxConns);
  b->set_attached_at_unix_ms(bridge.attachedAtMs);
  b->set_peer_address(bridge.peerAddress);
  return out;
}

av1::BridgeLocation peerBridgeLocation(const mesh::BridgeEntry& bridge) {
  // The mesh table carries what routing needs: no origin, profile or client address.
  av1::BridgeLocation out;
  out.set_machine_id(bridge.machine);
  auto* b = out.mutable_bridge();
  b->set_bridge_id(bridge.bridgeId);
  b->set_tunnel_id(bridge.tunnelId);
  for (const std::string& route : bridge.routes) b->add_routes(route);
  b->set_attached_at_unix_ms(bridge.attachedAtMs);
  return out;
}

av1::StatsResponse statsResponse(const AdminStatsInputs& inputs, int64_t nowMs) {
  const RecordCounts& records = inputs.records;
  av1::StatsResponse out;
  out.set_tunnels(static_cast<uint64_t>(records.tunnels));
  out.set_deleted_tunnels(static_cast<uint64_t>(records.deleted));
  out.set_issuing_tunnels(static_cast<uint64_t>(records.issuing));
  out.set_alarms_due(static_cast<uint64_t>(records.alarms));
  out.set_jobs_pending(static_cast<uint64_t>(records.jobsPending));
  out.set_jobs_failed(static_cast<uint64_t>(records.jobsFailed));
  out.set_bridges(inputs.bridges.bridges);
  uint64_t cluster = inputs.bridges.bridges;
  if (inputs.cluster) {
    cluster = 0;
    for (const mesh::ClusterMachine& machine : inputs.cluster->machines) {
      cluster += machine.summary.bridges;
    }
  }
  out.set_cluster_bridges(cluster);
  av1::MachineStats* machine = out.mutable_machine();
  machine->set_machine_id(inputs.machineId);
  machine->set_region(inputs.region);
  if (inputs.relayd) {
    const RelayFigures& figures = *inputs.relayd;
    out.set_visitor_connections(figures.visitorConnectionsOpen);
    auto count = [&figures](const char* outcome) {
      auto it = figures.visitors.find(outcome);
      return it == figures.visitors.end() ? uint64_t{0} : it->second;
    };
    machine->set_forwarded_out(count("forwarded_out"));
    machine->set_forwarded_in(count("forwarded_in"));
    uint64_t failures = 0;
    for (const auto& [reason, n] : figures.forwardFailures) failures += n;
    machine->set_forward_failures(failures);
  }
  if (inputs.openFds) machine->set_open_fds(static_cast<uint64_t>(*inputs.openFds));
  machine->set_started_at_unix_ms(nowMs - static_cast<int64_t>(inputs.uptimeSeconds * 1000));
  out.set_json(adminStatsJson(inputs).dump(-1, ' ', false,
                                           nlohmann::ordered_json::error_handler_t::replace));
  return out;
}

av1::MeshViewResponse meshViewResponse(const std::string& machineId,
                                       const mesh::ClusterView& view) {
  av1::MeshViewResponse out;
  out.set_machine_id(machineId);
  out.set_complete(view.complete);
  for (const mesh::ClusterMachine& machine : view.machines) {
    av1::MeshMachine* m = out.add_machines();
    const mesh::MachineSummary& summary = machine.summary;
    m->set_machine_id(summary.life.machineId);
    m->set_region(summary.life.region);
    m->set_self(machine.self);
    m->set_forward_address(summary.life.internalAddress);
    m->set_epoch(summary.life.epoch);
    m->set_started_at_unix_ms(summary.life.startedAtMs);
    m->set_sequence(summary.sequence);
    m->set_draining(summary.life.draining);
    m->set_bridges(clampU32(summary.bridges));
    m->set_tunnels(clampU32(summary.tunnels));
    m->set_routes(clampU32(summary.routes));
  }
  for (const mesh::PeerLink& peer : view.peers) {
    av1::MeshPeer* p = out.add_peers();
    p->set_address(peer.address);
    p->set_state(peerState(peer.state));
    p->set_machine_id(peer.machineId);
  }
  return out;
}

grpc::Status grpcStatus(const Error& error) {
  switch (error.kind) {
    case ErrorKind::kUnavailable:
      return {grpc::StatusCode::UNAVAILABLE, error.message};
    case ErrorKind::kTimeout:
      return {grpc::StatusCode::DEADLINE_EXCEEDED, error.message};
    case ErrorKind::kConflict:
      return {grpc::StatusCode::ABORTED, error.message};
    case ErrorKind::kNotFound:
      return {grpc::StatusCode::NOT_FOUND, error.message};
    case ErrorKind::kInvalid:
      return {grpc::StatusCode::INVALID_ARGUMENT, error.message};
    case ErrorKind::kInternal:
      break;
  }
  return {grpc::StatusCode::INTERNAL, error.message};
}

}  // namespace ot::controld
