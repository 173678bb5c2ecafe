// The receiving side of one mesh link, after the handshake (docs/mesh.md, "Link frames"): the
// ordering rules of the frames a FrameReader decodes, and the clock of the dead-peer rule. Pure:
// time is passed in (the loop's milliseconds), nothing is sent or closed here.
//
// Rules: a hello first and only once, naming the machine that proved itself; then one snapshot
// (its parts numbered 0, 1, ... with one sequence, until the part marked last); then deltas whose
// sequence is exactly the previous one + 1 (the snapshot's sequence for the first). Events and
// pings may come any time after the hello. Any break of these is a LinkError: the caller closes the
// link, drops the peer's entries, and the next link starts over with a fresh hello and snapshot.
//
// Who calls it (once wired): the mesh link loop, one receiver per link, on the thread that owns the
// link: every frame from its FrameReader goes through receive(), and what comes back is applied to
// the bridge table (a whole snapshot replaces the machine's entries; deltas add or remove one) or
// acted on (events). isDead() is asked on the link's timer with MESH_DEAD_MS.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "controld/mesh/link_frames.h"

namespace ot::mesh {

enum class LinkErrorCode : uint8_t {
  kHelloNotFirst,       // a frame other than hello before it
  kHelloTwice,          // a second hello on one link
  kWrongMachine,        // the hello names another machine than the handshake proved
  kUnsupportedVersion,  // a hello of another format version
  kSnapshotOutOfOrder,  // a part out of turn, a second snapshot, a part of another sequence
  kDeltaBeforeSnapshot,
  kSequenceGap,       // a delta whose sequence is not the previous + 1
  kSnapshotTooLarge,  // a snapshot's parts together hold more than the receiver takes
};

// The most bridges one snapshot (all its parts together) may hold: 20 times the 50,000 bridges a
// machine is sized for. Each part is bounded by the frame limit; without this, a peer (one that
// knows the secret, but buggy) could send parts without end and grow the gathered snapshot.
inline constexpr size_t kMaxSnapshotBridges = 1'000'000;

struct LinkError {
  LinkErrorCode code = LinkErrorCode::kHelloNotFirst;
  std::string detail;

  friend bool operator==(const LinkError&, const LinkError&) = default;
};

[[nodiscard]] std::string_view linkErrorCodeName(LinkErrorCode code);

class LinkReceiver {
 public:
  // `peerMachine`: the ID the handshake proved. `nowMs`: when the link came up (the dead-peer clock
  // starts there).
  LinkReceiver(std::string peerMachine, int64_t nowMs,
               size_t maxSnapshotBridges = kMaxSnapshotBridges);

  // One decoded frame, received at `nowMs`. Answers what to apply:
  //   - the frame itself (hello, deltas, events, pings), with BridgeEntry::machine filled in;
  //   - for the snapshot, nothing (nullopt) until its last part, then one SnapshotPart frame with
  //     every part's bridges (machine filled in), part 0, last true, the first part's sentAtMs;
  //   - or the LinkError that ends the link (the receiver keeps answering it).
  [[nodiscard]] Result<std::optional<Frame>, LinkError> receive(Frame frame, int64_t nowMs);

  // No frame for `deadMs` (MESH_DEAD_MS) since the last one, or since the link came up.
  [[nodiscard]] bool isDead(int64_t nowMs, int64_t deadMs) const {
    return nowMs - lastFrameAtMs_ >= deadMs;
  }

  [[nodiscard]] const std::optional<Hello>& hello() const { return hello_; }
  [[nodiscard]] bool snapshotComplete() const { return state_ == State::kLive; }
  // The sequence of the last delta applied (the snapshot's until one is).
  [[nodiscard]] uint64_t sequence() const { return sequence_; }
  [[nodiscard]] uint64_t framesReceived() const { return framesReceived_; }
  [[nodiscard]] int64_t lastFrameAtMs() const { return lastFrameAtMs_; }

 private:
  enum class State : uint8_t { kAwaitHello, kAwaitSnapshot, kInSnapshot, kLive, kFailed };

  Result<std::optional<Frame>, LinkError> fail(LinkErrorCode code, std::string detail);
  Result<std::optional<Frame>, LinkError> onHello(Frame& frame);
  Result<std::optional<Frame>, LinkError> onSnapshotPart(Frame& frame);
  Result<std::optional<Frame>, LinkError> onDelta(Frame& frame, uint64_t sequence);

  std::string peerMachine_;
  State state_ = State::kAwaitHello;
  std::optional<Hello> hello_;
  std::optional<Frame> snapshot_;  // the parts so far, while kInSnapshot
  size_t maxSnapshotBridges_ = kMaxSnapshotBridges;
  uint64_t sequence_ = 0;
  uint64_t framesReceived_ = 0;
  int64_t lastFrameAtMs_;
  std::optional<LinkError> error_;
};

}  // namespace ot::mesh
