// The asking side of the liveness question (docs/mesh.md "A controld restart drops no tunnel"), on
// the mesh node's loop. When a peer's link ends the node hands the machine to hold(); the asker
// keeps its table entries (the caller's) held while the machine's relayd answers `serving` or
// `control_down` (PeerLiveness decides), asks it again every MESH_PING_MS, and calls `drop` once
// the machine is gone (a failed question, `draining`, no good answer in time, MESH_HOLD_MS).
//
// One question is one exchange on the internal port (internal_exchange.h) from INTERNAL_ADDRESS's
// IP to the peer's internal address: the signed question (common/alive_probe.*), then one answer
// line (at most 1 KiB, its newline included) read and verified, all within the time PeerLiveness
// gives it. Never blocks the loop.
// Loop thread only.
#pragma once

#include <uv.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "common/alive_probe.h"
#include "common/log.h"
#include "controld/mesh/internal_exchange.h"
#include "controld/mesh/mesh_metrics.h"
#include "controld/mesh/peer_liveness.h"

namespace ot::mesh {

struct AliveAskerSetup {
  std::string secret;         // INTERNAL_TOKEN
  std::string selfId;         // MACHINE_ID
  sockaddr_storage source{};  // INTERNAL_ADDRESS's IP, port 0
  LivenessTimes times;
};

class AliveAsker {
 public:
  // `drop(machine, reason)`: the machine is gone; its entries go (reason: a result name, timeout,
  // hold_expired).
  using DropFn = std::function<void(const std::string& machine, std::string_view reason)>;

  AliveAsker(uv_loop_t* loop, MeshMetrics& metrics, const log::Logger& log, AliveAskerSetup setup,
             DropFn drop);
  ~AliveAsker();  // close()
  AliveAsker(const AliveAsker&) = delete;
  AliveAsker& operator=(const AliveAsker&) = delete;

  // The machine's link ended: hold its entries and ask its relayd at `address`.
  void hold(const std::string& machine, const std::string& address, int64_t lastHeardMs);
  // Its new link's snapshot arrived: the hold ends (its question, if any, is cancelled).
  void release(const std::string& machine);
  // Questions due, deadlines passed. On the node's tick.
  void tick();
  // Cancels every question; nothing is held after. Idempotent.
  void close();

  [[nodiscard]] bool held(const std::string& machine) const { return liveness_.held(machine); }
  [[nodiscard]] std::vector<std::string> heldMachines() const { return liveness_.heldMachines(); }

 private:
  void ask(const PeerLiveness::Ask& ask);
  void answered(const std::string& machine, AliveCheckResult result);
  void cancel(const std::string& machine);
  void dropped(const std::string& machine, std::string_view reason);
  [[nodiscard]] int64_t now() const { return static_cast<int64_t>(uv_now(loop_)); }

  uv_loop_t* loop_;
  MeshMetrics& metrics_;
  const log::Logger& log_;
  AliveAskerSetup setup_;
  DropFn drop_;
  PeerLiveness liveness_;
  InternalExchanges exchanges_;  // one per question: connect, the line, the answer line
  std::map<std::string, InternalExchange*> inFlight_;  // machine -> its question
  std::set<std::string> answeredOnce_;                 // held machines whose relayd answered
};

}  // namespace ot::mesh
