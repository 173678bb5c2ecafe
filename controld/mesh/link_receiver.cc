#include "controld/mesh/link_receiver.h"

#include <utility>
#include <variant>

namespace ot::mesh {

std::string_view linkErrorCodeName(LinkErrorCode code) {
  switch (code) {
    case LinkErrorCode::kHelloNotFirst:
      return "hello_not_first";
    case LinkErrorCode::kHelloTwice:
      return "hello_twice";
    case LinkErrorCode::kWrongMachine:
      return "wrong_machine";
    case LinkErrorCode::kUnsupportedVersion:
      return "unsupported_version";
    case LinkErrorCode::kSnapshotOutOfOrder:
      return "snapshot_out_of_order";
    case LinkErrorCode::kDeltaBeforeSnapshot:
      return "delta_before_snapshot";
    case LinkErrorCode::kSequenceGap:
      return "sequence_gap";
    case LinkErrorCode::kSnapshotTooLarge:
      return "snapshot_too_large";
  }
  return "unknown";
}

LinkReceiver::LinkReceiver(std::string peerMachine, int64_t nowMs, size_t maxSnapshotBridges)
    : peerMachine_(std::move(peerMachine)),
      maxSnapshotBridges_(maxSnapshotBridges),
      lastFrameAtMs_(nowMs) {}

Result<std::optional<Frame>, LinkError> LinkReceiver::fail(LinkErrorCode code, std::string detail) {
  state_ = State::kFailed;
  snapshot_.reset();
  error_ = LinkError{code, std::move(detail)};
  return *error_;
}

Result<std::optional<Frame>, LinkError> LinkReceiver::receive(Frame frame, int64_t nowMs) {
  if (state_ == State::kFailed) return *error_;
  ++framesReceived_;
  lastFrameAtMs_ = nowMs;
  if (std::holds_alternative<Hello>(frame.body)) return onHello(frame);
  if (state_ == State::kAwaitHello) {
    return fail(LinkErrorCode::kHelloNotFirst,
                std::string(frameTypeName(frame.body)) + " before the hello");
  }
  if (std::holds_alternative<SnapshotPart>(frame.body)) return onSnapshotPart(frame);
  if (const auto* attached = std::get_if<Attached>(&frame.body)) {
    return onDelta(frame, attached->sequence);
  }
  if (const auto* detached = std::get_if<Detached>(&frame.body)) {
    return onDelta(frame, detached->sequence);
  }
  if (state_ == State::kInSnapshot) {
    // The sender writes a snapshot's parts back to back; anything between them is out of turn.
    return fail(LinkErrorCode::kSnapshotOutOfOrder,
                std::string(frameTypeName(frame.body)) + " between snapshot parts");
  }
  return std::optional<Frame>(std::move(frame));  // events and pings
}

Result<std::optional<Frame>, LinkError> LinkReceiver::onHello(Frame& frame) {
  if (state_ != State::kAwaitHello) return fail(LinkErrorCode::kHelloTwice, "a second hello");
  const auto& hello = std::get<Hello>(frame.body);
  if (hello.version != kLinkFormatVersion) {
    return fail(LinkErrorCode::kUnsupportedVersion,
                "hello of format version " + std::to_string(hello.version));
  }
  if (hello.machine != peerMachine_) {
    return fail(LinkErrorCode::kWrongMachine,
                "hello names " + hello.machine + ", the handshake proved " + peerMachine_);
  }
  hello_ = hello;
  state_ = State::kAwaitSnapshot;
  return std::optional<Frame>(std::move(frame));
}

Result<std::optional<Frame>, LinkError> LinkReceiver::onSnapshotPart(Frame& frame) {
  auto& part = std::get<SnapshotPart>(frame.body);
  for (auto& bridge : part.bridges) bridge.machine = peerMachine_;
  if (state_ == State::kAwaitSnapshot) {
    if (part.part != 0) {
      return fail(LinkErrorCode::kSnapshotOutOfOrder,
                  "snapshot part " + std::to_string(part.part) + " first");
    }
    sequence_ = part.sequence;
    snapshot_ = std::move(frame);
    state_ = State::kInSnapshot;
  } else if (state_ == State::kInSnapshot) {
    auto& whole = std::get<SnapshotPart>(snapshot_->body);
    if (part.sequence != whole.sequence || part.part != whole.part + 1) {
      return fail(LinkErrorCode::kSnapshotOutOfOrder,
                  "snapshot part " + std::to_string(part.part) + " of sequence " +
                      std::to_string(part.sequence) + " after part " + std::to_string(whole.part) +
                      " of sequence " + std::to_string(whole.sequence));
    }
    whole.part = part.part;
    whole.last = part.last;
    whole.bridges.insert(whole.bridges.end(), std::make_move_iterator(part.bridges.begin()),
                         std::make_move_iterator(part.bridges.end()));
  } else {
    return fail(LinkErrorCode::kSnapshotOutOfOrder, "a second snapshot on one link");
  }
  auto& whole = std::get<SnapshotPart>(snapshot_->body);
  if (whole.bridges.size() > maxSnapshotBridges_) {
    return fail(LinkErrorCode::kSnapshotTooLarge,
                "a snapshot of more than " + std::to_string(maxSnapshotBridges_) + " bridges");
  }
  if (!whole.last) return std::optional<Frame>();
  whole.part = 0;
  state_ = State::kLive;
  std::optional<Frame> complete = std::move(snapshot_);
  snapshot_.reset();
  return complete;
}

Result<std::optional<Frame>, LinkError> LinkReceiver::onDelta(Frame& frame, uint64_t sequence) {
  if (state_ != State::kLive) {
    return fail(LinkErrorCode::kDeltaBeforeSnapshot,
                std::string(frameTypeName(frame.body)) + " before the snapshot ended");
  }
  if (sequence != sequence_ + 1) {
    return fail(LinkErrorCode::kSequenceGap, std::string(frameTypeName(frame.body)) +
                                                 " of sequence " + std::to_string(sequence) +
                                                 " after " + std::to_string(sequence_));
  }
  sequence_ = sequence;
  if (auto* attached = std::get_if<Attached>(&frame.body)) attached->bridge.machine = peerMachine_;
  return std::optional<Frame>(std::move(frame));
}

}  // namespace ot::mesh
