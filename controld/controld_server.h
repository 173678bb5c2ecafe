// controld's process: every part of the control plane, built, started and stopped in one place.
// main() blocks the shutdown signals, sets up logging and calls run() on the main thread, which
// waits for SIGTERM/SIGINT between start-up and shutdown.
//
// Start-up (run()) builds the members below in the order they are declared, each step able to
// end it with an exit code, so a controld that cannot serve exits before it listens anywhere:
//  1. configuration checked (2 when it is not usable): trusted proxy ranges, ISSUER=acme, the
//     mesh settings (mesh_settings.h), WEBSITE_DIR read into memory (site_loader.h);
//  2. storage: DATABASE_URL parsed and opened (2 when either fails), then migrated, waiting for
//     the database up to STARTUP_DB_TIMEOUT_MS (database_wait.h; 1 when it never comes, 0 when a
//     signal ends the wait);
//  3. the issuer (the local CA, 1 when it cannot load; or ACME), the job runner, the API's
//     service and routes, the domain certificate, the relays' side (hub, control service, usage);
//  4. listening: the mesh node with INTERNAL_LISTEN (MESH_HANDOFF_SOCKET, its loop thread, the
//     registry's observer), gRPC on CONTROL_SOCKET, the API on API_SOCKET (and HTTP_LISTEN with
//     HTTP_MODE=serve), metrics on METRICS_LISTEN (1 when one cannot listen);
//  5. background threads started (the descriptor watch, usage, job gauges, domain certificate, job
//  runner, DNS sweep),
//     gRPC health SERVING, and the "serving" log line.
// Shutdown (stop()) first closes the front doors so no new work arrives (gRPC health
// NOT_SERVING, the API drained and stopped), then ends the background threads while the store
// and the relays are still there, then the servers and pools; the members are then destroyed in
// the reverse of their declaration order.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/analytics/analytics_sender.h"
#include "common/descriptor_watch.h"
#include "common/metrics.h"
#include "controld/acme/acme_issuer.h"
#include "controld/acme/acme_metrics.h"
#include "controld/acme/dns_record_metrics.h"
#include "controld/acme/dns_sweeper.h"
#include "controld/admin/admin_server.h"
#include "controld/admin/admin_service.h"
#include "controld/admin/admin_stats_source.h"
#include "controld/admin/backup.h"
#include "controld/admin/tunnel_reset.h"
#include "controld/api/api_router.h"
#include "controld/api/api_types.h"
#include "controld/api/ip_ranges.h"
#include "controld/api/status_source.h"
#include "controld/api/tunnel_service.h"
#include "controld/controld_config.h"
#include "controld/domain_cert/server_certificates.h"
#include "controld/http/http_server.h"
#include "controld/http/worker_pool.h"
#include "controld/issuance/ca_cooldown_gate.h"
#include "controld/issuance/job_gauges.h"
#include "controld/issuance/job_runner.h"
#include "controld/issuance/local_ca.h"
#include "controld/mesh/mesh_events.h"
#include "controld/mesh/mesh_node.h"
#include "controld/mesh/mesh_settings.h"
#include "controld/relays/attach_bookkeeper.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/control_service.h"
#include "controld/relays/grpc_server.h"
#include "controld/relays/relay_hub.h"
#include "controld/relays/usage_recorder.h"
#include "controld/shutdown_signals.h"
#include "controld/store/rate_limit_sweeper.h"
#include "controld/store/store.h"
#include "controld/website/site_table.h"

namespace ot::controld {

class ControldServer {
 public:
  // config.machine_id must be set (main() draws one when the flag is empty).
  ControldServer(ControldConfig config, ShutdownSignals signals);
  ~ControldServer();
  ControldServer(const ControldServer&) = delete;
  ControldServer& operator=(const ControldServer&) = delete;

  // Serves until SIGTERM/SIGINT; returns the exit status (0, or 1/2 when start-up fails).
  [[nodiscard]] int run();

 private:
  // The steps of start-up, in order; each returns an exit code to end start-up with, or nullopt.
  [[nodiscard]] std::optional<int> checkConfiguration();
  [[nodiscard]] std::optional<int> openStore();
  [[nodiscard]] std::optional<int> waitForDatabase();
  [[nodiscard]] std::optional<int> loadIssuer();
  void buildIssuance();
  void buildApi();
  void buildRelaySide();
  [[nodiscard]] std::optional<int> listen();
  void startBackground();
  void stop();

  // Which issuer signs: ACME when configured, else the local CA.
  [[nodiscard]] Issuer& issuer();
  // Where the parts hand their analytics events; empty (nothing built) when analytics are off.
  [[nodiscard]] analytics::EventSink analyticsSink();

  const ControldConfig config_;
  const ShutdownSignals signals_;
  metrics::Metrics metrics_;
  // Warns when descriptor use crosses 50 % / 80 % of the limit (started with the background).
  metrics::DescriptorWatch descriptors_{log::Logger("controld")};

  // 1. configuration
  IpRanges trustedProxies_;
  std::shared_ptr<const SiteTable> site_;           // WEBSITE_DIR, read at startup; null without it
  std::optional<mesh::MeshSettings> meshSettings_;  // INTERNAL_LISTEN set
  std::unique_ptr<DnsRecordMetrics> dnsMetrics_;    // counts only with ACME, exported always
  std::unique_ptr<AcmeIssuer> acme_;                // ACME only
  // Events to ANALYTICS_URL (docs/analytics.md): built first, stopped last, so every part that
  // emits (the API, the jobs, the hub) is gone or stopped before it.
  std::unique_ptr<analytics::Analytics> analytics_;

  // 2. storage: every query timed and counted (store_metrics.h)
  std::unique_ptr<Store> store_;

  // 3. issuance, the API, the domain certificate, the relays' side
  std::unique_ptr<LocalCa> localCa_;  // without ACME
  std::optional<AcmeMetrics> acmeMetrics_;
  std::unique_ptr<CaCooldownGate> cooldown_;  // ACME only: the local CA cannot be overloaded
  std::optional<BridgeRegistry> registry_;
  std::optional<RelayHub> hub_;
  std::optional<mesh::MeshEventPublisher> meshEvents_;  // the hub, and the mesh's events
  std::optional<JobRunner> runner_;
  std::unique_ptr<DnsSweeper> sweeper_;  // ACME only
  std::optional<TunnelService> service_;
  std::optional<AdminStatsSource> adminStats_;      // POST /api/admin/stats (ADMIN_TOKEN set)
  std::optional<TunnelStatusSource> statusSource_;  // GET /api/tunnel/{id}/status
  std::unique_ptr<Backup> backup_;  // POST /api/admin/{export,import}; null without a BackupStore
  std::shared_ptr<const ApiRouter> router_;
  ApiHandler apiHandler_;  // moved into api_ when it is built
  // Wraps a handler in the API's guards (trusted proxies, failed authentications; one state).
  std::function<ApiHandler(ApiHandler)> apiGuard_;
  std::optional<ServerCertificates> certificates_;
  std::optional<JobGauges> jobGauges_;
  std::optional<RateLimitSweeper> rateSweeper_;  // expired rate_limits rows, one machine at a time
  std::optional<UsageRecorder> usage_;
  std::optional<AttachBookkeeper> attaches_;
  std::optional<ControlService> control_;

  // 4. listening
  std::optional<GrpcServer> grpc_;
  std::optional<WorkerPool> pool_;
  std::optional<HttpServer> api_;
  std::optional<WorkerPool> metricsPool_;
  std::optional<HttpServer> metricsServer_;
  // The region mesh's node (INTERNAL_LISTEN only): its own loop thread, observing registry_.
  std::unique_ptr<mesh::MeshNode> mesh_;
  std::unique_ptr<mesh::PeerEventApplier> peerEvents_;  // with the mesh node
  // Tunnel resets (API, peers' tunnel_reset events); asks for mesh_ per call.
  std::optional<TunnelResetter> resetter_;
  // The Admin gRPC service on ADMIN_SOCKET (and ADMIN_LISTEN), for otctl (docs/admin.md).
  std::optional<AdminService> adminService_;
  std::optional<AdminServer> adminServer_;
};

}  // namespace ot::controld
