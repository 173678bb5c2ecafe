#include "relayd/relay_server.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <utility>

#include "common/analytics/analytics_sender.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/fd_handoff.h"
#include "common/log.h"
#include "relayd/connection_cap.h"
#include "relayd/forwarded_visitor.h"
#include "relayd/handshake_slots.h"
#include "relayd/inbound_connection.h"
#include "relayd/internal_listener.h"
#include "relayd/listener.h"
#include "relayd/plain_http_server.h"
#include "relayd/relay.h"
#include "relayd/relay_context.h"
#include "relayd/relay_gauges.h"
#include "relayd/relay_metrics.h"
#include "relayd/relay_stats.h"

namespace ot::relayd {

namespace {

const log::Logger kRelayServerLog("relayd");

// Once relayd stops listening, open API requests get up to this long (the spec's 10 s).
constexpr uint64_t kShutdownGraceMs = 10'000;
constexpr uint64_t kGraceCheckMs = 50;

// What this process may use: physical memory, or its cgroup's limit when lower (v2 memory.max,
// v1 memory.limit_in_bytes; "max" or v1's huge "unlimited" leave physical memory).
uint64_t memoryForProcess(std::string& source) {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long pageSize = sysconf(_SC_PAGE_SIZE);
  uint64_t memory = 0;
  source = "unknown";
  if (pages > 0 && pageSize > 0) {
    memory = static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageSize);
    source = "physical";
  }
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    FILE* file = std::fopen(path, "re");
    if (file == nullptr) continue;
    unsigned long long limit = 0;
    if (std::fscanf(file, "%llu", &limit) == 1 && limit > 0 && (memory == 0 || limit < memory)) {
      memory = limit;
      source = "cgroup";
    }
    std::fclose(file);
    break;
  }
  return memory;
}

// The public connection cap from memory and descriptors (connection_cap.h), logged with its inputs.
uint64_t connectionLimit(const RelaydConfig& config) {
  ConnectionCapInputs inputs;
  std::string memorySource;
  inputs.memoryBytes = memoryForProcess(memorySource);
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
    inputs.openFileLimit = files.rlim_cur;
  inputs.bufferedBytesLimit = config.bufferedBytesLimit;
  const ConnectionCap cap = deriveConnectionCap(inputs);
  kRelayServerLog.info("connection cap",
                       {{"max_connections", std::to_string(cap.limit)},
                        {"bound_by", std::string(cap.boundBy)},
                        {"memory_bytes", std::to_string(inputs.memoryBytes)},
                        {"memory_source", memorySource},
                        {"buffered_bytes_limit", std::to_string(inputs.bufferedBytesLimit)},
                        {"bytes_per_connection", std::to_string(inputs.bytesPerConnection)},
                        {"by_memory", std::to_string(cap.byMemory)},
                        {"nofile", std::to_string(inputs.openFileLimit)},
                        {"reserved_fds", std::to_string(cap.reservedDescriptors)},
                        {"by_descriptors", std::to_string(cap.byDescriptors)}});
  return cap.limit;
}

}  // namespace

struct RelayServer::Impl {
  explicit Impl(RelaydConfig configIn) : config(std::move(configIn)), relayMetrics(registry) {}

  RelaydConfig config;
  metrics::Metrics registry;
  RelayMetrics relayMetrics;
  uv_loop_t loop{};
  std::unique_ptr<RelayContext> context;
  std::unique_ptr<Relay> relay;
  std::unique_ptr<Listener> tlsListener;
  std::unique_ptr<PlainHttpServer> httpServer;
  std::unique_ptr<InternalListener> internalListener;  // INTERNAL_LISTEN (the region mesh)
  std::unique_ptr<PlainHttpServer> metricsServer;
  std::unique_ptr<RelayGauges> gauges;  // scrape-time gauges, the descriptor watch
  // Visitor events (relayd/visitor_analytics.h): its own thread, stopped after the loop ended.
  std::unique_ptr<analytics::Analytics> analytics;
  uv_signal_t sigterm{};
  uv_signal_t sigint{};
  uv_timer_t shutdownTimer{};
  int phase = 0;               // 0 serving, 1 draining, 2 stopping
  uint64_t graceEndsAtMs = 0;  // phase 2: when what is still open is cut

  // GET /health on HTTP_LISTEN: 200 or 503 and the JSON of relay_health.h.
  PlainResponse healthAnswer() const;
  void beginShutdown();
  int failStartup();
  void finishDrain();
  void checkGrace();
  void stopEverything();
};

RelayServer::RelayServer(RelaydConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

RelayServer::~RelayServer() = default;

int RelayServer::run() {
  Impl& s = *impl_;
  uv_loop_init(&s.loop);
  if (s.config.identity.machineId.empty())  // main resolves it; a test may leave it out
    s.config.identity.machineId =
        "m-" + crypto::toHex(crypto::randomBytes(6).value_or(std::vector<uint8_t>(6)));
  s.context = std::make_unique<RelayContext>(&s.loop, s.config, s.relayMetrics);
  s.analytics = std::make_unique<analytics::Analytics>(
      s.config.analytics,
      analytics::Origin{s.config.identity.machineId, s.config.identity.region, "relayd"},
      &s.registry);
  if (s.analytics->enabled()) s.context->analytics = s.analytics.get();
  s.analytics->start();
  s.context->maxConnections = connectionLimit(s.config);
  s.context->apiHandshakes.setMaxWaiting(HandshakeSlots::maxWaitingFor(s.context->maxConnections));
  s.context->ticketKeys = TicketKeyStore::open(s.config.identity.stateDir, unixNowMs() / 1000);

  ControlClientOptions control;
  control.socketPath = s.config.controlSocket;
  control.machineId = s.config.identity.machineId;
  std::random_device random;
  control.epoch = (static_cast<uint64_t>(random()) << 32) ^ random();
  control.startedAtUnixMs = unixNowMs();
  control.version = "0.1.0";
  control.stats = [&metrics = s.relayMetrics] { return readRelayStats(metrics); };
  s.relay = std::make_unique<Relay>(*s.context, std::move(control));

  auto tls = Listener::open(
      &s.loop, s.config.tlsListen, "tls",
      [&s](int fd, const sockaddr_storage& peer) {
        if (s.phase >= 2) {
          ::close(fd);
          return;
        }
        InboundConnection::accept(*s.context, *s.relay, fd, PeerEndpoint::fromSocket(peer));
      },
      &s.relayMetrics);
  if (!tls.ok()) {
    kRelayServerLog.error("cannot listen for TLS", {{"address", s.config.tlsListen.toString()},
                                                    {"error", tls.error().message}});
    return s.failStartup();
  }
  s.tlsListener = std::move(tls).value();

  if (s.config.internalListen.kind != config::ListenAddress::Kind::kOff) {
    InternalListenerOptions internal;
    internal.address = s.config.internalListen;
    internal.secret = s.config.internalToken;
    internal.machineId = s.config.identity.machineId;
    internal.handoffSocketPath = s.config.meshHandoffSocket.empty()
                                     ? mesh::defaultHandoffSocketPath(s.config.controlSocket)
                                     : s.config.meshHandoffSocket;
    internal.aliveState = [&s] {
      if (s.context->draining) return mesh::AliveState::kDraining;
      return s.relay->controlConnected() ? mesh::AliveState::kServing
                                         : mesh::AliveState::kControlDown;
    };
    internal.linkedSender = [&s](std::string_view machineId, std::string_view peerHost) {
      return s.relay->meshRoutes().linkedFrom(machineId, peerHost);
    };
    internal.acceptForward = [&s](int fd, const mesh::ForwardHeader& header,
                                  std::span<const uint8_t> rest) {
      if (s.phase >= 2) {
        ::close(fd);
        return;
      }
      ForwardedVisitor::start(*s.context, *s.relay, fd, header, rest);
    };
    auto listener = InternalListener::open(*s.context, std::move(internal));
    if (!listener.ok()) {
      kRelayServerLog.error(
          "cannot listen on the internal address",
          {{"address", s.config.internalListen.toString()}, {"error", listener.error().message}});
      return s.failStartup();
    }
    s.internalListener = std::move(listener).value();
  }

  if (s.config.httpListen.kind != config::ListenAddress::Kind::kOff) {
    auto http = PlainHttpServer::open(
        &s.loop, s.config.httpListen, "http",
        redirectHandler(s.config.domain, s.tlsListener->port(), [&s] { return s.healthAnswer(); }),
        &s.relayMetrics);
    if (!http.ok()) {
      kRelayServerLog.error("cannot listen for HTTP", {{"error", http.error().message}});
      return s.failStartup();
    }
    s.httpServer = std::move(http).value();
  }
  if (s.config.metricsListen.kind != config::ListenAddress::Kind::kOff) {
    auto metricsServer = PlainHttpServer::open(
        &s.loop, s.config.metricsListen, "metrics",
        [&s](const PlainRequest& request) {
          PlainResponse response;
          if (request.target != "/metrics") {
            response.status = 404;
            response.body = "not found\n";
            return response;
          }
          response.contentType = "text/plain; version=0.0.4; charset=utf-8";
          if (s.gauges) s.gauges->refresh();
          response.body = s.registry.render();
          return response;
        },
        &s.relayMetrics);
    if (!metricsServer.ok()) {
      kRelayServerLog.error("cannot listen for metrics",
                            {{"error", metricsServer.error().message}});
      return s.failStartup();
    }
    s.metricsServer = std::move(metricsServer).value();
  }

  uv_signal_init(&s.loop, &s.sigterm);
  uv_signal_init(&s.loop, &s.sigint);
  s.sigterm.data = &s;
  s.sigint.data = &s;
  auto onSignal = [](uv_signal_t* handle, int) {
    static_cast<Impl*>(handle->data)->beginShutdown();
  };
  uv_signal_start(&s.sigterm, onSignal, SIGTERM);
  uv_signal_start(&s.sigint, onSignal, SIGINT);
  uv_timer_init(&s.loop, &s.shutdownTimer);
  s.shutdownTimer.data = &s;

  s.gauges = std::make_unique<RelayGauges>(&s.loop, s.relayMetrics, s.relay->table());
  s.gauges->start();
  s.relay->start();
  kRelayServerLog.info(
      "serving",
      {{"tls_port", std::to_string(s.tlsListener->port())},
       {"http_port", s.httpServer ? std::to_string(s.httpServer->port()) : std::string("off")},
       {"metrics_port",
        s.metricsServer ? std::to_string(s.metricsServer->port()) : std::string("off")},
       {"domain", s.config.domain},
       {"max_connections", std::to_string(s.context->maxConnections)},
       {"handshake_queue", std::to_string(s.context->apiHandshakes.limits().maxWaiting)},
       {"io_uring", s.context->ring ? std::string("on") : s.context->ringError},
       {"tls_handshake_threads", s.context->handshakeWorkersNote}});

  uv_run(&s.loop, UV_RUN_DEFAULT);

  s.context->runDeferred();
  s.relay.reset();
  s.context.reset();
  // Let the close callbacks of everything above run, then the loop can go.
  uv_run(&s.loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&s.loop) != 0) kRelayServerLog.warn("the loop still had handles at exit");
  // The last visitors' events are queued by now: posted within ANALYTICS_SHUTDOWN_FLUSH_MS.
  s.analytics->stop();
  kRelayServerLog.info("stopped");
  log::flush();
  return 0;
}

PlainResponse RelayServer::Impl::healthAnswer() const {
  const HealthReport report = relay->health();
  PlainResponse response;
  response.status = report.httpStatus();
  response.contentType = "application/json";
  response.body = healthBody(report, config.identity.machineId, config.identity.region);
  response.headers.emplace_back("Cache-Control", "no-store");
  return response;
}

// A listener could not be opened: close what was set up so the process exits cleanly.
int RelayServer::Impl::failStartup() {
  relay->stop();
  httpServer.reset();
  metricsServer.reset();
  tlsListener.reset();
  context->closeHandles();
  uv_run(&loop, UV_RUN_DEFAULT);
  relay.reset();
  context.reset();
  uv_run(&loop, UV_RUN_DEFAULT);
  (void)uv_loop_close(&loop);
  log::flush();
  return 1;
}

void RelayServer::Impl::beginShutdown() {
  if (phase == 0) {
    phase = 1;
    kRelayServerLog.info("SIGTERM: draining",
                         {{"drain_ms", std::to_string(config.shutdownDrainMs)}});
    relay->startDrain();
    uv_timer_start(
        &shutdownTimer, [](uv_timer_t* handle) { static_cast<Impl*>(handle->data)->finishDrain(); },
        config.shutdownDrainMs, 0);
  } else if (phase == 1) {
    kRelayServerLog.info("second signal: stopping now");
    finishDrain();
  }
}

void RelayServer::Impl::finishDrain() {
  if (phase >= 2) return;
  phase = 2;
  uv_timer_stop(&shutdownTimer);
  tlsListener->close();
  if (httpServer) httpServer->close();
  relay->closeAllBridges();
  kRelayServerLog.info("drain over: stopped listening",
                       {{"api_requests", std::to_string(relay->apiProxy().inFlight())},
                        {"grace_ms", std::to_string(kShutdownGraceMs)}});
  // Open API requests (and the bridges' close handshakes) get up to kShutdownGraceMs; relayd stops
  // as soon as none is left.
  graceEndsAtMs = uv_now(&loop) + kShutdownGraceMs;
  uv_timer_start(
      &shutdownTimer, [](uv_timer_t* handle) { static_cast<Impl*>(handle->data)->checkGrace(); }, 0,
      kGraceCheckMs);
}

void RelayServer::Impl::checkGrace() {
  const bool idle = relay->apiProxy().inFlight() == 0 && context->apiConnections.empty() &&
                    relay->bridgeCount() == 0;
  if (!idle && uv_now(&loop) < graceEndsAtMs) return;
  if (!idle) {
    kRelayServerLog.warn("shutdown grace over: cutting what is still open",
                         {{"api_requests", std::to_string(relay->apiProxy().inFlight())},
                          {"api_connections", std::to_string(context->apiConnections.size())},
                          {"bridges", std::to_string(relay->bridgeCount())}});
  }
  uv_timer_stop(&shutdownTimer);
  stopEverything();
}

void RelayServer::Impl::stopEverything() {
  context->resetAllStreams();
  relay->stop();
  httpServer.reset();
  metricsServer.reset();
  tlsListener.reset();
  internalListener.reset();
  if (gauges) gauges->close();
  uv_close(reinterpret_cast<uv_handle_t*>(&sigterm), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&sigint), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&shutdownTimer), nullptr);
  context->closeHandles();
  // The loop ends by itself once every handle above has closed.
}

}  // namespace ot::relayd
