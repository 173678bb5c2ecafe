// What a machine does with a peer whose mesh link ended (docs/mesh.md "A controld restart drops no
// tunnel"): instead of dropping the peer's table entries at once it holds them and asks the peer's
// relayd whether its data plane is up. Per machine: linked -> held (asking) -> released (its new
// link's snapshot came) or dropped.
//
//   - hold(): the link ended. A question is due at once.
//   - An answer `serving` or `control_down` keeps the hold: the next good answer is needed within
//     MESH_DEAD_MS of it, the next question goes MESH_PING_MS after the last one was asked.
//   - Dropped: `draining`, a refused connection, a connection closed without an answer, a badly
//     signed answer; no good answer by the deadline (the first one: MESH_DEAD_MS after the last
//     frame the link brought, but at least MESH_PING_MS after the hold began); or MESH_HOLD_MS
//     after the hold began, whatever the answers.
//
// Pure: time is passed in; the asking (alive_asker.*) and the table are the caller's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ot::mesh {

// How one question ended.
enum class AliveCheckResult : uint8_t {
  kServing,      // its relayd's control session is up
  kControlDown,  // its relayd serves from its cache, its controld is away
  kDraining,     // its relayd is leaving
  kRefused,      // the connection could not be made
  kClosed,       // closed (or failed) before a whole answer line came
  kBadAnswer,    // an answer that does not verify (signature, addressing, time, syntax, length)
  kTimeout,      // no answer before the deadline
};
inline constexpr size_t kAliveCheckResults = 7;

// serving, control_down, draining, refused, closed, bad_answer, timeout
[[nodiscard]] std::string_view aliveCheckResultName(AliveCheckResult result);
[[nodiscard]] bool keepsHold(AliveCheckResult result);  // serving, control_down
// Whether a link that ended for `closeReason` (MeshLink's) is held: only a lost one (closed,
// read_error, write_error, dead, too_far_behind). One this node ended for a broken rule (a sequence
// gap, a bad frame, a table refusal) leaves entries that cannot be trusted: they are dropped.
[[nodiscard]] bool lostLink(std::string_view closeReason);

struct LivenessTimes {
  int64_t pingMs = 1'000;    // MESH_PING_MS: a held machine is asked this often
  int64_t deadMs = 5'000;    // MESH_DEAD_MS: a good answer is needed this often
  int64_t holdMs = 120'000;  // MESH_HOLD_MS: never held longer
};

class PeerLiveness {
 public:
  explicit PeerLiveness(LivenessTimes times) : times_(times) {}

  // The machine's link ended; its relayd is at `address` (the hello's). `lastHeardMs`: when the
  // link last brought a frame. A machine held already keeps its hold's start and deadline (a link
  // that came back and ended before its snapshot extends nothing), and takes the new address.
  void hold(const std::string& machine, const std::string& address, int64_t lastHeardMs,
            int64_t nowMs);
  // Its new link's snapshot replaced its entries: the hold ends. False when it was not held.
  bool release(const std::string& machine);
  // Dropped for another reason (the caller's): forgotten.
  void forget(const std::string& machine) { held_.erase(machine); }

  struct Ask {
    std::string machine;
    std::string address;
    int64_t timeoutMs = 0;  // until the answer deadline (or the hold's end), at least 1
  };
  // The questions due now: held machines with none in flight whose next question is due. Each is
  // marked in flight until answered().
  [[nodiscard]] std::vector<Ask> dueAsks(int64_t nowMs);

  enum class Verdict : uint8_t { kKeep, kDrop, kUnknown };
  // How the machine's question in flight ended. kDrop: the machine is forgotten, its entries are
  // to go. kUnknown: not held, or no question in flight (a late callback): nothing changes.
  [[nodiscard]] Verdict answered(const std::string& machine, AliveCheckResult result,
                                 int64_t nowMs);

  struct Expired {
    std::string machine;
    std::string_view reason;  // timeout, hold_expired
  };
  // The machines whose deadline or hold passed; they are forgotten (a question still in flight is
  // the caller's to cancel).
  [[nodiscard]] std::vector<Expired> expire(int64_t nowMs);

  [[nodiscard]] bool held(const std::string& machine) const { return held_.contains(machine); }
  [[nodiscard]] bool asking(const std::string& machine) const;
  [[nodiscard]] std::vector<std::string> heldMachines() const;  // sorted
  [[nodiscard]] size_t size() const { return held_.size(); }

 private:
  struct Held {
    std::string address;
    int64_t holdStartMs = 0;
    int64_t deadlineMs = 0;  // a good answer is needed by then
    int64_t nextAskMs = 0;
    int64_t askedAtMs = 0;
    bool asking = false;
  };

  [[nodiscard]] int64_t holdEndMs(const Held& held) const {
    return held.holdStartMs + times_.holdMs;
  }

  LivenessTimes times_;
  std::map<std::string, Held> held_;
};

}  // namespace ot::mesh
