// controld: the control plane. This file only wires the parts together; each lives in its own
// files (see docs/architecture.md). Start-up waits for the database before listening anywhere, so
// a controld without storage serves nothing and fails its health checks.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/metrics.h"
#include "controld/acme_issuer.h"
#include "controld/acme_jws.h"
#include "controld/acme_metrics.h"
#include "controld/api_source_guard.h"
#include "controld/api_routes.h"
#include "controld/bridge_registry.h"
#include "controld/ca_cooldown_gate.h"
#include "controld/control_service.h"
#include "controld/controld_config.h"
#include "controld/database_url.h"
#include "controld/database_wait.h"
#include "controld/dns_factory.h"
#include "controld/dns_record_metrics.h"
#include "controld/dns_sweeper.h"
#include "controld/grpc_server.h"
#include "controld/http_server.h"
#include "controld/instrumented_store.h"
#include "controld/ip_ranges.h"
#include "controld/job_gauges.h"
#include "controld/job_runner.h"
#include "controld/local_ca.h"
#include "controld/private_files.h"
#include "controld/relay_hub.h"
#include "controld/server_certificates.h"
#include "controld/store.h"
#include "controld/tunnel_service.h"
#include "controld/usage_recorder.h"
#include "controld/worker_pool.h"

namespace {

using namespace ot::controld;
namespace log = ot::log;

// Signals are blocked in every thread and taken synchronously by the main thread, so no handler
// runs on a gRPC or libuv thread.
sigset_t blockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return set;
}

// Waits up to `ms` for SIGTERM/SIGINT; true when one arrived.
bool waitForSignal(const sigset_t& set, int64_t ms) {
  timespec timeout{};
  timeout.tv_sec = ms / 1000;
  timeout.tv_nsec = (ms % 1000) * 1'000'000;
  return sigtimedwait(&set, nullptr, &timeout) > 0;
}

std::string randomMachineId() {
  auto bytes = ot::crypto::randomBytes(6);
  return "controld-" + (bytes ? ot::crypto::toHex(*bytes) : std::string("unknown"));
}

// The sockets' directory, when missing: owner and group may reach the sockets in it (relayd
// runs as controld's user or in its group), nobody else.
bool makeSocketDirectory(const std::string& socket_path) {
  const auto parent = std::filesystem::path(socket_path).parent_path();
  const ot::Status made = makeDirectories(parent, kSocketDirectoryMode);
  if (!made.ok()) log::error("cannot make the socket directory", {{"error", made.error().message}});
  return made.ok();
}

// Waits for the database (controld/database_wait.h). Returns the exit code to use, or nullopt
// once the database is ready.
std::optional<int> waitForDatabase(Store& store, const ControldConfig& config,
                                   const sigset_t& signals) {
  DatabaseWaitOptions options;
  options.timeout_ms = static_cast<int64_t>(config.startup_db_timeout_ms);
  DatabaseWaitHooks hooks;
  hooks.attempt = [&store] { return store.migrate(); };
  hooks.now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  hooks.sleep_or_stop = [&signals](int64_t ms) { return waitForSignal(signals, ms); };
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

// Serves /metrics. The pool gauge is read at scrape time: it changes with every request.
ot::controld::ApiHandler metricsHandler(ot::metrics::Metrics& metrics, const Store& store) {
  constexpr const char* kPoolName = "opentunnel_db_pool_connections";
  constexpr const char* kPoolHelp = "Database connections held, by state (idle, in_use).";
  auto& idle = metrics.gauge(kPoolName, kPoolHelp, {{"state", "idle"}});
  auto& in_use = metrics.gauge(kPoolName, kPoolHelp, {{"state", "in_use"}});
  return [&metrics, &store, &idle, &in_use](const ApiRequest& request) {
    if (request.path != "/metrics") return ApiResponse::error(404, "NotFoundError", "not found");
    if (request.method != "GET") {
      return ApiResponse::error(405, "MethodNotAllowedError", "use GET");
    }
    const PoolStats pool = store.poolStats();
    in_use.Set(static_cast<double>(pool.in_use));
    idle.Set(static_cast<double>(std::max<int64_t>(pool.open - pool.in_use, 0)));
    ApiResponse response;
    response.headers.emplace_back("Content-Type", "text/plain; version=0.0.4");
    response.body = metrics.render();
    return response;
  };
}

// opentunnel_requests_limited_total{limit}, every label registered up front so each is scraped
// (as 0) before the first refusal.
std::function<void(std::string_view)> limitedCounter(ot::metrics::Metrics& metrics) {
  constexpr const char* kName = "opentunnel_requests_limited_total";
  constexpr const char* kHelp = "API requests refused by a limit.";
  prometheus::Counter& create_rate = metrics.counter(kName, kHelp, {{"limit", "create_rate"}});
  prometheus::Counter& issuance_rate = metrics.counter(kName, kHelp, {{"limit", "issuance_rate"}});
  prometheus::Counter& backlog = metrics.counter(kName, kHelp, {{"limit", "issuance_backlog"}});
  return [&create_rate, &issuance_rate, &backlog](std::string_view limit) {
    if (limit == "create_rate") {
      create_rate.Increment();
    } else if (limit == "issuance_rate") {
      issuance_rate.Increment();
    } else if (limit == "issuance_backlog") {
      backlog.Increment();
    }
  };
}

// ISSUER=acme: the issuer, or nullptr after logging what is missing (the caller exits 2).
std::unique_ptr<AcmeIssuer> makeAcmeIssuer(const ControldConfig& config,
                                           DnsRecordMetrics* dns_metrics) {
  std::string problem;
  if (config.acme_account_key_jwk.empty()) {
    problem = "ACME_ACCOUNT_KEY_JWK is not set (controld account-key makes one)";
  } else if (config.dns_provider.empty()) {
    problem = "DNS_PROVIDER is not set (cloudflare or challtestsrv)";
  }
  std::unique_ptr<DnsProvider> dns;
  if (problem.empty()) {
    dns = makeDnsProvider(config, &problem);
    if (!dns && problem.empty()) problem = "cannot set up DNS_PROVIDER " + config.dns_provider;
  }
  if (problem.empty()) {
    AcmeIssuerConfig acme;
    acme.client.directory_url = config.acme_url;
    acme.client.email = config.acme_email;
    acme.client.eab_kid = config.acme_eab_kid;
    acme.client.eab_hmac_key = config.acme_eab_hmac_key;
    acme.client.account_key_jwk = config.acme_account_key_jwk;
    acme.client.http.ca_bundle = config.acme_ca_bundle;
    acme.order.poll_interval_ms = config.acme_poll_interval_ms;
    acme.order.propagation_timeout_ms = config.acme_dns_propagation_timeout_ms;
    acme.order.dns_resolver = config.acme_dns_resolver;
    auto created = AcmeIssuer::create(std::move(acme), std::move(dns), dns_metrics);
    if (created) {
      log::info("issuing certificates through ACME", {{"directory", config.acme_url},
                                                      {"dns_provider", config.dns_provider},
                                                      {"eab", !config.acme_eab_kid.empty()}});
      return std::move(created).value();
    }
    problem = created.error().message;
  }
  log::error("ISSUER=acme is not configured", {{"error", problem}});
  return nullptr;
}

int run(ControldConfig config) {
  const sigset_t signals = blockShutdownSignals();
  ot::metrics::Metrics metrics;
  if (config.machine_id.empty()) config.machine_id = randomMachineId();
  log::init({.format = *log::parseFormat(config.log_format),
             .level = *log::parseLevel(config.log_level),
             .target = "controld",
             .trailingFields = {{"machine", config.machine_id}}});

  // Checked before the database, so a bad configuration fails at once.
  auto trusted_proxies = parseTrustedProxyRanges(config.trusted_proxy_ranges);
  if (!trusted_proxies) {
    log::error("TRUSTED_PROXY_RANGES is not usable", {{"error", trusted_proxies.error().message}});
    return 2;
  }
  std::unique_ptr<DnsRecordMetrics> dns_metrics;
  std::unique_ptr<AcmeIssuer> acme;
  if (config.issuer == "acme") {
    dns_metrics = std::make_unique<DnsRecordMetrics>(metrics);
    acme = makeAcmeIssuer(config, dns_metrics.get());
    if (!acme) return 2;
  }

  auto url = parseDatabaseUrl(config.database_url, config.sqlite_path);
  if (!url.ok()) {
    log::error("DATABASE_URL is not usable", {{"error", url.error().message}});
    return 2;
  }
  // The SQLite file's directory, when missing, is controld's alone (the file holds private keys).
  if (url->backend == DatabaseBackend::kSqlite) {
    const auto directory = std::filesystem::path(url->sqlite_path).parent_path();
    if (const ot::Status made = makeDirectories(directory, kStateDirectoryMode); !made.ok()) {
      log::error("cannot make the database directory", {{"error", made.error().message}});
      return 2;
    }
  }
  StoreOptions store_options;
  store_options.url = config.database_url;
  store_options.sqlite_path = config.sqlite_path;
  store_options.pool_size = config.database_pool_size;
  auto opened = openStore(store_options);
  if (!opened.ok()) {
    log::error("cannot open the database", {{"error", opened.error().message}});
    return 2;
  }
  // Everything below uses the instrumented store, so every query is timed and counted.
  std::unique_ptr<Store> store =
      std::make_unique<InstrumentedStore>(std::move(opened).value(), metrics);
  log::info("starting", {{"database", redactedDatabaseUrl(*url)}, {"domain", config.domain}});
  if (auto code = waitForDatabase(*store, config, signals)) return *code;

  std::unique_ptr<LocalCa> local_ca;
  if (!acme) {
    auto ca = LocalCa::load(*store, config.local_cert_validity_ms);
    if (!ca.ok()) {
      log::error("cannot load the local CA", {{"error", ca.error().message}});
      return 1;
    }
    local_ca = std::move(ca).value();
    if (!config.local_ca_file.empty()) {
      if (auto written = local_ca->writeCaFile(config.local_ca_file); !written.ok()) {
        log::error("cannot write LOCAL_CA_FILE", {{"error", written.error().message}});
        return 1;
      }
    }
  }
  Issuer& issuer = acme ? static_cast<Issuer&>(*acme) : static_cast<Issuer&>(*local_ca);
  AcmeMetrics acme_metrics(metrics);

  // With ACME, the CA cool-down shared through meta (the local CA cannot be overloaded).
  std::unique_ptr<CaCooldownGate> cooldown;
  if (acme) {
    CaCooldownGateOptions cooldown_options;
    cooldown_options.on_started = [&acme_metrics] { acme_metrics.cooldown(); };
    cooldown = std::make_unique<CaCooldownGate>(*store, std::move(cooldown_options));
  }

  BridgeRegistry registry;
  RelayHub hub(registry);
  JobRunnerConfig runner_config;
  runner_config.owner = config.machine_id;
  runner_config.domain = config.domain;
  runner_config.concurrency = config.issuance_concurrency;
  runner_config.retry.base_delay_ms = config.issuance_retry_delay_ms;
  runner_config.on_attempt = [&acme_metrics](JobKind kind, JobOutcome outcome, double seconds) {
    acme_metrics.attempt(kind, outcome, seconds);
  };
  runner_config.on_failure = [&acme_metrics](JobKind kind, const FailureDetail& detail) {
    acme_metrics.failure(kind, detail);
  };
  JobRunner runner(runner_config, *store, issuer, hub);
  runner.setCaCooldown(cooldown.get());

  // Leftover challenge records: one machine at a time sweeps them (a lease in meta). The names
  // kept are those of every job running on any machine (leased in the store) besides the
  // sweep's minimum age (an hour).
  std::unique_ptr<DnsSweeper> sweeper;
  if (acme) {
    DnsSweeperOptions sweep;
    sweep.domain = config.domain;
    sweep.owner = config.machine_id;
    sweep.active_names = [&runner]() -> ot::Result<std::set<std::string>> {
      return runner.clusterRunningNames();
    };
    sweeper =
        std::make_unique<DnsSweeper>(*store, acme->dns(), std::move(sweep), dns_metrics.get());
  }

  TunnelServiceConfig service_config;
  service_config.domain = config.domain;
  service_config.create_rate_per_hour = config.create_rate_per_hour;
  service_config.create_rate_burst = config.create_rate_burst;
  service_config.issuance_rate_per_day = config.issuance_rate_per_day;
  service_config.issuance_rate_burst = config.issuance_rate_burst;
  service_config.issuance_backlog_limit = config.issuance_backlog_limit;
  service_config.on_limited = limitedCounter(metrics);
  TunnelService service(service_config, *store, registry, hub, runner, ot::unixNowMs);
  auto router = std::make_shared<const ApiRouter>(buildApiRouter(service));
  ot::SourceFailureLimits auth_failure_limits;
  auth_failure_limits.maxFailures = config.auth_failure_limit;
  auth_failure_limits.windowMs = config.auth_failure_window_ms;
  // The guard inside the proxy mapping: it counts a request under the address the create limit
  // uses (the visitor's, when a trusted proxy named it).
  ApiHandler api_handler = withTrustedProxies(
      withSourceGuard(makeApiHandler(router), auth_failure_limits, metrics), *trusted_proxies);

  ServerCertificatesConfig certificates_config;
  certificates_config.domain = config.domain;
  certificates_config.owner = config.machine_id;
  certificates_config.cert_file = config.tls_cert_file;
  certificates_config.key_file = config.tls_key_file;
  ServerCertificates certificates(certificates_config, *store, hub, &runner);
  runner.setServerCertificateHandler(
      [&certificates](const ServerCertificate& certificate) { certificates.adopt(certificate); });

  JobGauges job_gauges(*store, metrics);

  UsageRecorder usage(*store);
  hub.setCountersHandler(
      [&usage](const std::string&, const opentunnel::control::v1::Counters& c) { usage.add(c); });

  ControlService control(*store, registry, hub);
  if (!makeSocketDirectory(config.control_socket)) return 1;
  GrpcServer grpc({.socket_path = config.control_socket}, control, hub);
  if (auto started = grpc.start(); !started.ok()) {
    log::error("cannot serve gRPC",
               {{"socket", config.control_socket}, {"error", started.error().message}});
    return 1;
  }

  WorkerPool pool;
  HttpServer api(pool, std::move(api_handler));
  std::vector<HttpListenerConfig> listeners;
  if (!makeSocketDirectory(config.api_socket)) return 1;
  listeners.push_back(HttpListenerConfig::forApi(
      {ot::config::ListenAddress::Kind::kUnix, {}, 0, config.api_socket}));
  if (config.http_mode == "serve" && config.http_listen.enabled()) {
    listeners.push_back(HttpListenerConfig::forApi(config.http_listen));
  }
  if (auto started = api.start(listeners); !started.ok()) {
    log::error("cannot serve the API", {{"error", started.error().message}});
    return 1;
  }

  WorkerPool metrics_pool(1, 16);
  HttpServerOptions metrics_options;
  metrics_options.name = "metrics";
  HttpServer metrics_server(metrics_pool, metricsHandler(metrics, *store), metrics_options);
  if (config.metrics_listen.enabled()) {
    std::vector<HttpListenerConfig> metrics_listeners{
        HttpListenerConfig{config.metrics_listen, false}};
    if (auto started = metrics_server.start(metrics_listeners); !started.ok()) {
      log::error("cannot serve metrics", {{"error", started.error().message}});
      return 1;
    }
  }

  usage.start();
  job_gauges.start();
  certificates.start();
  runner.start();
  if (sweeper) sweeper->start();
  grpc.setServing(true);
  log::info("serving", {{"api_socket", config.api_socket},
                        {"control_socket", config.control_socket},
                        {"http", config.http_mode == "serve" ? config.http_listen.toString()
                                                             : std::string("off")}});

  while (!waitForSignal(signals, 60'000)) {
  }
  log::info("shutting down");
  grpc.setServing(false);
  api.setDraining(true);
  api.stop();
  runner.stop();                 // ends running attempts and releases this machine's leases
  if (sweeper) sweeper->stop();  // before the store goes
  certificates.stop();
  usage.stop();  // flushes what the relays reported
  job_gauges.stop();
  grpc.stop();
  metrics_server.stop();
  hub.shutdown();
  pool.stop();
  metrics_pool.stop();
  log::info("stopped");
  log::flush();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ControldConfig config;
  CLI::App app{"controld: OpenTunnel's control plane (HTTP API, storage, issuance, gRPC)"};
  addControldFlags(app, config);
  CLI::App* account_key =
      app.add_subcommand("account-key", "print a new ACME account key (a P-256 private JWK)");
  app.require_subcommand(0, 1);
  if (auto code = ot::config::parseCommandLine(app, argc, argv)) return *code;
  if (account_key->parsed()) {
    auto jwk = ot::controld::jws::generateAccountKeyJwk();
    if (!jwk) {
      std::fprintf(stderr, "cannot make a key: %s\n", jwk.error().message.c_str());
      return 1;
    }
    std::printf("%s\n", jwk->c_str());
    return 0;
  }
  return run(std::move(config));
}
