#include "relayd/relay_metrics.h"

namespace ot::relayd {
namespace {

const prometheus::Histogram::BucketBoundaries kDurationBuckets = {0.01, 0.1, 1,   10,
                                                                  60,   300, 900, 3600};

constexpr const char* kVisitorsName = "opentunnel_visitor_connections_total";
constexpr const char* kVisitorsHelp = "Visitor connections by how they ended up being handled.";
constexpr const char* kRingName = "opentunnel_relay_ring_total";
constexpr const char* kRingHelp =
    "io_uring on idle bridges: reads through armed receives, pings sent in a tick's batch, "
    "receives ended for want of a buffer.";
constexpr const char* kMeshLookupsName = "opentunnel_mesh_lookups_total";
constexpr const char* kMeshLookupsHelp =
    "Visitors with no bridge here looked up in the mesh's route table, by whether a machine held "
    "the route.";
constexpr const char* kMeshTableName = "opentunnel_mesh_table_updates_total";
constexpr const char* kMeshTableHelp =
    "Updates of relayd's copy of the mesh table from controld: snapshots and deltas applied, and "
    "gaps (a delta that skipped a version: a snapshot is asked for).";
constexpr const char* kAttachesName = "opentunnel_bridge_attaches_total";
constexpr const char* kAttachesHelp = "Bridge attach attempts by result.";
constexpr const char* kDetachesName = "opentunnel_bridge_detaches_total";
constexpr const char* kDetachesHelp = "Bridges detached, by reason.";
constexpr const char* kBackpressureName = "opentunnel_bridge_backpressure_total";
constexpr const char* kBackpressureHelp =
    "Bridge write backpressure events: stalls and resets after a stall lasted too long.";
constexpr const char* kBytesName = "opentunnel_visitor_bytes_total";
constexpr const char* kBytesHelp = "Bytes relayed for visitors (in: from visitors, out: to them).";
constexpr const char* kHandshakesName = "opentunnel_api_tls_handshakes_total";
constexpr const char* kHandshakesHelp = "TLS handshakes terminated for the API domain, by result.";
constexpr const char* kSessionsName = "opentunnel_api_tls_sessions_total";
constexpr const char* kSessionsHelp =
    "Completed TLS handshakes for the API domain: full, or resumed from a session ticket.";
constexpr const char* kShedName = "opentunnel_connections_shed_total";
constexpr const char* kShedHelp =
    "Connections refused because a relay-wide or per-source limit was reached.";
constexpr const char* kAcceptName = "opentunnel_accept_errors_total";
constexpr const char* kAcceptHelp = "accept() failures (emfile: out of descriptors or memory).";
constexpr const char* kRecordFetchesName = "opentunnel_tunnel_record_fetches_total";
constexpr const char* kRecordFetchesHelp =
    "Bridge upgrades of a tunnel whose record was not cached: fetched (sent FetchTunnel) or "
    "joined (waited for the fetch in flight).";

}  // namespace

std::string_view visitorOutcomeName(VisitorOutcome outcome) {
  switch (outcome) {
    case VisitorOutcome::kServedLocal:
      return "served_local";
    case VisitorOutcome::kRejectedUnknownTunnel:
      return "rejected_unknown_tunnel";
    case VisitorOutcome::kRejectedUnknownRoute:
      return "rejected_unknown_route";
    case VisitorOutcome::kRejectedNoBridge:
      return "rejected_no_bridge";
    case VisitorOutcome::kRejectedCertNotReady:
      return "rejected_cert_not_ready";
    case VisitorOutcome::kRejectedTooManyConnections:
      return "rejected_too_many_connections";
    case VisitorOutcome::kRejectedBadHello:
      return "rejected_bad_hello";
    case VisitorOutcome::kRejectedTimeout:
      return "rejected_timeout";
    case VisitorOutcome::kRejectedSourceLimit:
      return "rejected_source_limit";
    case VisitorOutcome::kForwardedOut:
      return "forwarded_out";
    case VisitorOutcome::kForwardedIn:
      return "forwarded_in";
    case VisitorOutcome::kError:
    case VisitorOutcome::kCount:
      break;
  }
  return "error";
}

std::string_view attachOutcomeName(AttachOutcome outcome) {
  switch (outcome) {
    case AttachOutcome::kOk:
      return "ok";
    case AttachOutcome::kBadToken:
      return "bad_token";
    case AttachOutcome::kCertNotReady:
      return "cert_not_ready";
    case AttachOutcome::kInvalidRoute:
      return "invalid_route";
    case AttachOutcome::kTooManyRoutes:
      return "too_many_routes";
    case AttachOutcome::kRouteConflict:
      return "route_conflict";
    case AttachOutcome::kTooManyFailures:
      return "too_many_failures";
    case AttachOutcome::kTooManyBridges:
      return "too_many_bridges";
    case AttachOutcome::kError:
    case AttachOutcome::kCount:
      break;
  }
  return "error";
}

std::string_view detachOutcomeName(DetachOutcome outcome) {
  switch (outcome) {
    case DetachOutcome::kClientClose:
      return "client_close";
    case DetachOutcome::kDrop:
      return "drop";
    case DetachOutcome::kIdleRetire:
      return "idle_retire";
    case DetachOutcome::kDrain:
      return "drain";
    case DetachOutcome::kDelete:
      return "delete";
    case DetachOutcome::kServerClose:
      return "server_close";
    case DetachOutcome::kRevoked:
      return "revoked";
    case DetachOutcome::kReset:
    case DetachOutcome::kCount:
      break;
  }
  return "reset";
}

std::string_view forwardFailureName(ForwardFailure failure) {
  switch (failure) {
    case ForwardFailure::kRefused:
      return "refused";
    case ForwardFailure::kConnect:
      return "connect";
    case ForwardFailure::kTimeout:
      return "timeout";
    case ForwardFailure::kIo:
    case ForwardFailure::kCount:
      break;
  }
  return "io";
}

RelayMetrics::RelayMetrics(metrics::Metrics& metricsRegistry)
    : registry(metricsRegistry),
      bridgesAttached(metricsRegistry.gauge("opentunnel_bridges_attached",
                                            "Bridges currently attached to this relay.")),
      attaches{},
      detaches{},
      backpressureStall(
          metricsRegistry.counter(kBackpressureName, kBackpressureHelp, {{"event", "stall"}})),
      backpressureReset(
          metricsRegistry.counter(kBackpressureName, kBackpressureHelp, {{"event", "reset"}})),
      visitorConnectionsOpen(metricsRegistry.gauge("opentunnel_visitor_connections_open",
                                                   "Visitor connections currently open.")),
      visitors{},
      visitorBytesIn(metricsRegistry.counter(kBytesName, kBytesHelp, {{"direction", "in"}})),
      visitorBytesOut(metricsRegistry.counter(kBytesName, kBytesHelp, {{"direction", "out"}})),
      visitorDuration(metricsRegistry.histogram(
          "opentunnel_visitor_connection_duration_seconds",
          "How long visitor connections stayed open, in seconds.", kDurationBuckets)),
      apiHandshakeOk(metricsRegistry.counter(kHandshakesName, kHandshakesHelp, {{"result", "ok"}})),
      apiHandshakeFailed(
          metricsRegistry.counter(kHandshakesName, kHandshakesHelp, {{"result", "failed"}})),
      apiHandshakeTimeout(
          metricsRegistry.counter(kHandshakesName, kHandshakesHelp, {{"result", "timeout"}})),
      apiSessionFull(
          metricsRegistry.counter(kSessionsName, kSessionsHelp, {{"handshake", "full"}})),
      apiSessionResumed(
          metricsRegistry.counter(kSessionsName, kSessionsHelp, {{"handshake", "resumed"}})),
      shedHandshakes(metricsRegistry.counter(kShedName, kShedHelp, {{"reason", "handshakes"}})),
      shedConnections(metricsRegistry.counter(kShedName, kShedHelp, {{"reason", "connections"}})),
      shedSourceHandshakes(
          metricsRegistry.counter(kShedName, kShedHelp, {{"reason", "source_handshakes"}})),
      shedSourceApiConnections(
          metricsRegistry.counter(kShedName, kShedHelp, {{"reason", "source_api_connections"}})),
      shedDrainingBridges(
          metricsRegistry.counter(kShedName, kShedHelp, {{"reason", "draining_bridges"}})),
      acceptEmfile(metricsRegistry.counter(kAcceptName, kAcceptHelp, {{"error", "emfile"}})),
      acceptOther(metricsRegistry.counter(kAcceptName, kAcceptHelp, {{"error", "other"}})),
      bufferedBytes(metricsRegistry.gauge(
          "opentunnel_relay_buffered_bytes",
          "Bytes held in relay buffers waiting for a slow reader or writer.")),
      controlSessionsTotal(metricsRegistry.counter("opentunnel_control_sessions_total",
                                                   "Control sessions opened with controld.")),
      controlConnected(metricsRegistry.gauge("opentunnel_control_connected",
                                             "1 while the control session with controld is up.")),
      recordFetchesSent(metricsRegistry.counter(kRecordFetchesName, kRecordFetchesHelp,
                                                {{"upgrade", "fetched"}})),
      recordFetchesJoined(
          metricsRegistry.counter(kRecordFetchesName, kRecordFetchesHelp, {{"upgrade", "joined"}})),
      apiProxyFailures(
          metricsRegistry.counter("opentunnel_api_proxy_failures_total",
                                  "API requests that could not be forwarded to controld.")),
      peerBacklogPaused(metricsRegistry.counter(
          "opentunnel_relay_peer_backlog_total",
          "Peers that left relayd's answers unread past the write backlog marks.",
          {{"event", "paused"}})),
      peerBacklogReset(metricsRegistry.counter(
          "opentunnel_relay_peer_backlog_total",
          "Peers that left relayd's answers unread past the write backlog marks.",
          {{"event", "reset"}})),
      bridgeFragmentLimit(metricsRegistry.counter(
          "opentunnel_bridge_fragment_limit_total",
          "Bridges closed for a WebSocket message split into too many frames.")),
      ringReceives(metricsRegistry.counter(kRingName, kRingHelp, {{"event", "receive"}})),
      ringSends(metricsRegistry.counter(kRingName, kRingHelp, {{"event", "send"}})),
      ringOutOfBuffers(
          metricsRegistry.counter(kRingName, kRingHelp, {{"event", "out_of_buffers"}})),
      ringArmed(metricsRegistry.gauge("opentunnel_relay_ring_armed",
                                      "Idle bridges whose reads come through io_uring.")),
      handshakeSteps(
          metricsRegistry.counter("opentunnel_relay_tls_handshake_steps_total",
                                  "API TLS handshake steps run on the handshake worker threads.")),
      certificatesExpiring(metricsRegistry.gauge(
          "opentunnel_certificates_expiring",
          "Ready certificates of tunnels with a bridge here that expire within 14 days.")),
      loopHandles(metricsRegistry.gauge(
          "opentunnel_loop_handles",
          "libuv handles alive on relayd's loop (follows connections, bridges and timers).")),
      meshLookupHit(
          metricsRegistry.counter(kMeshLookupsName, kMeshLookupsHelp, {{"result", "hit"}})),
      meshLookupMiss(
          metricsRegistry.counter(kMeshLookupsName, kMeshLookupsHelp, {{"result", "miss"}})),
      forwardFailures{},
      meshTableSnapshots(
          metricsRegistry.counter(kMeshTableName, kMeshTableHelp, {{"kind", "snapshot"}})),
      meshTableDeltas(metricsRegistry.counter(kMeshTableName, kMeshTableHelp, {{"kind", "delta"}})),
      meshTableGaps(metricsRegistry.counter(kMeshTableName, kMeshTableHelp, {{"kind", "gap"}})),
      meshTableRoutes(metricsRegistry.gauge(
          "opentunnel_mesh_table_routes",
          "Tunnel routes some other machine holds in relayd's copy of the mesh table.")) {
  for (size_t i = 0; i < static_cast<size_t>(ForwardFailure::kCount); ++i) {
    forwardFailures[i] = &metricsRegistry.counter(
        "opentunnel_cluster_forward_failures_total",
        "Forwards to another machine that failed, by reason (each try counts).",
        {{"reason", std::string(forwardFailureName(static_cast<ForwardFailure>(i)))}});
  }
  // Every label value exists from the start, so dashboards see zeros instead of gaps.
  for (size_t i = 0; i < static_cast<size_t>(AttachOutcome::kCount); ++i) {
    attaches[i] = &metricsRegistry.counter(
        kAttachesName, kAttachesHelp,
        {{"result", std::string(attachOutcomeName(static_cast<AttachOutcome>(i)))}});
  }
  for (size_t i = 0; i < static_cast<size_t>(DetachOutcome::kCount); ++i) {
    detaches[i] = &metricsRegistry.counter(
        kDetachesName, kDetachesHelp,
        {{"reason", std::string(detachOutcomeName(static_cast<DetachOutcome>(i)))}});
  }
  for (size_t i = 1; i < tlsDetaches.size(); ++i) {  // 0 is kNone: never counted
    tlsDetaches[i] = &metricsRegistry.counter(
        "opentunnel_bridge_tls_detach_total",
        "Bridges whose TLS dropped OpenSSL's per-connection state after the handshake "
        "(detached), or kept it, by reason.",
        {{"result", tls::detachResultName(static_cast<tls::DetachResult>(i))}});
  }
  for (size_t i = 0; i < static_cast<size_t>(VisitorOutcome::kCount); ++i) {
    visitors[i] = &metricsRegistry.counter(
        kVisitorsName, kVisitorsHelp,
        {{"outcome", std::string(visitorOutcomeName(static_cast<VisitorOutcome>(i)))}});
  }
}

}  // namespace ot::relayd
