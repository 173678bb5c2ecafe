#include "common/websocket_message.h"

#include <algorithm>
#include <utility>

namespace ot::ws {

std::string_view ReadStep::closeReason() const {
  if (event != ReadEvent::kControl || opcode != Opcode::kClose || payload.size() <= 2) return {};
  return {reinterpret_cast<const char*>(payload.data()) + 2, payload.size() - 2};
}

ReadStep MessageReader::fail(Error error, size_t consumed) {
  error_ = error;
  // Give the memory back now: the connection is about to close anyway.
  message_ = {};
  control_ = {};
  ReadStep step;
  step.event = ReadEvent::kError;
  step.consumed = consumed;
  step.error = error;
  return step;
}

Error MessageReader::onHeader() {
  const FrameHeader& header = decoder_.header();
  if (isControl(header.opcode)) {
    control_.reserve(static_cast<size_t>(header.payloadLength));
    return Error::kNone;
  }
  if (header.opcode == Opcode::kContinuation) {
    if (!inMessage_) return Error::kUnexpectedContinuation;
    if (++messageFrames_ > kMaxMessageFragments) return Error::kTooManyFragments;
  } else {
    if (inMessage_) return Error::kExpectedContinuation;
    inMessage_ = true;
    delivered_ = false;
    messageOpcode_ = header.opcode;
    messageDelivery_ = delivery_;
    messageSize_ = 0;
    messageFrames_ = 1;
    utf8_.reset();
  }
  // Checked on the announced length, before any payload is read; the limit may have been lowered
  // below what this message already holds.
  if (messageSize_ > maxMessageSize_ || header.payloadLength > maxMessageSize_ - messageSize_) {
    return Error::kMessageTooBig;
  }
  messageSize_ += header.payloadLength;
  return Error::kNone;
}

// Whether the payload bytes now in the input are copied into message_ (unmasked on the way)
// rather than unmasked in place: data of a message delivered whole, unless kWholeView can hand
// the message over in place (its only frame lies whole in the input).
bool MessageReader::collects(size_t available) const {
  if (!decoder_.inPayload() || messageDelivery_ == Delivery::kStream) return false;
  const FrameHeader& header = decoder_.header();
  if (isControl(header.opcode)) return false;
  const bool wholeInInput = messageDelivery_ == Delivery::kWholeView && messageFrames_ == 1 &&
                            header.fin && decoder_.payloadDone() == 0 &&
                            header.payloadLength <= available;
  return !wholeInInput;
}

ReadStep MessageReader::next(std::span<uint8_t> input) {
  if (error_ != Error::kNone) return fail(error_, 0);
  size_t used = 0;
  // kWholeView: the message's one frame, unmasked in place (its end follows in this call).
  std::span<const uint8_t> inPlace;
  bool isInPlace = false;
  for (;;) {
    const std::span<uint8_t> rest = input.subspan(used);
    DecodeStep step;
    const bool collected = collects(rest.size());
    if (collected) {
      const auto take =
          static_cast<size_t>(std::min<uint64_t>(rest.size(), decoder_.payloadRemaining()));
      const size_t had = message_.size();
      message_.resize(had + take);
      step = decoder_.decodeInto(rest, std::span<uint8_t>(message_).subspan(had));
    } else {
      step = decoder_.decode(rest);
    }
    used += step.consumed;
    const FrameHeader& header = decoder_.header();
    switch (step.event) {
      case DecodeEvent::kNeedMore: {
        ReadStep out;
        out.consumed = used;
        return out;
      }
      case DecodeEvent::kError:
        return fail(step.error, used);
      case DecodeEvent::kHeader: {
        const Error error = onHeader();
        if (error != Error::kNone) return fail(error, used);
        continue;
      }
      case DecodeEvent::kPayload: {
        if (isControl(header.opcode)) {
          control_.insert(control_.end(), step.payload.begin(), step.payload.end());
          continue;
        }
        if (messageOpcode_ == Opcode::kText) {
          const size_t valid = utf8_.feed(step.payload);
          if (valid < step.payload.size()) {
            return fail(Error::kInvalidUtf8, used - (step.payload.size() - valid - 1));
          }
        }
        if (collected) continue;  // already in message_
        if (messageDelivery_ != Delivery::kStream) {
          isInPlace = true;  // the whole payload: handed over at the frame's end
          inPlace = step.payload;
          continue;
        }
        ReadStep out;
        out.event = ReadEvent::kData;
        out.consumed = used;
        out.opcode = messageOpcode_;
        out.messageBegin = !delivered_;
        out.chunk = step.payload;
        delivered_ = true;
        return out;
      }
      case DecodeEvent::kFrameEnd:
        break;
    }

    // A frame ended.
    if (isControl(header.opcode)) {
      ReadStep out;
      out.event = ReadEvent::kControl;
      out.consumed = used;
      out.opcode = header.opcode;
      out.payload = std::exchange(control_, {});
      if (header.opcode == Opcode::kClose) {
        const CloseBody body = parseCloseBody(out.payload);
        if (body.error != Error::kNone) return fail(body.error, used);
        out.closeCode = body.code;
      }
      return out;
    }
    if (!header.fin) continue;
    if (messageOpcode_ == Opcode::kText && !utf8_.complete()) {
      return fail(Error::kInvalidUtf8, used);
    }
    inMessage_ = false;
    ReadStep out;
    out.consumed = used;
    out.opcode = messageOpcode_;
    if (messageDelivery_ != Delivery::kStream) {
      out.event = ReadEvent::kMessage;
      if (isInPlace) {
        out.chunk = inPlace;
      } else {
        out.payload = std::exchange(message_, {});
      }
    } else {
      out.event = ReadEvent::kData;
      out.messageBegin = !delivered_;
      out.messageEnd = true;
    }
    return out;
  }
}

}  // namespace ot::ws
