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
// A visitor whose route no machine holds yet, while some peer is linked, waits up to
// kMissWaitMs (rounded up to the relay's 250 ms timer tick) for the table to name one
// (tableChanged): a bridge attached on another machine is told `attached` before this machine's
// copy hears of it (the announcement crosses the link and controld's feed, ~15-30 ms on a busy
// box), and a visitor sent the moment the client saw `attached` must still reach it. At most
// kMaxMissWaiting visitors wait; past that, and with no linked peer, a miss is rejected at once.
// Counted: opentunnel_mesh_lookups_total{result} per visitor looked up (a waiting visitor counts
// once, hit or miss, when the wait ends), opentunnel_cluster_forward_failures_total{reason} per
// failed try.
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
#include "relayd/origin_choice.h"
#include "relayd/relay_context.h"
#include "relayd/relay_metrics.h"
#include "relayd/source_counts.h"

namespace ot::relayd {

// How long a holder has to connect and answer: two tries fit in the visitor's own 10 s.
inline constexpr uint64_t kForwardAnswerTimeoutMs = 3'000;
inline constexpr int kForwardTries = 2;
// How long a visitor with no holder anywhere waits for the table to name one: well above the
// propagation p99 measured on loopback (docs/capacity.md "The region mesh"), far inside the
// visitor's own 10 s.
inline constexpr uint64_t kMissWaitMs = 250;
inline constexpr size_t kMaxMissWaiting = 1'024;

struct MeshForwarderOptions {
  std::string machineId;        // this machine's (the header's sender)
  std::string secret;           // INTERNAL_TOKEN
  std::string internalAddress;  // INTERNAL_ADDRESS: forwards leave from its IP
  uint64_t answerTimeoutMs = kForwardAnswerTimeoutMs;
  uint64_t missWaitMs = kMissWaitMs;  // 0: a miss is rejected at once
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
  // it with `outcome` itself. True: the forwarder owns the visitor from here on (forwarded, or
  // waiting for a holder and then forwarded or rejected).
  // `hello` and `sourceSlot` are taken only when it answers true.
  // `visitorKey` (its address, IPv6 /64) chooses the origin among the mesh's holders, with the
  // function a local pick uses (docs/pools-mesh.md); `origin`, when set, was chosen already (the
  // caller's pick over local and remote origins). The target is a holder of that origin, and the
  // forward header names it so the target does not choose again.
  bool forward(TcpStream* visitor, const std::string& tunnelId, const std::string& route,
               std::vector<uint8_t>&& hello, SourceSlot&& sourceSlot, VisitorOutcome outcome,
               std::string_view visitorKey = {},
               std::optional<std::string_view> origin = std::nullopt);

  // Where a visitor goes: a holder of `origin` when set and held, else of the origin chosen for
  // `visitorKey` over the origins the mesh holds (tunnel, route) with; `skipMachine` is left out
  // (it answered 0). nullopt: no other machine holds the route.
  [[nodiscard]] std::optional<MeshForwardTarget> target(std::string_view tunnelId,
                                                        std::string_view route,
                                                        std::string_view visitorKey,
                                                        std::optional<std::string_view> origin,
                                                        std::string_view skipMachine = {}) const;

  // The table changed (a snapshot or delta applied): waiting visitors whose route now has a
  // holder are forwarded.
  void tableChanged();

  [[nodiscard]] bool enabled() const { return source_.has_value(); }
  [[nodiscard]] size_t triesInFlight() const { return attempts_.size(); }
  [[nodiscard]] size_t waiting() const { return waiting_; }

  class Attempt;

 private:
  friend class Attempt;
  RelayContext& context_;
  const MeshRouteTable& table_;
  MeshForwarderOptions options_;
  GiveUp giveUp_;
  std::optional<sockaddr_storage> source_;  // INTERNAL_ADDRESS's IP, port 0
  [[nodiscard]] bool anyPeerLinked() const;

  // target()'s scratch, so a forward's choice allocates nothing once they have room.
  mutable std::vector<std::string_view> origins_;
  mutable std::vector<OriginCandidate> candidates_;
  std::unordered_set<Attempt*> attempts_;
  size_t waiting_ = 0;  // attempts waiting for a holder
};

}  // namespace ot::relayd
