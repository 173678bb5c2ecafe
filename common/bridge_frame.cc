#include "common/bridge_frame.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cassert>
#include <cstring>

namespace ot::bridge {
namespace {

std::string_view asText(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

uint32_t readBe32(std::span<const uint8_t> b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

void appendBe32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

void appendText(std::vector<uint8_t>& out, std::string_view text) {
  out.insert(out.end(), text.begin(), text.end());
}

std::vector<uint8_t> startFrame(FrameKind kind, uint32_t connId, size_t payloadSize) {
  assert(connId != 0);
  std::vector<uint8_t> out;
  out.reserve(kFrameHeaderSize + payloadSize);
  // Byte by byte: inserting the header array trips a g++ 12 -Wstringop-overflow false positive.
  out.push_back(static_cast<uint8_t>(kind));
  appendBe32(out, connId);
  return out;
}

// Decimal 1..65535, no sign, no leading zero.
bool isValidPort(std::string_view port) {
  if (port.empty() || port.size() > 5 || port.front() == '0') return false;
  uint32_t value = 0;
  for (const char c : port) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  return value <= 65535;
}

ResetReason resetReasonFromByte(uint8_t code) {
  return code <= static_cast<uint8_t>(ResetReason::kShuttingDown) ? static_cast<ResetReason>(code)
                                                                  : ResetReason::kUnspecified;
}

Decoded<Frame, FrameError> decodeOpen(Frame frame, std::span<const uint8_t> body) {
  if (body.empty()) return FrameError::kBadLength;
  const size_t routeLength = body[0];
  if (routeLength > kMaxRouteLength) return FrameError::kRouteTooLong;
  if (body.size() < 2 + routeLength) return FrameError::kBadLength;
  frame.route = asText(body.subspan(1, routeLength));
  if (!isValidRoute(frame.route)) return FrameError::kBadRoute;
  const size_t addressLength = body[1 + routeLength];
  if (addressLength > kMaxVisitorAddressLength) return FrameError::kAddressTooLong;
  if (body.size() != 2 + routeLength + addressLength) return FrameError::kBadLength;
  frame.visitorAddress = asText(body.subspan(2 + routeLength));
  if (!isValidVisitorAddress(frame.visitorAddress)) return FrameError::kBadAddress;
  return frame;
}

Decoded<Frame, FrameError> decodeReset(Frame frame, std::span<const uint8_t> body) {
  if (body.empty()) return FrameError::kBadLength;
  frame.reason = resetReasonFromByte(body[0]);
  frame.text = asText(body.subspan(1));
  if (frame.text.size() > kMaxResetTextLength) return FrameError::kResetTextTooLong;
  if (validUtf8Prefix(frame.text) != frame.text.size()) return FrameError::kBadResetText;
  return frame;
}

}  // namespace

std::string_view frameKindName(FrameKind kind) {
  switch (kind) {
    case FrameKind::kOpen:
      return "open";
    case FrameKind::kData:
      return "data";
    case FrameKind::kEnd:
      return "end";
    case FrameKind::kReset:
      return "reset";
    case FrameKind::kCredit:
      return "credit";
  }
  return "unknown";
}

std::string_view resetReasonName(ResetReason reason) {
  switch (reason) {
    case ResetReason::kUnspecified:
      return "unspecified";
    case ResetReason::kVisitorIoError:
      return "visitor_io_error";
    case ResetReason::kClientIoError:
      return "client_io_error";
    case ResetReason::kIdleTimeout:
      return "idle_timeout";
    case ResetReason::kHalfCloseTimeout:
      return "half_close_timeout";
    case ResetReason::kConnectFailed:
      return "connect_failed";
    case ResetReason::kTooSlow:
      return "too_slow";
    case ResetReason::kFlowControlViolation:
      return "flow_control_violation";
    case ResetReason::kProtocolError:
      return "protocol_error";
    case ResetReason::kShuttingDown:
      return "shutting_down";
  }
  return "unspecified";
}

std::string_view frameErrorName(FrameError error) {
  switch (error) {
    case FrameError::kNone:
      return "none";
    case FrameError::kTooShort:
      return "too_short";
    case FrameError::kUnknownKind:
      return "unknown_kind";
    case FrameError::kZeroConnId:
      return "zero_conn_id";
    case FrameError::kBadLength:
      return "bad_length";
    case FrameError::kEmptyData:
      return "empty_data";
    case FrameError::kDataTooLarge:
      return "data_too_large";
    case FrameError::kZeroCredit:
      return "zero_credit";
    case FrameError::kRouteTooLong:
      return "route_too_long";
    case FrameError::kBadRoute:
      return "bad_route";
    case FrameError::kAddressTooLong:
      return "address_too_long";
    case FrameError::kBadAddress:
      return "bad_address";
    case FrameError::kResetTextTooLong:
      return "reset_text_too_long";
    case FrameError::kBadResetText:
      return "bad_reset_text";
  }
  return "unknown";
}

Decoded<Frame, FrameError> decodeFrame(std::span<const uint8_t> message) noexcept {
  if (message.size() < kFrameHeaderSize) return FrameError::kTooShort;
  const uint8_t kind = message[0];
  if (kind < static_cast<uint8_t>(FrameKind::kOpen) ||
      kind > static_cast<uint8_t>(FrameKind::kCredit)) {
    return FrameError::kUnknownKind;
  }
  Frame frame;
  frame.kind = static_cast<FrameKind>(kind);
  frame.connId = readBe32(message.subspan(1, 4));
  if (frame.connId == 0) return FrameError::kZeroConnId;
  const auto body = message.subspan(kFrameHeaderSize);
  switch (frame.kind) {
    case FrameKind::kOpen:
      return decodeOpen(frame, body);
    case FrameKind::kData:
      if (body.empty()) return FrameError::kEmptyData;
      if (body.size() > kMaxDataPayload) return FrameError::kDataTooLarge;
      frame.payload = body;
      return frame;
    case FrameKind::kEnd:
      if (!body.empty()) return FrameError::kBadLength;
      return frame;
    case FrameKind::kReset:
      return decodeReset(frame, body);
    case FrameKind::kCredit:
      if (body.size() != 4) return FrameError::kBadLength;
      frame.increment = readBe32(body);
      if (frame.increment == 0) return FrameError::kZeroCredit;
      return frame;
  }
  return FrameError::kUnknownKind;
}

std::array<uint8_t, kFrameHeaderSize> encodeFrameHeader(FrameKind kind, uint32_t connId) {
  return {static_cast<uint8_t>(kind), static_cast<uint8_t>(connId >> 24),
          static_cast<uint8_t>(connId >> 16), static_cast<uint8_t>(connId >> 8),
          static_cast<uint8_t>(connId)};
}

std::optional<std::vector<uint8_t>> encodeOpen(uint32_t connId, std::string_view route,
                                               std::string_view visitorAddress) {
  if (connId == 0 || !isValidRoute(route) || !isValidVisitorAddress(visitorAddress)) {
    return std::nullopt;
  }
  auto out = startFrame(FrameKind::kOpen, connId, 2 + route.size() + visitorAddress.size());
  out.push_back(static_cast<uint8_t>(route.size()));
  appendText(out, route);
  out.push_back(static_cast<uint8_t>(visitorAddress.size()));
  appendText(out, visitorAddress);
  return out;
}

std::vector<uint8_t> encodeData(uint32_t connId, std::span<const uint8_t> payload) {
  assert(!payload.empty() && payload.size() <= kMaxDataPayload);
  auto out = startFrame(FrameKind::kData, connId, payload.size());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::vector<uint8_t> encodeEnd(uint32_t connId) {
  return startFrame(FrameKind::kEnd, connId, 0);
}

std::vector<uint8_t> encodeReset(uint32_t connId, ResetReason reason, std::string_view text) {
  text = text.substr(0, validUtf8Prefix(text.substr(0, kMaxResetTextLength)));
  auto out = startFrame(FrameKind::kReset, connId, 1 + text.size());
  out.push_back(static_cast<uint8_t>(reason));
  appendText(out, text);
  return out;
}

std::vector<uint8_t> encodeCredit(uint32_t connId, uint32_t increment) {
  assert(increment != 0);
  auto out = startFrame(FrameKind::kCredit, connId, 4);
  appendBe32(out, increment);
  return out;
}

bool isDnsLabel(std::string_view label) {
  if (label.empty() || label.size() > kMaxRouteLength || label.front() == '-' ||
      label.back() == '-') {
    return false;
  }
  return std::all_of(label.begin(), label.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

bool isValidRoute(std::string_view route) {
  return route.empty() || isDnsLabel(route);
}

bool isValidVisitorAddress(std::string_view address) {
  if (address.empty()) return true;
  if (address.size() > kMaxVisitorAddressLength) return false;
  // The charset check also keeps NUL, '%' (zone ids) and spaces away from inet_pton.
  const bool charsetOk = std::all_of(address.begin(), address.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '.' ||
           c == ':' || c == '[' || c == ']';
  });
  if (!charsetOk) return false;
  std::string_view host;
  std::string_view port;
  int family = AF_INET;
  if (address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return false;
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
    family = AF_INET6;
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) return false;
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (!isValidPort(port)) return false;
  std::array<char, kMaxVisitorAddressLength + 1> hostText{};
  std::memcpy(hostText.data(), host.data(), host.size());
  std::array<uint8_t, 16> binary{};
  return inet_pton(family, hostText.data(), binary.data()) == 1;
}

size_t validUtf8Prefix(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<uint8_t>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint8_t low = 0x80;   // bounds for the second byte: they exclude overlongs, surrogates and
    uint8_t high = 0xBF;  // code points above U+10FFFF
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return i;
    }
    if (text.size() - i < length) return i;
    const auto second = static_cast<uint8_t>(text[i + 1]);
    if (second < low || second > high) return i;
    for (size_t k = 2; k < length; ++k) {
      const auto next = static_cast<uint8_t>(text[i + k]);
      if (next < 0x80 || next > 0xBF) return i;
    }
    i += length;
  }
  return i;
}

}  // namespace ot::bridge
