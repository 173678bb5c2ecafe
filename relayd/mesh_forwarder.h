// The sending half of forwarding (docs/mesh.md "Forwarding in relayd"): a visitor whose route has
// no bridge on this machine goes to the machine the mesh's route table names, straight from relayd
// to that machine's relayd (never through controld).
//
// One try: connect to the holder's internal address from this machine's internal IP (the
// receiver checks the source), send the signed header (common/forward_header.h) and the buffered
// ClientHello, and wait up to kForwardAnswerTimeoutMs for the answer line: `1\n` -> the bytes are
// spliced both ways (forward_splice.h), counted forwarded_out; `0\n` (no bridge there), a failed
// connect, a timeout, a close or anything else -> one more try with the next holder, skipping the
// machine that failed; then the visitor is rejected as it would have been without the mesh.
// Counted: opentunnel_mesh_lookups_total{result} per visitor looked up,
// opentunnel_cluster_forward_failures_total{reason} per failed try.
//
// Loop thread only; nothing blocks.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/tcp_stream.h"
#include "relayd/mesh_route_table.h"
#include "relayd/relay_context.h"
#include "relayd/relay_metrics.h"
#include "relayd/source_counts.h"

namespace ot::relayd {

// How long a holder has to connect and answer: two tries fit in the visitor's own 10 s.
inline constexpr uint64_t kForwardAnswerTimeoutMs = 3'000;
inline constexpr int kForwardTries = 2;

struct MeshForwarderOptions {
  std::string machineId;        // this machine's (the header's sender)
  std::string secret;           // INTERNAL_TOKEN
  std::string internalAddress;  // INTERNAL_ADDRESS: forwards leave from its IP
  uint64_t answerTimeoutMs = kForwardAnswerTimeoutMs;
};

// "ip:port" / "[v6]:port" with a literal IP; `port` replaces the address's own when set.
[[nodiscard]] std::optional<sockaddr_storage> parseSocketAddress(
    std::string_view address, std::optional<uint16_t> port = std::nullopt);

class MeshForwarder {
 public:
  // Rejects a visitor no holder took, as the relay rejects it without the mesh (`outcome`).
  using GiveUp =
      std::function<void(TcpStream* visitor, VisitorOutcome outcome, const std::string& tunnelId)>;

  MeshForwarder(RelayContext& context, const MeshRouteTable& table, MeshForwarderOptions options,
                GiveUp giveUp);
  ~MeshForwarder();  // abandons tries in flight: their visitors and holder sockets are reset
  MeshForwarder(const MeshForwarder&) = delete;
  MeshForwarder& operator=(const MeshForwarder&) = delete;

  // A visitor (not being read, its ClientHello in `hello`) with no local bridge for (tunnel,
  // route). False when forwarding is off or no other machine holds the route: the caller rejects
  // it with `outcome` itself. True: the forwarder owns the visitor from here on.
  // `hello` and `sourceSlot` are taken only when it answers true.
  bool forward(TcpStream* visitor, const std::string& tunnelId, const std::string& route,
               std::vector<uint8_t>&& hello, SourceSlot&& sourceSlot, VisitorOutcome outcome);

  [[nodiscard]] bool enabled() const { return source_.has_value(); }
  [[nodiscard]] size_t triesInFlight() const { return attempts_.size(); }

  class Attempt;

 private:
  friend class Attempt;
  RelayContext& context_;
  const MeshRouteTable& table_;
  MeshForwarderOptions options_;
  GiveUp giveUp_;
  std::optional<sockaddr_storage> source_;  // INTERNAL_ADDRESS's IP, port 0
  std::unordered_set<Attempt*> attempts_;
};

}  // namespace ot::relayd
