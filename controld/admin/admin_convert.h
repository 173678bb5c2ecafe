// The Admin service's conversions: stored tunnels and jobs as the service's messages, page tokens,
// the stats and mesh view as messages, and storage errors as gRPC statuses. Pure: no I/O, so the
// service's answers are tested without a server.
#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "controld/admin/admin_stats.h"
#include "controld/mesh/cluster_view.h"
#include "controld/mesh/mesh_types.h"
#include "controld/relays/bridge_registry.h"
#include "controld/store/store.h"
#include "opentunnel/admin/v1/admin.pb.h"

namespace ot::controld {

namespace av1 = ::opentunnel::admin::v1;

// Page sizes: 0 means 100, more than 500 means 500.
[[nodiscard]] int adminPageSize(uint32_t requested);

// A page token is the last ID of the previous page; it must look like one (a DNS label for
// tunnels, any printable text without spaces for jobs, at most 191 characters).
[[nodiscard]] bool validTunnelPageToken(const std::string& token);
[[nodiscard]] bool validJobPageToken(const std::string& token);

// `bridges`: the tunnel's live bridges across the mesh (this machine's and the table's).
[[nodiscard]] av1::TunnelSummary tunnelSummary(const StoredTunnel& tunnel, uint32_t bridges);
[[nodiscard]] av1::JobSummary jobSummary(const Job& job);
[[nodiscard]] av1::BridgeLocation localBridgeLocation(const std::string& machineId,
                                                      const BridgeEntry& bridge);
[[nodiscard]] av1::BridgeLocation peerBridgeLocation(const mesh::BridgeEntry& bridge);

// The stats message, the `json` field holding adminStatsJson(inputs) exactly. The machine's relay
// session fields (relay_connected, relay_epoch) and version are the caller's to add.
[[nodiscard]] av1::StatsResponse statsResponse(const AdminStatsInputs& inputs, int64_t nowMs);
[[nodiscard]] av1::MeshViewResponse meshViewResponse(const std::string& machineId,
                                                     const mesh::ClusterView& view);

// Storage's error kinds as gRPC codes (kNotFound -> NOT_FOUND, kUnavailable -> UNAVAILABLE, ...).
[[nodiscard]] grpc::Status grpcStatus(const Error& error);

}  // namespace ot::controld
