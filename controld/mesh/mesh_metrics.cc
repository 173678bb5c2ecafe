#include "controld/mesh/mesh_metrics.h"

#include <string>

namespace ot::mesh {
namespace {

constexpr std::array<std::string_view, 12> kFrameTypes = {"hello",
                                                          "snapshot",
                                                          "snapshot_part",
                                                          "attached",
                                                          "detached",
                                                          "tunnel_created",
                                                          "certificate_changed",
                                                          "tunnel_deleted",
                                                          "leaving",
                                                          "job_enqueued",
                                                          "ping",
                                                          "tunnel_reset"};

const char* const kFramesHelp = "mesh link frames by direction and type";
const char* const kBytesHelp =
    "mesh link bytes (length prefix included) by direction and frame type";
const char* const kErrorsHelp =
    "mesh links ended or refused, by reason (handshake proof errors, frame and link rule errors, "
    "timeouts, address checks)";
const char* const kPeersHelp = "other machines this one knows by address, by state";
const char* const kPropagationHelp =
    "from a peer announcing a change to this machine applying it, by the two machines' clocks";
const char* const kAliveChecksHelp =
    "liveness questions to the relayd of a machine whose mesh link ended, by result";
const char* const kDroppedHelp =
    "machines whose table entries were dropped after their mesh link ended, by reason";
const char* const kHandoffsHelp =
    "connections relayd handed over on MESH_HANDOFF_SOCKET, by result";

// sent_at is in whole milliseconds (the wire's), so on loopback a delay is 0, 1, 2 ... ms: a
// bucket per millisecond up to 5 ms and then close steps to 50 ms (the p99 bar) let a
// p50 / p99 read from the histogram land on the measured millisecond instead of being smeared
// over a 2.5-5 ms bucket; the coarse tail stays for slow links.
prometheus::Histogram::BucketBoundaries propagationBuckets() {
  return {0.0005, 0.0015, 0.0025, 0.0035, 0.0045, 0.0055, 0.0075, 0.01, 0.015, 0.02,
          0.03,   0.04,   0.05,   0.075,  0.1,    0.25,   0.5,    1,    2.5,   5};
}

}  // namespace

MeshMetrics::MeshMetrics(metrics::Metrics& metrics)
    : metrics_(metrics),
      tableBridgesFamily_(prometheus::BuildGauge()
                              .Name("opentunnel_mesh_table_bridges")
                              .Help("bridges in this machine's mesh view per machine holding them "
                                    "(itself included)")
                              .Register(*metrics.registry())),
      linksUp_(metrics.counter("opentunnel_mesh_links_total",
                               "mesh links that came up or went down", {{"event", "up"}})),
      linksDown_(metrics.counter("opentunnel_mesh_links_total",
                                 "mesh links that came up or went down", {{"event", "down"}})),
      peersUp_(metrics.gauge("opentunnel_mesh_peers", kPeersHelp, {{"state", "up"}})),
      peersConnecting_(
          metrics.gauge("opentunnel_mesh_peers", kPeersHelp, {{"state", "connecting"}})),
      peersUnreachable_(
          metrics.gauge("opentunnel_mesh_peers", kPeersHelp, {{"state", "unreachable"}})),
      propagationAttached_(metrics.histogram("opentunnel_mesh_propagation_seconds",
                                             kPropagationHelp, propagationBuckets(),
                                             {{"kind", "attached"}})),
      propagationDetached_(metrics.histogram("opentunnel_mesh_propagation_seconds",
                                             kPropagationHelp, propagationBuckets(),
                                             {{"kind", "detached"}})),
      propagationEvent_(metrics.histogram("opentunnel_mesh_propagation_seconds", kPropagationHelp,
                                          propagationBuckets(), {{"kind", "event"}})),
      snapshotBridges_(
          metrics.histogram("opentunnel_mesh_snapshot_bridges",
                            "bridges in each snapshot received when a link comes up",
                            {0, 10, 100, 1'000, 5'000, 10'000, 20'000, 50'000, 100'000})),
      snapshotSeconds_(
          metrics.histogram("opentunnel_mesh_snapshot_duration_seconds",
                            "from a peer taking its snapshot to this machine applying it, by the "
                            "two machines' clocks",
                            {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10})),
      tableEntries_(metrics.gauge("opentunnel_mesh_table_entries",
                                  "other machines' bridges in this machine's mesh table")),
      localBridges_(metrics.gauge("opentunnel_mesh_local_bridges",
                                  "this machine's bridges as announced to its peers")),
      heldMachines_(metrics.gauge("opentunnel_mesh_held_machines",
                                  "machines whose mesh link ended and whose table entries are "
                                  "held while their relayd answers")),
      linksDeferred_(metrics.counter("opentunnel_mesh_links_deferred_total",
                                     "mesh links handed over before this controld's first relayd "
                                     "snapshot, held back until it came")) {
  for (const auto type : kFrameTypes) {
    for (const char* direction : {"in", "out"}) {
      const prometheus::Labels labels{{"direction", direction}, {"type", std::string(type)}};
      metrics.counter("opentunnel_mesh_frames_total", kFramesHelp, labels);
      metrics.counter("opentunnel_mesh_bytes_total", kBytesHelp, labels);
    }
  }
  for (const char* result : {"mesh_link", "internal_http", "invalid", "refused"}) {
    metrics.counter("opentunnel_mesh_handoffs_total", kHandoffsHelp, {{"result", result}});
  }
  metrics.counter("opentunnel_mesh_link_errors_total", kErrorsHelp, {{"reason", "bad_proof"}});
  for (const char* result :
       {"serving", "control_down", "draining", "refused", "closed", "bad_answer", "timeout"}) {
    metrics.counter("opentunnel_mesh_alive_checks_total", kAliveChecksHelp, {{"result", result}});
  }
  for (const char* reason : {"draining", "refused", "closed", "bad_answer", "timeout",
                             "hold_expired", "leaving", "link_error"}) {
    metrics.counter("opentunnel_mesh_machines_dropped_total", kDroppedHelp, {{"reason", reason}});
  }
}

// Frame types outside the fixed set cannot occur (frameTypeName names FrameBody's alternatives);
// the lookup through the registry takes its lock, which is cheap next to a frame's JSON.
void MeshMetrics::frame(Direction direction, std::string_view type, size_t bytes) {
  const prometheus::Labels labels{{"direction", direction == Direction::kIn ? "in" : "out"},
                                  {"type", std::string(type)}};
  metrics_.counter("opentunnel_mesh_frames_total", kFramesHelp, labels).Increment();
  metrics_.counter("opentunnel_mesh_bytes_total", kBytesHelp, labels)
      .Increment(static_cast<double>(bytes));
}

void MeshMetrics::linkError(std::string_view reason) {
  metrics_
      .counter("opentunnel_mesh_link_errors_total", kErrorsHelp, {{"reason", std::string(reason)}})
      .Increment();
}

void MeshMetrics::peers(size_t up, size_t connecting, size_t unreachable) {
  peersUp_.Set(static_cast<double>(up));
  peersConnecting_.Set(static_cast<double>(connecting));
  peersUnreachable_.Set(static_cast<double>(unreachable));
}

void MeshMetrics::propagation(std::string_view kind, double seconds) {
  if (seconds < 0) seconds = 0;  // the peer's clock ahead of ours
  if (kind == "attached") {
    propagationAttached_.Observe(seconds);
  } else if (kind == "detached") {
    propagationDetached_.Observe(seconds);
  } else {
    propagationEvent_.Observe(seconds);
  }
}

void MeshMetrics::snapshot(size_t bridges, double seconds) {
  snapshotBridges_.Observe(static_cast<double>(bridges));
  snapshotSeconds_.Observe(seconds < 0 ? 0 : seconds);
}

void MeshMetrics::handoff(std::string_view result) {
  metrics_
      .counter("opentunnel_mesh_handoffs_total", kHandoffsHelp, {{"result", std::string(result)}})
      .Increment();
}

void MeshMetrics::aliveCheck(std::string_view result) {
  metrics_
      .counter("opentunnel_mesh_alive_checks_total", kAliveChecksHelp,
               {{"result", std::string(result)}})
      .Increment();
}

void MeshMetrics::machineDropped(std::string_view reason) {
  metrics_
      .counter("opentunnel_mesh_machines_dropped_total", kDroppedHelp,
               {{"reason", std::string(reason)}})
      .Increment();
}

void MeshMetrics::tableBridges(const std::vector<std::pair<std::string, size_t>>& byMachine) {
  std::map<std::string, prometheus::Gauge*, std::less<>> next;
  for (const auto& [machine, bridges] : byMachine) {
    auto found = tableBridges_.find(machine);
    prometheus::Gauge* gauge = found != tableBridges_.end()
                                   ? found->second
                                   : &tableBridgesFamily_.Add({{"machine", machine}});
    if (found != tableBridges_.end()) tableBridges_.erase(found);
    gauge->Set(static_cast<double>(bridges));
    next.emplace(machine, gauge);
  }
  for (auto& [machine, gauge] : tableBridges_) tableBridgesFamily_.Remove(gauge);
  tableBridges_ = std::move(next);
}

}  // namespace ot::mesh
