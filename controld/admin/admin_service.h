// controld's Admin gRPC service (proto/opentunnel/admin/v1/admin.proto, docs/admin.md): what otctl
// asks and does. Reads page by page from storage (keyset by ID, never a whole table), the live
// bridges from this machine's registry and the mesh table, and acts through the relay hub
// (commands to relayd) and the record publisher (deletions reach the relays and the peers).
//
// Served by AdminServer on gRPC's synchronous threads: every call may block on storage or on the
// mesh loop, never on an I/O loop. Thread-safe; everything it refers to must outlive it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "controld/admin/admin_convert.h"
#include "controld/admin/admin_stats.h"
#include "controld/admin/backup.h"
#include "controld/admin/tunnel_reset.h"
#include "controld/api/status_routes.h"
#include "controld/mesh/mesh_node.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/record_publisher.h"
#include "controld/relays/relay_hub.h"
#include "controld/store/admin_store.h"
#include "controld/store/store.h"
#include "opentunnel/admin/v1/admin.grpc.pb.h"

namespace ot::controld {

struct AdminServiceContext {
  Store* store = nullptr;
  AdminStore* pages = nullptr;  // the same store's keyset pages
  BridgeRegistry* registry = nullptr;
  RelayHub* hub = nullptr;
  // Deletions: this machine's relays and, with the mesh, every peer (MeshEventPublisher).
  RecordPublisher* publisher = nullptr;
  // Told when a job is retried, so a runner takes it now (may be null).
  JobNotifier* jobs = nullptr;
  // Export/Import; null: they answer UNIMPLEMENTED.
  Backup* backup = nullptr;
  // The admin stats' inputs, gathered as POST /api/admin/stats gathers them (AdminStatsSource).
  std::function<Result<AdminStatsInputs>()> gatherStats;
  // The mesh node when the mesh runs, else nullptr; asked per call.
  std::function<mesh::MeshNode*()> mesh;
  // GET /api/tunnel/{id}/status's inputs (TunnelStatusSource::gather); empty: relay unreachable.
  std::function<TunnelStatusInputs(const std::string& tunnelId)> tunnelStatus;
  std::string machineId;
  Clock nowMs;  // empty: the system clock
};

class AdminService final : public ::opentunnel::admin::v1::Admin::Service {
 public:
  explicit AdminService(AdminServiceContext context);

  grpc::Status Stats(grpc::ServerContext* context, const av1::StatsRequest* request,
                     av1::StatsResponse* response) override;
  grpc::Status ListTunnels(grpc::ServerContext* context, const av1::ListTunnelsRequest* request,
                           av1::ListTunnelsResponse* response) override;
  grpc::Status GetTunnel(grpc::ServerContext* context, const av1::GetTunnelRequest* request,
                         av1::GetTunnelResponse* response) override;
  // admin_status.cc
  grpc::Status TunnelStatus(grpc::ServerContext* context, const av1::TunnelStatusRequest* request,
                            av1::TunnelStatusResponse* response) override;
  grpc::Status DeleteTunnel(grpc::ServerContext* context, const av1::DeleteTunnelRequest* request,
                            av1::DeleteTunnelResponse* response) override;
  grpc::Status ResetTunnel(grpc::ServerContext* context, const av1::ResetTunnelRequest* request,
                           av1::ResetTunnelResponse* response) override;
  grpc::Status DrainTunnel(grpc::ServerContext* context, const av1::DrainTunnelRequest* request,
                           av1::DrainTunnelResponse* response) override;
  grpc::Status DrainRelay(grpc::ServerContext* context, const av1::DrainRelayRequest* request,
                          av1::DrainRelayResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const av1::ListJobsRequest* request,
                        av1::ListJobsResponse* response) override;
  grpc::Status RetryJob(grpc::ServerContext* context, const av1::RetryJobRequest* request,
                        av1::RetryJobResponse* response) override;
  grpc::Status ExpiringCertificates(grpc::ServerContext* context,
                                    const av1::ExpiringCertificatesRequest* request,
                                    av1::ExpiringCertificatesResponse* response) override;
  grpc::Status MeshView(grpc::ServerContext* context, const av1::MeshViewRequest* request,
                        av1::MeshViewResponse* response) override;
  // admin_service_usage.cc
  grpc::Status TunnelUsage(grpc::ServerContext* context, const av1::TunnelUsageRequest* request,
                           av1::TunnelUsageResponse* response) override;
  // admin_service_backup.cc
  grpc::Status Export(grpc::ServerContext* context, const av1::ExportRequest* request,
                      grpc::ServerWriter<av1::ExportChunk>* writer) override;
  grpc::Status Import(grpc::ServerContext* context, grpc::ServerReader<av1::ImportChunk>* reader,
                      av1::ImportResponse* response) override;

 private:
  [[nodiscard]] int64_t now() const;
  [[nodiscard]] mesh::MeshNode* meshNode() const;
  // Live bridges per tunnel of `ids`, this machine's and the mesh table's.
  [[nodiscard]] std::map<std::string, uint32_t> bridgeCounts(const std::vector<std::string>& ids);
  // Reads storage pages from `query` on, keeping the tunnels `keep` accepts, until `want` are kept
  // or kMaxScanned rows were read (an empty `keep` keeps every one); `next` is where the
  // following call goes on ("" at the end).
  using Keep = std::function<bool(const StoredTunnel& tunnel, uint32_t bridges)>;
  Status scan(TunnelPageQuery query, int want, const Keep& keep,
              google::protobuf::RepeatedPtrField<av1::TunnelSummary>& out, std::string& next);

  AdminServiceContext context_;
};

}  // namespace ot::controld
