// WebSocket messages on top of FrameDecoder: fragments, control frames interleaved within a
// fragmented message, the per-message size limit (1009) and incremental UTF-8 checks on text
// (1007). The reader owns heap memory only while a message or control frame is being collected
// and hands it to the caller with the event, so an idle bridge holds none. One per connection,
// used only on that connection's loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/websocket_frame.h"

namespace ot::ws {

// How data messages reach the caller. Control frames are always delivered whole (<= 125 bytes).
//   kStream  chunks as they arrive, pointing into the caller's input (unmasked in place);
//            nothing is buffered, so a 32 KiB payload can go straight to a visitor socket.
//   kWhole   one message at a time, collected up to the size limit and handed over by value.
//   kWholeView  as kWhole, but a message that is one frame lying whole in the input is handed in
//            `chunk`, pointing into the input (unmasked in place), and not copied: relayd writes
//            a data frame's payload to its visitor straight from the decrypted record.
//            ReadStep::message() is the message either way.
// Payload that is collected (kWhole, kWholeView across inputs) is unmasked in the same pass that
// copies it out of the input.
enum class Delivery : uint8_t { kStream, kWhole, kWholeView };

// Frames one data message may take (its first frame and continuations). Each frame costs a header
// parse however small it is, so a peer sending endless empty continuations is refused with 1009
// (kTooManyFragments) instead of keeping the reader busy; real senders fragment in large pieces.
inline constexpr uint32_t kMaxMessageFragments = 1024;

//   kNeedMore  all input was consumed; call again with more bytes.
//   kData      (kStream) the next chunk of a text/binary message. messageBegin marks the first
//              event of a message, messageEnd the last one, whose chunk may be empty.
//   kMessage   (kWhole, kWholeView) a complete text/binary message in `payload`, or (kWholeView,
//              payload empty) in `chunk`: message() says which.
//   kControl   a complete ping, pong or close in `payload`; a close also sets closeCode.
//   kError     the stream is broken: close the connection with closeCodeFor(error). consumed
//              counts bytes up to and including the one that revealed the error. Final.
enum class ReadEvent : uint8_t { kNeedMore, kData, kMessage, kControl, kError };

struct ReadStep {
  ReadEvent event = ReadEvent::kNeedMore;
  size_t consumed = 0;
  Opcode opcode = Opcode::kContinuation;  // kText/kBinary for data, kClose/kPing/kPong control
  bool messageBegin = false;
  bool messageEnd = false;
  std::span<const uint8_t> chunk;  // kData, kMessage in place: valid while the caller's input is
  std::vector<uint8_t> payload;    // kMessage, kControl: owned by the caller from here on
  uint16_t closeCode = kCloseNoStatus;
  Error error = Error::kNone;

  // kMessage: the message, in `payload` or (kWholeView, in place) in `chunk`.
  [[nodiscard]] std::span<const uint8_t> message() const {
    return payload.empty() ? chunk : std::span<const uint8_t>(payload);
  }
  // The close reason (UTF-8, already validated); empty unless this is a close with a reason.
  [[nodiscard]] std::string_view closeReason() const;
};

class MessageReader {
 public:
  MessageReader(Role role, uint64_t maxMessageSize, Delivery delivery = Delivery::kWhole)
      : decoder_(role), maxMessageSize_(maxMessageSize), delivery_(delivery) {}

  // Bytes are consumed from the front of `input`, and payload is unmasked in place there.
  // Call again with input.subspan(step.consumed) until kNeedMore (or kError). Frames after a
  // close are still decoded: when to stop reading is the connection's decision.
  [[nodiscard]] ReadStep next(std::span<uint8_t> input);

  // Both take effect from the next frame header (the limit) or the next message (delivery), so
  // relayd can move from 64 KiB before attach to header + 32 KiB after it.
  void setMaxMessageSize(uint64_t bytes) { maxMessageSize_ = bytes; }
  void setDelivery(Delivery delivery) { delivery_ = delivery; }

  [[nodiscard]] uint64_t maxMessageSize() const { return maxMessageSize_; }
  // The frame now being read; with kStream its payloadLength tells how much of the message
  // is announced so far.
  [[nodiscard]] const FrameHeader& currentFrame() const { return decoder_.header(); }
  [[nodiscard]] bool inMessage() const { return inMessage_; }

 private:
  [[nodiscard]] Error onHeader();
  [[nodiscard]] bool collects(size_t available) const;
  [[nodiscard]] ReadStep fail(Error error, size_t consumed);

  FrameDecoder decoder_;
  uint64_t maxMessageSize_;
  uint64_t messageSize_ = 0;    // payload announced so far for the message in progress
  uint32_t messageFrames_ = 0;  // frames of the message in progress, up to kMaxMessageFragments
  // kWhole: the message in progress. It grows with the bytes received and is never reserved
  // from an announced length, so a peer cannot pin memory it has not sent.
  std::vector<uint8_t> message_;
  std::vector<uint8_t> control_;  // the control frame in progress, else empty
  Utf8Validator utf8_;
  Delivery delivery_;
  Delivery messageDelivery_ = Delivery::kWhole;  // delivery_ as it was when the message began
  Opcode messageOpcode_ = Opcode::kContinuation;
  bool inMessage_ = false;
  bool delivered_ = false;  // kStream: an event of the current message was already returned
  Error error_ = Error::kNone;
};

}  // namespace ot::ws
