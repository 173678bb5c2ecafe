// The mesh node's metrics (docs/mesh.md "Metrics"), registered once on controld's registry when the
// node is built. No label names a tunnel or an address: directions, frame types, link events, peer
// states and error reasons are fixed sets; opentunnel_mesh_table_bridges alone is per machine (the
// spec's), a series per machine in the table, removed when the machine leaves it. Counters and
// gauges are atomic, so the node's loop thread updates them while /metrics renders.
#pragma once

#include <array>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/metrics.h"

namespace ot::mesh {

enum class Direction : uint8_t { kIn = 0, kOut = 1 };

class MeshMetrics {
 public:
  explicit MeshMetrics(metrics::Metrics& metrics);

  // One frame of `type` (frameTypeName) and its bytes on the wire (length prefix included).
  void frame(Direction direction, std::string_view type, size_t bytes);
  // opentunnel_mesh_link_errors_total{reason}: a handshake refusal (proofErrorName), a frame or
  // receiver error (frameErrorCodeName, linkErrorCodeName), or one of the node's own reasons.
  void linkError(std::string_view reason);
  void linkUp() { linksUp_.Increment(); }
  void linkDown() { linksDown_.Increment(); }
  void peers(size_t up, size_t connecting, size_t unreachable);
  void propagation(std::string_view kind, double seconds);  // attached, detached, event
  void snapshot(size_t bridges, double seconds);
  void tableEntries(size_t entries) { tableEntries_.Set(static_cast<double>(entries)); }
  void localBridges(size_t bridges) { localBridges_.Set(static_cast<double>(bridges)); }
  void handoff(std::string_view result);  // mesh_link, internal_http, invalid, refused
  // opentunnel_mesh_alive_checks_total{result}: a liveness question to a held machine's relayd
  // ended (aliveCheckResultName).
  void aliveCheck(std::string_view result);
  // opentunnel_mesh_held_machines: machines whose link ended and whose entries are held.
  void heldMachines(size_t machines) { heldMachines_.Set(static_cast<double>(machines)); }
  // opentunnel_mesh_machines_dropped_total{reason}: a machine's entries dropped after its link
  // ended (a failed question's result, timeout, hold_expired, leaving, link_error).
  void machineDropped(std::string_view reason);
  // opentunnel_mesh_links_deferred_total: links handed over before this life's first relayd
  // snapshot, held back until it came.
  void linkDeferred() { linksDeferred_.Increment(); }
  // opentunnel_mesh_table_bridges{machine}: bridges per machine holding them, this one included.
  void tableBridges(const std::vector<std::pair<std::string, size_t>>& byMachine);

 private:
  metrics::Metrics& metrics_;
  prometheus::Family<prometheus::Gauge>& tableBridgesFamily_;
  prometheus::Counter& linksUp_;
  prometheus::Counter& linksDown_;
  prometheus::Gauge& peersUp_;
  prometheus::Gauge& peersConnecting_;
  prometheus::Gauge& peersUnreachable_;
  prometheus::Histogram& propagationAttached_;
  prometheus::Histogram& propagationDetached_;
  prometheus::Histogram& propagationEvent_;
  prometheus::Histogram& snapshotBridges_;
  prometheus::Histogram& snapshotSeconds_;
  prometheus::Gauge& tableEntries_;
  prometheus::Gauge& localBridges_;
  prometheus::Gauge& heldMachines_;
  prometheus::Counter& linksDeferred_;
  std::map<std::string, prometheus::Gauge*, std::less<>> tableBridges_;
};

}  // namespace ot::mesh
