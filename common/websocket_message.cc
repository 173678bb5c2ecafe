#include "common/websocket_message.h"

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

ReadStep MessageReader::next(std::span<uint8_t> input) {
  if (error_ != Error::kNone) return fail(error_, 0);
  size_t used = 0;
  for (;;) {
    const DecodeStep step = decoder_.decode(input.subspan(used));
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
        if (messageDelivery_ == Delivery::kWhole) {
          message_.insert(message_.end(), step.payload.begin(), step.payload.end());
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
    if (messageDelivery_ == Delivery::kWhole) {
      out.event = ReadEvent::kMessage;
      out.payload = std::exchange(message_, {});
    } else {
      out.event = ReadEvent::kData;
      out.messageBegin = !delivered_;
      out.messageEnd = true;
    }
    return out;
  }
}

}  // namespace ot::ws
