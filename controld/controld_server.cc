#include "controld/controld_server.h"

#include <chrono>
#include <filesystem>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "controld/acme/acme_setup.h"
#include "controld/api/api_routes.h"
#include "controld/api/api_source_guard.h"
#include "controld/base/private_files.h"
#include "controld/relays/mesh_table_proto.h"
#include "controld/server_metrics.h"
#include "controld/store/database_url.h"
#include "controld/store/database_wait.h"
#include "controld/store/origin_secret.h"
#include "controld/website/site_http.h"
#include "controld/website/site_loader.h"

namespace ot::controld {

namespace {

// The sockets' directory, when missing: owner and group may reach the sockets in it (relayd
// runs as controld's user or in its group), nobody else.
bool makeSocketDirectory(const std::string& socketPath) {
  const auto parent = std::filesystem::path(socketPath).parent_path();
  const Status made = makeDirectories(parent, kSocketDirectoryMode);
  if (!made.ok()) log::error("cannot make the socket directory", {{"error", made.error().message}});
  return made.ok();
}

}  // namespace

ControldServer::ControldServer(ControldConfig config, ShutdownSignals signals)
    : config_(std::move(config)), signals_(signals) {}

// Members go in the reverse of their declaration order (the servers and pools first, the store
// last); stop() has already ended every thread when run() got that far.
ControldServer::~ControldServer() = default;

int ControldServer::run() {
  if (auto code = checkConfiguration()) return *code;
  if (auto code = openStore()) return *code;
  if (auto code = waitForDatabase()) return *code;
  if (auto code = loadIssuer()) return *code;
  // Origins' derived credentials (docs/pools-origins.md) need the secret shared through the
  // database before the first attach or API call.
  if (auto secret = loadOriginSecret(*store_); secret.ok()) {
    installOriginSecret(*secret);
  } else {
    log::error("cannot load the origin secret", {{"error", secret.error().message}});
    return 1;
  }
  buildIssuance();
  buildApi();
  buildRelaySide();
  if (auto code = listen()) return *code;
  startBackground();
  log::info(
      "serving",
      {{"api_socket", config_.apiSocket},
       {"control_socket", config_.controlSocket},
       {"mesh", meshSettings_ ? meshSettings_->internalAddress.toString() : std::string("off")},
       {"http", config_.httpMode == "serve" ? config_.httpListen.toString() : std::string("off")}});

  while (!signals_.wait(60'000)) {
  }
  log::info("shutting down");
  stop();
  log::info("stopped");
  log::flush();
  return 0;
}

namespace {

AdminServerOptions adminServerOptions(const ControldConfig& config) {
  AdminServerOptions options;
  options.socketPath =
      config.adminSocket.empty() ? defaultAdminSocket(config.controlSocket) : config.adminSocket;
  options.tcp = config.adminListen;
  options.tlsCertFile = config.adminTlsCert;
  options.tlsKeyFile = config.adminTlsKey;
  options.token = config.adminToken;
  return options;
}

}  // namespace

// Checked before the database, so a bad configuration fails at once.
std::optional<int> ControldServer::checkConfiguration() {
  if (const Status admin = checkAdminServerOptions(adminServerOptions(config_)); !admin.ok()) {
    log::error("the Admin service settings are not usable", {{"error", admin.error().message}});
    return 2;
  }
  auto trustedProxies = parseTrustedProxyRanges(config_.trustedProxyRanges);
  if (!trustedProxies) {
    log::error("TRUSTED_PROXY_RANGES is not usable", {{"error", trustedProxies.error().message}});
    return 2;
  }
  trustedProxies_ = std::move(trustedProxies).value();
  auto mesh = mesh::checkMeshFlags(config_.mesh, config_.identity.machineId,
                                   config_.identity.region, config_.controlSocket);
  if (!mesh.ok()) {
    log::error("the mesh settings are not usable", {{"error", mesh.error().message}});
    return 2;
  }
  meshSettings_ = std::move(mesh).value();
  if (!config_.websiteDir.empty()) {
    auto site = loadSite(config_.websiteDir);
    if (!site) {
      log::error("WEBSITE_DIR is not usable", {{"error", site.error().message}});
      return 2;
    }
    log::info(
        "website loaded",
        {{"directory", config_.websiteDir}, {"files", site->files()}, {"bytes", site->bytes()}});
    site_ = std::make_shared<const SiteTable>(std::move(site).value());
  }
  analytics_ = std::make_unique<analytics::Analytics>(
      config_.analytics,
      analytics::Origin{config_.identity.machineId, config_.identity.region, "controld"},
      &metrics_);
  // Registered with the local CA too, so every controld exports the same names (as zeros).
  dnsMetrics_ = std::make_unique<DnsRecordMetrics>(metrics_);
  if (config_.issuer == "acme") {
    acme_ = makeAcmeIssuer(config_, dnsMetrics_.get());
    if (!acme_) return 2;
  }
  return std::nullopt;
}

std::optional<int> ControldServer::openStore() {
  auto url = parseDatabaseUrl(config_.databaseUrl, config_.sqlitePath);
  if (!url.ok()) {
    log::error("DATABASE_URL is not usable", {{"error", url.error().message}});
    return 2;
  }
  // The SQLite file's directory, when missing, is controld's alone (the file holds private keys).
  if (url->backend == DatabaseBackend::kSqlite) {
    const auto directory = std::filesystem::path(url->sqlitePath).parent_path();
    if (const Status made = makeDirectories(directory, kStateDirectoryMode); !made.ok()) {
      log::error("cannot make the database directory", {{"error", made.error().message}});
      return 2;
    }
  }
  StoreOptions options;
  options.url = config_.databaseUrl;
  options.sqlitePath = config_.sqlitePath;
  options.poolSize = config_.databasePoolSize;
  // With metrics_, so every query is timed and counted.
  auto opened = ot::controld::openStore(options, &metrics_);
  if (!opened.ok()) {
    log::error("cannot open the database", {{"error", opened.error().message}});
    return 2;
  }
  store_ = std::move(opened).value();
  log::info("starting", {{"database", redactedDatabaseUrl(*url)}, {"domain", config_.domain}});
  return std::nullopt;
}

// Waits for the database (store/database_wait.h): 0 when a signal ended the wait, 1 when the
// database never became usable.
std::optional<int> ControldServer::waitForDatabase() {
  DatabaseWaitOptions options;
  options.timeoutMs = static_cast<int64_t>(config_.startupDbTimeoutMs);
  DatabaseWaitHooks hooks;
  hooks.attempt = [this] { return store_->migrate(); };
  hooks.nowMs = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  hooks.sleepOrStop = [this](int64_t ms) { return signals_.wait(ms); };
  switch (ot::controld::waitForDatabase(options, hooks)) {
    case DatabaseWaitOutcome::kReady:
      return std::nullopt;
    case DatabaseWaitOutcome::kStopped:
      return 0;
    case DatabaseWaitOutcome::kUnusable:
    case DatabaseWaitOutcome::kTimedOut:
      break;
  }
  return 1;
}

std::optional<int> ControldServer::loadIssuer() {
  if (acme_) return std::nullopt;
  auto ca = LocalCa::load(*store_, config_.localCertValidityMs);
  if (!ca.ok()) {
    log::error("cannot load the local CA", {{"error", ca.error().message}});
    return 1;
  }
  localCa_ = std::move(ca).value();
  if (!config_.localCaFile.empty()) {
    if (auto written = localCa_->writeCaFile(config_.localCaFile); !written.ok()) {
      log::error("cannot write LOCAL_CA_FILE", {{"error", written.error().message}});
      return 1;
    }
  }
  return std::nullopt;
}

analytics::EventSink ControldServer::analyticsSink() {
  if (!analytics_->enabled()) return {};
  return
      [analytics = analytics_.get()](analytics::Event event) { analytics->emit(std::move(event)); };
}

Issuer& ControldServer::issuer() {
  return acme_ ? static_cast<Issuer&>(*acme_) : static_cast<Issuer&>(*localCa_);
}

void ControldServer::buildIssuance() {
  acmeMetrics_.emplace(metrics_);
  // With ACME, the CA cool-down shared through meta (the local CA cannot be overloaded).
  if (acme_) {
    CaCooldownGateOptions cooldownOptions;
    acmeMetrics_->hookInto(cooldownOptions);
    cooldown_ = std::make_unique<CaCooldownGate>(*store_, std::move(cooldownOptions));
  }

  registry_.emplace();
  RelayHubOptions hubOptions;
  hubOptions.events = analyticsSink();
  hub_.emplace(*registry_, std::move(hubOptions));
  // Changes the API and the job runner make reach this machine's relays and, with the mesh, every
  // linked peer (docs/mesh.md "Events"). The node starts later (listen()); asked per change.
  meshEvents_.emplace(*hub_, [this] { return mesh_.get(); });
  JobRunnerConfig runnerConfig;
  runnerConfig.owner = config_.identity.machineId;
  runnerConfig.domain = config_.domain;
  runnerConfig.concurrency = config_.issuanceConcurrency;
  runnerConfig.retry.baseDelayMs = config_.issuanceRetryDelayMs;
  runnerConfig.leaseMs = config_.issuanceLeaseMs;
  runnerConfig.leaseExtendMs = config_.issuanceLeaseMs / 3;
  acmeMetrics_->hookInto(runnerConfig);
  runnerConfig.events = analyticsSink();
  runner_.emplace(runnerConfig, JobRunnerStores{*store_, *store_, *store_, *store_}, issuer(),
                  *meshEvents_);
  meshEvents_->setLocalNotifier(&*runner_);
  runner_->setCaCooldown(cooldown_.get());

  // Leftover challenge records: one machine at a time sweeps them (a lease in meta). The names
  // kept are those of every job running on any machine (leased in the store) besides the
  // sweep's minimum age (an hour).
  if (acme_) {
    DnsSweeperOptions sweep;
    sweep.domain = config_.domain;
    sweep.owner = config_.identity.machineId;
    sweep.activeNames = [this]() -> Result<std::set<std::string>> {
      return runner_->clusterRunningNames();
    };
    sweeper_ =
        std::make_unique<DnsSweeper>(*store_, acme_->dns(), std::move(sweep), dnsMetrics_.get());
  }
}

void ControldServer::buildApi() {
  TunnelServiceConfig serviceConfig;
  serviceConfig.domain = config_.domain;
  serviceConfig.createRatePerHour = config_.createRatePerHour;
  serviceConfig.createRateBurst = config_.createRateBurst;
  serviceConfig.issuanceRatePerDay = config_.issuanceRatePerDay;
  serviceConfig.issuanceRateBurst = config_.issuanceRateBurst;
  serviceConfig.issuanceBacklogLimit = config_.issuanceBacklogLimit;
  serviceConfig.onLimited = limitedCounter(metrics_);
  serviceConfig.events = analyticsSink();
  service_.emplace(serviceConfig, TunnelServiceStores{*store_, *store_, *store_, *store_},
                   *registry_, *meshEvents_, *meshEvents_, ot::unixNowMs);
  // The mesh node starts later (listen()), before the API serves; the source asks for it per call.
  adminStats_.emplace(*store_, *registry_, *hub_, config_.identity.machineId,
                      config_.identity.region, metrics_.startedAt(),
                      [this] { return mesh_.get(); });
  if (BackupStore* backupStore = store_->backupStore()) {
    backup_ = makeBackup(*backupStore, config_.domain);
  }
  AdminApi admin{config_.adminToken, [this] { return adminStats_->gather(); }, backup_.get()};
  resetter_.emplace(
      *registry_, *hub_, [this] { return mesh_.get(); }, config_.identity.machineId);
  ResetApi reset{[this](const std::string& id) { return resetter_->reset(id); }, {}, 1000};
  statusSource_.emplace(*hub_, *registry_, [this] { return mesh_.get(); });
  ApiRouter router = buildApiRouter(
      *service_, {}, admin, UsageApi{store_.get(), {}}, reset,
      StatusApi{[this](const std::string& id) { return statusSource_->gather(id); }});
  if (site_) {
    router.setFallback(
        [site = site_](const ApiRequest& request) { return siteResponse(*site, request); });
  }
  router_ = std::make_shared<const ApiRouter>(std::move(router));
  SourceFailureLimits authFailureLimits;
  authFailureLimits.maxFailures = config_.authFailureLimit;
  authFailureLimits.windowMs = config_.authFailureWindowMs;
  // The guard inside the proxy mapping: it counts a request under the address the create limit
  // uses (the visitor's, when a trusted proxy named it).
  // One guard state for the routes and the streamed admin routes, so their failures count together.
  apiGuard_ = [state = makeSourceGuardState(authFailureLimits, metrics_),
               proxies = trustedProxies_](ApiHandler inner) {
    return withTrustedProxies(withSourceGuard(std::move(inner), state), proxies);
  };
  apiHandler_ = apiGuard_(makeApiHandler(router_));
}

void ControldServer::buildRelaySide() {
  ServerCertificatesConfig certificatesConfig;
  certificatesConfig.domain = config_.domain;
  certificatesConfig.owner = config_.identity.machineId;
  certificatesConfig.certFile = config_.tlsCertFile;
  certificatesConfig.keyFile = config_.tlsKeyFile;
  certificates_.emplace(certificatesConfig, ServerCertificatesStores{*store_, *store_, *store_},
                        *hub_, &*runner_);
  runner_->setServerCertificateHandler(
      [this](const ServerCertificate& certificate) { certificates_->adopt(certificate); });

  jobGauges_.emplace(*store_, metrics_);
  RateLimitSweeperOptions rateSweep;
  rateSweep.owner = config_.identity.machineId;
  rateSweeper_.emplace(*store_, *store_, std::move(rateSweep), &metrics_);

  UsageRecorderOptions usageOptions;
  usageOptions.flushInterval = std::chrono::milliseconds(config_.usageFlushIntervalMs);
  usage_.emplace(*store_, usageOptions);
  hub_->setCountersHandler(
      [this](const std::string&, const opentunnel::control::v1::Counters& c) { usage_->add(c); });
  // lastConnectedAt and the renewal check, after each attach and off its path.
  attaches_.emplace(*store_, *store_, &*runner_);
  hub_->setAttachedHandler(
      [this](const BridgeEntry& bridge) { attaches_->noteAttached(bridge.tunnelId); });

  ControlServiceOptions controlOptions;
  // The mesh node starts later (listen()), before gRPC serves; asked per attach.
  controlOptions.routeConflict =
      [this](const std::string& tunnelId,
             const std::vector<std::string>& routes) -> std::optional<RouteHeldElsewhere> {
    if (!mesh_) return std::nullopt;
    auto conflict = mesh_->findRouteConflict(tunnelId, routes);
    if (!conflict) return std::nullopt;
    return RouteHeldElsewhere{conflict->machineId, conflict->route};
  };
  control_.emplace(*store_, *registry_, *hub_, controlOptions);
}

std::optional<int> ControldServer::listen() {
  if (!makeSocketDirectory(config_.controlSocket)) return 1;
  // Before gRPC: every bridge relayd reports reaches the node, which announces it to the peers.
  if (meshSettings_) {
    if (!makeSocketDirectory(meshSettings_->handoffSocket)) return 1;
    mesh_ = std::make_unique<mesh::MeshNode>(*meshSettings_, metrics_);
    // Peers' events: the record read again and pushed to this machine's relays, off the loop.
    peerEvents_ = std::make_unique<mesh::PeerEventApplier>(*store_, *hub_, *runner_);
    peerEvents_->start();
    mesh_->setPeerEvents([this](const mesh::FrameBody& event) {
      // A peer's reset: this machine's relayd closes the tunnel's bridges (never blocks).
      if (const auto* reset = std::get_if<mesh::TunnelReset>(&event)) {
        resetter_->resetHere(reset->tunnelId);
        return;
      }
      peerEvents_->apply(event);
    });
    // A link that comes up stands for the events lost while it was down (docs/mesh.md "Events").
    mesh_->setLinkUp([this](const std::string& machine, std::vector<std::string> tunnels) {
      peerEvents_->linkUp(machine, std::move(tunnels));
    });
    // relayd draining (SIGTERM): peers drop this machine's bridges at once and stop forwarding.
    hub_->setDrainingHandler([this](bool draining) {
      if (mesh_) mesh_->setLeaving(draining);
    });
    mesh_->routeFeed().setSink(relayHubFeedSink(*hub_));  // relayd's copy of the table
    if (auto started = mesh_->start(); !started.ok()) {
      log::error("cannot start the mesh node",
                 {{"socket", meshSettings_->handoffSocket}, {"error", started.error().message}});
      mesh_.reset();
      return 1;
    }
    registry_->setObserver(mesh_.get());
    hub_->setMeshSnapshotHandler([node = mesh_.get()](const std::string& relayKey) {
      node->routeFeed().requestSnapshot(relayKey);
    });
  }
  grpc_.emplace(GrpcServerOptions{.socketPath = config_.controlSocket}, *control_, *hub_);
  if (auto started = grpc_->start(); !started.ok()) {
    log::error("cannot serve gRPC",
               {{"socket", config_.controlSocket}, {"error", started.error().message}});
    return 1;
  }

  const AdminServerOptions adminOptions = adminServerOptions(config_);
  if (!makeSocketDirectory(adminOptions.socketPath)) return 1;
  AdminServiceContext admin;
  admin.store = store_.get();
  admin.pages = dynamic_cast<AdminStore*>(store_.get());  // SqlStore, the one Store there is
  admin.registry = &*registry_;
  admin.hub = &*hub_;
  admin.publisher = &*meshEvents_;
  admin.jobs = &*meshEvents_;
  admin.backup = backup_.get();  // null without a BackupStore: Export/Import answer UNIMPLEMENTED
  admin.gatherStats = [this] { return adminStats_->gather(); };
  admin.mesh = [this] { return mesh_.get(); };
  admin.tunnelStatus = [this](const std::string& id) { return statusSource_->gather(id); };
  admin.machineId = config_.identity.machineId;
  adminService_.emplace(std::move(admin));
  adminServer_.emplace(adminOptions, *adminService_);
  if (auto started = adminServer_->start(); !started.ok()) {
    log::error("cannot serve the Admin service",
               {{"socket", adminOptions.socketPath}, {"error", started.error().message}});
    return 1;
  }

  pool_.emplace();
  HttpServerOptions apiOptions;
  apiOptions.metrics = &metrics_;  // opentunnel_http_*{server="api"}, accept errors
  // On SIGTERM a request already read (a tunnel being created, a CSR being bound) is answered
  // rather than cut: cut, its client would see 503 from relayd for work that was done.
  apiOptions.stopGrace = std::chrono::milliseconds(10'000);
  apiOptions.streamRoutes = adminStreamRoutes({config_.adminToken, {}, backup_.get()}, apiGuard_);
  api_.emplace(*pool_, std::move(apiHandler_), apiOptions);
  std::vector<HttpListenerConfig> listeners;
  if (!makeSocketDirectory(config_.apiSocket)) return 1;
  listeners.push_back(
      HttpListenerConfig::forApi({config::ListenAddress::Kind::kUnix, {}, 0, config_.apiSocket}));
  if (config_.httpMode == "serve" && config_.httpListen.enabled()) {
    listeners.push_back(HttpListenerConfig::forApi(config_.httpListen));
  }
  if (auto started = api_->start(listeners); !started.ok()) {
    log::error("cannot serve the API", {{"error", started.error().message}});
    return 1;
  }

  metricsPool_.emplace(1, 16);
  HttpServerOptions metricsOptions;
  metricsOptions.name = "metrics";
  metricsOptions.metrics = &metrics_;
  metricsServer_.emplace(*metricsPool_, metricsHandler(metrics_, *store_), metricsOptions);
  if (config_.metricsListen.enabled()) {
    std::vector<HttpListenerConfig> metricsListeners{
        HttpListenerConfig{config_.metricsListen, false}};
    if (auto started = metricsServer_->start(metricsListeners); !started.ok()) {
      log::error("cannot serve metrics", {{"error", started.error().message}});
      return 1;
    }
  }
  return std::nullopt;
}

void ControldServer::startBackground() {
  analytics_->start();
  descriptors_.start();
  store_->startPoolUpkeep();
  usage_->start();
  attaches_->start();
  jobGauges_->start();
  rateSweeper_->start();
  certificates_->start();
  runner_->start();
  if (sweeper_) sweeper_->start();
  grpc_->setServing(true);
}

void ControldServer::stop() {
  adminServer_->stop();  // no operator call runs while the rest stops
  grpc_->setServing(false);
  api_->setDraining(true);
  api_->stop();
  runner_->stop();                 // ends running attempts and releases this machine's leases
  if (sweeper_) sweeper_->stop();  // before the store goes
  certificates_->stop();
  usage_->stop();     // flushes what the relays reported
  attaches_->stop();  // a last pass over the attaches' bookkeeping
  jobGauges_->stop();
  descriptors_.stop();
  rateSweeper_->stop();
  grpc_->stop();
  if (mesh_) {
    registry_->setObserver(nullptr);
    hub_->setMeshSnapshotHandler(nullptr);
    hub_->setDrainingHandler(nullptr);
    mesh_->stop();
    peerEvents_->stop();
  }
  metricsServer_->stop();
  hub_->shutdown();
  pool_->stop();
  metricsPool_->stop();
  analytics_->stop();  // what was emitted is posted within ANALYTICS_SHUTDOWN_FLUSH_MS
}

}  // namespace ot::controld
