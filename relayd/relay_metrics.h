// relayd's Prometheus metrics (the reference's list, relayd's part). Fixed label values only: no
// tunnel IDs, hostnames or addresses. Created once at startup; the counters are prometheus-cpp
// objects, safe to bump from the loop thread without locks of ours.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <array>
#include <string>
#include <string_view>

#include "common/metrics.h"
#include "common/tls_engine.h"

namespace ot::relayd {

// opentunnel_visitor_connections_total{outcome}
enum class VisitorOutcome : uint8_t {
  kServedLocal,
  kRejectedUnknownTunnel,
  kRejectedUnknownRoute,
  kRejectedNoBridge,
  kRejectedCertNotReady,
  kRejectedTooManyConnections,
  kRejectedBadHello,
  kRejectedTimeout,
  kRejectedSourceLimit,  // the visitor's address holds MAX_CONNS_PER_TUNNEL_PER_SOURCE of the
                         // tunnel
  kError,
  kForwardedOut,  // no bridge here: sent to the machine holding the route (docs/mesh.md)
  kForwardedIn,   // forwarded here by another machine and served by a bridge here
  kCount,
};
// opentunnel_cluster_forward_failures_total{reason}: one per failed try of a forward.
enum class ForwardFailure : uint8_t {
  kRefused,  // the holder answered 0 (no bridge there)
  kConnect,  // the connection to its internal address failed
  kTimeout,  // no answer within the forward answer timeout
  kIo,       // it closed, reset or answered something else
  kCount,
};
// opentunnel_bridge_attaches_total{result}
enum class AttachOutcome : uint8_t {
  kOk,
  kBadToken,
  kCertNotReady,
  kInvalidRoute,
  kTooManyRoutes,
  kRouteConflict,
  kTooManyFailures,  // refused: the address failed too often (bad_token) in its window
  kTooManyBridges,   // refused: the tunnel holds MAX_BRIDGES_PER_TUNNEL bridges here
  kError,
  kCount,
};
// opentunnel_bridge_detaches_total{reason}
enum class DetachOutcome : uint8_t {
  kClientClose,
  kDrop,
  kIdleRetire,
  kDrain,
  kDelete,
  kServerClose,
  kReset,
  kRevoked,  // its origin's derived credential is no longer listed (docs/pools-choice.md)
  kCount,
};

[[nodiscard]] std::string_view visitorOutcomeName(VisitorOutcome outcome);
[[nodiscard]] std::string_view attachOutcomeName(AttachOutcome outcome);
[[nodiscard]] std::string_view detachOutcomeName(DetachOutcome outcome);
[[nodiscard]] std::string_view forwardFailureName(ForwardFailure failure);

class RelayMetrics {
 public:
  explicit RelayMetrics(metrics::Metrics& registry);

  metrics::Metrics& registry;

  prometheus::Gauge& bridgesAttached;  // opentunnel_bridges_attached
  prometheus::Counter* attaches[static_cast<size_t>(AttachOutcome::kCount)];
  prometheus::Counter* detaches[static_cast<size_t>(DetachOutcome::kCount)];
  prometheus::Counter& backpressureStall;     // opentunnel_bridge_backpressure_total{event="stall"}
  prometheus::Counter& backpressureReset;     // {event="reset"}
  prometheus::Gauge& visitorConnectionsOpen;  // opentunnel_visitor_connections_open
  prometheus::Counter* visitors[static_cast<size_t>(VisitorOutcome::kCount)];
  prometheus::Counter& visitorBytesIn;       // opentunnel_visitor_bytes_total{direction="in"}
  prometheus::Counter& visitorBytesOut;      // {direction="out"}
  prometheus::Histogram& visitorDuration;    // opentunnel_visitor_connection_duration_seconds
  prometheus::Counter& apiHandshakeOk;       // opentunnel_api_tls_handshakes_total{result="ok"}
  prometheus::Counter& apiHandshakeFailed;   // {result="failed"}
  prometheus::Counter& apiHandshakeTimeout;  // {result="timeout"}
  prometheus::Counter& apiSessionFull;       // opentunnel_api_tls_sessions_total{handshake="full"}
  prometheus::Counter& apiSessionResumed;    // {handshake="resumed"}: from a session ticket
  prometheus::Counter& shedHandshakes;   // opentunnel_connections_shed_total{reason="handshakes"}
  prometheus::Counter& shedConnections;  // {reason="connections"}
  prometheus::Counter& shedSourceHandshakes;      // {reason="source_handshakes"} (ours)
  prometheus::Counter& shedSourceApiConnections;  // {reason="source_api_connections"} (ours)
  prometheus::Counter& shedDrainingBridges;       // {reason="draining_bridges"} (ours)
  prometheus::Counter& acceptEmfile;              // opentunnel_accept_errors_total{error="emfile"}
  prometheus::Counter& acceptOther;               // {error="other"}
  prometheus::Gauge& bufferedBytes;               // opentunnel_relay_buffered_bytes (ours)
  prometheus::Counter& controlSessionsTotal;      // opentunnel_control_sessions_total (ours)
  prometheus::Gauge& controlConnected;            // opentunnel_control_connected (ours, 0/1)
  // opentunnel_tunnel_record_fetches_total{upgrade} (ours): bridge upgrades whose tunnel record
  // was not cached, by whether each sent a FetchTunnel ("fetched") or waited for the one in
  // flight ("joined").
  prometheus::Counter& recordFetchesSent;
  prometheus::Counter& recordFetchesJoined;
  prometheus::Counter& apiProxyFailures;  // opentunnel_api_proxy_failures_total (ours)
  // opentunnel_relay_peer_backlog_total{event}: peers whose reading was paused because they left
  // our answers unread past the high mark ("paused"), and peers reset past the hard limit
  // ("reset").
  prometheus::Counter& peerBacklogPaused;
  prometheus::Counter& peerBacklogReset;
  // opentunnel_bridge_fragment_limit_total: bridges closed (1009) for a message in too many frames.
  prometheus::Counter& bridgeFragmentLimit;
  // io_uring (relayd/io_ring.h): opentunnel_relay_ring_total{event="receive|send|out_of_buffers"}
  // (ours): reads that came through an idle bridge's armed receive, pings sent in a tick's
  // batch, receives that ended for want of a buffer; opentunnel_relay_ring_armed: receives armed.
  prometheus::Counter& ringReceives;
  prometheus::Counter& ringSends;
  prometheus::Counter& ringOutOfBuffers;
  prometheus::Gauge& ringArmed;
  // opentunnel_relay_tls_handshake_steps_total (ours): API TLS handshake steps run on the
  // handshake workers (relayd/handshake_workers.h).
  prometheus::Counter& handshakeSteps;
  // Set at scrape time (relay_gauges.h): opentunnel_certificates_expiring, and
  // opentunnel_loop_handles (ours: libuv handles active on the loop, in place of the reference's
  // Tokio task count).
  prometheus::Gauge& certificatesExpiring;
  prometheus::Gauge& loopHandles;
  // opentunnel_bridge_tls_detach_total{result="detached|kept_tls12|kept_suite|kept_no_secrets|
  // kept_unproven"} (ours): whether a bridge's TLS dropped OpenSSL's state (tls_engine.h).
  std::array<prometheus::Counter*, 6> tlsDetaches{};

  // --- The region mesh's forwarding (docs/mesh.md "Forwarding in relayd"), in one block.
  prometheus::Counter& meshLookupHit;   // opentunnel_mesh_lookups_total{result="hit"}
  prometheus::Counter& meshLookupMiss;  // {result="miss"}: no other machine holds the route
  prometheus::Counter* forwardFailures[static_cast<size_t>(ForwardFailure::kCount)];
  // relayd's copy of the mesh table (docs/mesh.md "The control-session feed"):
  // opentunnel_mesh_table_updates_total{kind="snapshot|delta|gap"} and
  // opentunnel_mesh_table_routes, the (tunnel, route) pairs some peer holds in the copy.
  prometheus::Counter& meshTableSnapshots;
  prometheus::Counter& meshTableDeltas;
  prometheus::Counter& meshTableGaps;
  prometheus::Gauge& meshTableRoutes;

  void forwardFailed(ForwardFailure failure) {
    forwardFailures[static_cast<size_t>(failure)]->Increment();
  }
  void visitor(VisitorOutcome outcome) { visitors[static_cast<size_t>(outcome)]->Increment(); }
  void attach(AttachOutcome outcome) { attaches[static_cast<size_t>(outcome)]->Increment(); }
  void detach(DetachOutcome outcome) { detaches[static_cast<size_t>(outcome)]->Increment(); }
  void tlsDetach(tls::DetachResult result) {
    if (auto* counter = tlsDetaches[static_cast<size_t>(result)]; counter != nullptr)
      counter->Increment();
  }
};

}  // namespace ot::relayd
