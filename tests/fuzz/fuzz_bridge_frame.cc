// Bridge stream frames: whatever decodes must re-encode to the same bytes (an unknown reset
// reason reads as unspecified, so that byte is compared normalized), and its views must lie
// inside the input. The same input also drives a StreamCredit against a 64-bit model.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/bridge_frame.h"

using namespace ot::bridge;

namespace {

void check(bool condition) {
  if (!condition) __builtin_trap();
}

bool inside(const void* p, size_t n, std::span<const uint8_t> input) {
  const auto begin = reinterpret_cast<uintptr_t>(input.data());
  const auto at = reinterpret_cast<uintptr_t>(p);
  return n == 0 || (at >= begin && at + n <= begin + input.size());
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void fuzzDecode(std::span<const uint8_t> input) {
  const auto decoded = decodeFrame(input);
  if (!decoded.ok()) {
    check(decoded.error() != FrameError::kNone);
    return;
  }
  const Frame& frame = decoded.value();
  check(input.size() >= kFrameHeaderSize && input.size() <= kMaxMessageAfterAttach);
  check(frame.connId != 0);
  std::vector<uint8_t> expected(input.begin(), input.end());
  std::vector<uint8_t> again;
  switch (frame.kind) {
    case FrameKind::kOpen: {
      check(isValidRoute(frame.route) && isValidVisitorAddress(frame.visitorAddress));
      check(inside(frame.route.data(), frame.route.size(), input));
      check(inside(frame.visitorAddress.data(), frame.visitorAddress.size(), input));
      const auto encoded = encodeOpen(frame.connId, frame.route, frame.visitorAddress);
      check(encoded.has_value());
      if (encoded) again = *encoded;
      break;
    }
    case FrameKind::kData:
      check(!frame.payload.empty() && frame.payload.size() <= kMaxDataPayload);
      check(frame.payload.data() == input.data() + kFrameHeaderSize);
      again = encodeData(frame.connId, frame.payload);
      break;
    case FrameKind::kEnd:
      again = encodeEnd(frame.connId);
      break;
    case FrameKind::kReset:
      check(frame.text.size() <= kMaxResetTextLength);
      check(validUtf8Prefix(frame.text) == frame.text.size());
      check(inside(frame.text.data(), frame.text.size(), input));
      if (expected[kFrameHeaderSize] > static_cast<uint8_t>(ResetReason::kShuttingDown)) {
        expected[kFrameHeaderSize] = 0;
      }
      again = encodeReset(frame.connId, frame.reason, frame.text);
      break;
    case FrameKind::kCredit:
      check(frame.increment != 0);
      again = encodeCredit(frame.connId, frame.increment);
      break;
  }
  check(again == expected);
}

// Input: a 4-byte window, then 5-byte operations (low bit of the first byte: consume or grant).
void fuzzCredit(std::span<const uint8_t> input) {
  if (input.size() < 4) return;
  StreamCredit credit(be32(input.data()));
  uint64_t model = be32(input.data()) < kMaxCredit ? be32(input.data()) : kMaxCredit;
  check(credit.available() == model);
  for (size_t at = 4; at + 5 <= input.size(); at += 5) {
    const uint32_t amount = be32(input.data() + at + 1);
    if ((input[at] & 1U) == 0) {
      const bool fits = amount <= model;
      check(credit.consume(amount) == (fits ? CreditStatus::kOk : CreditStatus::kExceeded));
      if (fits) model -= amount;
    } else {
      const bool fits = model + amount <= kMaxCredit;
      check(credit.grant(amount) == (fits ? CreditStatus::kOk : CreditStatus::kOverflow));
      if (fits) model += amount;
    }
    check(credit.available() == model && model <= kMaxCredit);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  fuzzDecode(input);
  fuzzCredit(input);
  return 0;
}
