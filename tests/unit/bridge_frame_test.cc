#include "common/bridge_frame.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

namespace {

using namespace ot::bridge;

std::vector<uint8_t> bytes(std::initializer_list<int> values) {
  std::vector<uint8_t> out;
  for (const int v : values) out.push_back(static_cast<uint8_t>(v));
  return out;
}

std::vector<uint8_t> withText(std::vector<uint8_t> head, std::string_view text) {
  head.insert(head.end(), text.begin(), text.end());
  return head;
}

bool decodes(const std::vector<uint8_t>& message) {
  return decodeFrame(message).ok();
}

FrameError errorOf(const std::vector<uint8_t>& message) {
  const auto decoded = decodeFrame(message);
  REQUIRE_FALSE(decoded.ok());
  return decoded.error();
}

// An open frame for conn 7 with the given route and address bytes, lengths as given.
std::vector<uint8_t> rawOpen(std::string_view route, std::string_view address) {
  auto out = bytes({1, 0, 0, 0, 7, static_cast<int>(route.size())});
  out.insert(out.end(), route.begin(), route.end());
  out.push_back(static_cast<uint8_t>(address.size()));
  out.insert(out.end(), address.begin(), address.end());
  return out;
}

}  // namespace

TEST_CASE("bridge frame: the header is kind then a big-endian connection id") {
  const auto header = encodeFrameHeader(FrameKind::kData, 0x01020304);
  CHECK(std::vector<uint8_t>(header.begin(), header.end()) == bytes({2, 1, 2, 3, 4}));
  const auto high = encodeFrameHeader(FrameKind::kCredit, 0xFFFFFFFE);
  CHECK(std::vector<uint8_t>(high.begin(), high.end()) == bytes({5, 0xFF, 0xFF, 0xFF, 0xFE}));
}

TEST_CASE("bridge frame: open has exact bytes and decodes back") {
  const auto encoded = encodeOpen(1, "api", "203.0.113.7:51234");
  REQUIRE(encoded.has_value());
  const auto expected = withText(withText(bytes({1, 0, 0, 0, 1, 3}), "api"),
                                 std::string("\x11") + "203.0.113.7:51234");
  CHECK(*encoded == expected);

  const auto decoded = decodeFrame(*encoded);
  REQUIRE(decoded.ok());
  CHECK(decoded->kind == FrameKind::kOpen);
  CHECK(decoded->connId == 1);
  CHECK(decoded->route == "api");
  CHECK(decoded->visitorAddress == "203.0.113.7:51234");
  // Views point into the message, not into a copy.
  CHECK(decoded->route.data() == reinterpret_cast<const char*>(encoded->data() + 6));
}

TEST_CASE("bridge frame: open with the bare hostname, an unknown address, IPv6, longest fields") {
  const auto bare = encodeOpen(9, "", "");
  REQUIRE(bare.has_value());
  CHECK(*bare == bytes({1, 0, 0, 0, 9, 0, 0}));
  const auto bareDecoded = decodeFrame(*bare);
  REQUIRE(bareDecoded.ok());
  CHECK(bareDecoded->route.empty());
  CHECK(bareDecoded->visitorAddress.empty());

  const std::string longRoute(63, 'a');
  const std::string longV6 = "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535";
  const auto longest = encodeOpen(0xFFFFFFFF, longRoute, longV6);
  REQUIRE(longest.has_value());
  CHECK(longest->size() == 5 + 1 + 63 + 1 + longV6.size());
  const auto decoded = decodeFrame(*longest);
  REQUIRE(decoded.ok());
  CHECK(decoded->connId == 0xFFFFFFFF);
  CHECK(decoded->route == longRoute);
  CHECK(decoded->visitorAddress == longV6);

  const auto v6Message = rawOpen("x-1", "[2001:db8::1]:443");
  const auto v6 = decodeFrame(v6Message);
  REQUIRE(v6.ok());
  CHECK(v6->visitorAddress == "[2001:db8::1]:443");
}

TEST_CASE("bridge frame: encodeOpen refuses what the decoder would refuse") {
  CHECK_FALSE(encodeOpen(0, "api", "1.2.3.4:5").has_value());
  CHECK_FALSE(encodeOpen(1, "API", "1.2.3.4:5").has_value());
  CHECK_FALSE(encodeOpen(1, std::string(64, 'a'), "1.2.3.4:5").has_value());
  CHECK_FALSE(encodeOpen(1, "a.b", "1.2.3.4:5").has_value());
  CHECK_FALSE(encodeOpen(1, "api", "1.2.3.4").has_value());
  CHECK_FALSE(encodeOpen(1, "api", "localhost:80").has_value());
}

TEST_CASE("bridge frame: data has exact bytes, and header + payload equals the whole frame") {
  const auto payload = bytes({'h', 'i'});
  const auto encoded = encodeData(0x0A0B0C0D, payload);
  CHECK(encoded == bytes({2, 0x0A, 0x0B, 0x0C, 0x0D, 'h', 'i'}));
  const auto header = encodeFrameHeader(FrameKind::kData, 0x0A0B0C0D);
  std::vector<uint8_t> joined(header.begin(), header.end());
  joined.insert(joined.end(), payload.begin(), payload.end());
  CHECK(joined == encoded);

  const auto decoded = decodeFrame(encoded);
  REQUIRE(decoded.ok());
  CHECK(decoded->kind == FrameKind::kData);
  CHECK(decoded->connId == 0x0A0B0C0D);
  REQUIRE(decoded->payload.size() == 2);
  CHECK(decoded->payload.data() == encoded.data() + 5);
  CHECK(decoded->payload[1] == 'i');
}

TEST_CASE("bridge frame: data payload of 1 and of 32768 bytes, not 0 or 32769") {
  const auto oneMessage = bytes({2, 0, 0, 0, 1, 0});
  const auto one = decodeFrame(oneMessage);
  REQUIRE(one.ok());
  CHECK(one->payload.size() == 1);

  std::vector<uint8_t> largest = bytes({2, 0, 0, 0, 1});
  largest.resize(5 + kMaxDataPayload, 0xAB);
  const auto decoded = decodeFrame(largest);
  REQUIRE(decoded.ok());
  CHECK(decoded->payload.size() == kMaxDataPayload);
  CHECK(largest.size() == kMaxMessageAfterAttach);
  CHECK(encodeData(1, decoded->payload) == largest);

  CHECK(errorOf(bytes({2, 0, 0, 0, 1})) == FrameError::kEmptyData);
  largest.push_back(0);
  CHECK(errorOf(largest) == FrameError::kDataTooLarge);
}

TEST_CASE("bridge frame: end has exact bytes and no payload") {
  CHECK(encodeEnd(258) == bytes({3, 0, 0, 1, 2}));
  const auto decodedMessage = bytes({3, 0, 0, 1, 2});
  const auto decoded = decodeFrame(decodedMessage);
  REQUIRE(decoded.ok());
  CHECK(decoded->kind == FrameKind::kEnd);
  CHECK(decoded->connId == 258);
  CHECK(errorOf(bytes({3, 0, 0, 1, 2, 0})) == FrameError::kBadLength);
}

TEST_CASE("bridge frame: reset has exact bytes, a reason and optional text") {
  const auto encoded = encodeReset(1, ResetReason::kConnectFailed, "refused");
  CHECK(encoded == withText(bytes({4, 0, 0, 0, 1, 5}), "refused"));
  const auto decoded = decodeFrame(encoded);
  REQUIRE(decoded.ok());
  CHECK(decoded->kind == FrameKind::kReset);
  CHECK(decoded->reason == ResetReason::kConnectFailed);
  CHECK(decoded->text == "refused");

  CHECK(encodeReset(2, ResetReason::kShuttingDown) == bytes({4, 0, 0, 0, 2, 9}));
  const auto bareMessage = bytes({4, 0, 0, 0, 2, 9});
  const auto bare = decodeFrame(bareMessage);
  REQUIRE(bare.ok());
  CHECK(bare->reason == ResetReason::kShuttingDown);
  CHECK(bare->text.empty());
  CHECK(errorOf(bytes({4, 0, 0, 0, 2})) == FrameError::kBadLength);
}

TEST_CASE("bridge frame: every reset reason code decodes, unknown codes as unspecified") {
  for (int code = 0; code <= 9; ++code) {
    const auto decodedMessage = bytes({4, 0, 0, 0, 1, code});
    const auto decoded = decodeFrame(decodedMessage);
    REQUIRE(decoded.ok());
    CHECK(static_cast<int>(decoded->reason) == code);
    CHECK(resetReasonName(decoded->reason) != "");
  }
  for (const int code : {10, 42, 255}) {
    const auto decodedMessage = bytes({4, 0, 0, 0, 1, code});
    const auto decoded = decodeFrame(decodedMessage);
    REQUIRE(decoded.ok());
    CHECK(decoded->reason == ResetReason::kUnspecified);
  }
  CHECK(resetReasonName(ResetReason::kVisitorIoError) == "visitor_io_error");
  CHECK(resetReasonName(ResetReason::kClientIoError) == "client_io_error");
  CHECK(resetReasonName(ResetReason::kFlowControlViolation) == "flow_control_violation");
}

TEST_CASE("bridge frame: reset text is at most 123 bytes of UTF-8") {
  const std::string longest(123, 'x');
  const auto okMessage = withText(bytes({4, 0, 0, 0, 1, 1}), longest);
  const auto ok = decodeFrame(okMessage);
  REQUIRE(ok.ok());
  CHECK(ok->text.size() == 123);
  CHECK(errorOf(withText(bytes({4, 0, 0, 0, 1, 1}), longest + "x")) ==
        FrameError::kResetTextTooLong);
  CHECK(decodes(withText(bytes({4, 0, 0, 0, 1, 1}), "caf\xC3\xA9 \xF0\x9F\x98\x80")));
  for (const std::string_view bad : {"\xFF", "\xC0\x80", "\xED\xA0\x80", "\xE2\x82", "a\x80",
                                     "\xF4\x90\x80\x80", "\xF8\x88\x80\x80\x80"}) {
    CAPTURE(bad);
    CHECK(errorOf(withText(bytes({4, 0, 0, 0, 1, 1}), bad)) == FrameError::kBadResetText);
  }
}

TEST_CASE("bridge frame: encodeReset cuts text at a character boundary and before bad bytes") {
  // 122 ASCII bytes and a two-byte character make 124: the character goes whole.
  const std::string text = std::string(122, 'a') + "\xC3\xA9";
  const auto encoded = encodeReset(1, ResetReason::kUnspecified, text);
  CHECK(encoded.size() == 6 + 122);
  CHECK(decodeFrame(encoded).ok());
  const auto cut = encodeReset(1, ResetReason::kTooSlow, "ok\xFFnot this");
  CHECK(cut == withText(bytes({4, 0, 0, 0, 1, 6}), "ok"));
}

TEST_CASE("bridge frame: credit has exact bytes and a nonzero increment") {
  const auto encoded = encodeCredit(1, 65536);
  CHECK(encoded == bytes({5, 0, 0, 0, 1, 0, 1, 0, 0}));
  const auto decoded = decodeFrame(encoded);
  REQUIRE(decoded.ok());
  CHECK(decoded->kind == FrameKind::kCredit);
  CHECK(decoded->increment == 65536);
  const auto largestMessage = bytes({5, 0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF});
  const auto largest = decodeFrame(largestMessage);
  REQUIRE(largest.ok());
  CHECK(largest->increment == 0xFFFFFFFF);

  CHECK(errorOf(bytes({5, 0, 0, 0, 1, 0, 0, 0, 0})) == FrameError::kZeroCredit);
  CHECK(errorOf(bytes({5, 0, 0, 0, 1, 0, 0, 1})) == FrameError::kBadLength);
  CHECK(errorOf(bytes({5, 0, 0, 0, 1, 0, 0, 0, 1, 0})) == FrameError::kBadLength);
}

TEST_CASE("bridge frame: short messages, unknown kinds, connection id 0") {
  const auto full = bytes({3, 0, 0, 0, 1});
  for (size_t size = 0; size < 5; ++size) {
    CHECK(errorOf(std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(size))) ==
          FrameError::kTooShort);
  }
  for (const int kind : {0, 6, 7, 0x80, 0xFF}) {
    CHECK(errorOf(bytes({kind, 0, 0, 0, 1, 1})) == FrameError::kUnknownKind);
  }
  CHECK(errorOf(bytes({1, 0, 0, 0, 0, 0, 0})) == FrameError::kZeroConnId);
  CHECK(errorOf(bytes({2, 0, 0, 0, 0, 1})) == FrameError::kZeroConnId);
  CHECK(errorOf(bytes({3, 0, 0, 0, 0})) == FrameError::kZeroConnId);
  CHECK(errorOf(bytes({4, 0, 0, 0, 0, 0})) == FrameError::kZeroConnId);
  CHECK(errorOf(bytes({5, 0, 0, 0, 0, 0, 0, 0, 1})) == FrameError::kZeroConnId);
}

TEST_CASE("bridge frame: open layout errors") {
  CHECK(errorOf(bytes({1, 0, 0, 0, 7})) == FrameError::kBadLength);     // no route length
  CHECK(errorOf(bytes({1, 0, 0, 0, 7, 0})) == FrameError::kBadLength);  // no address length
  CHECK(errorOf(bytes({1, 0, 0, 0, 7, 3, 'a', 'b'})) == FrameError::kBadLength);  // cut route
  auto trailing = rawOpen("api", "1.2.3.4:5");
  trailing.push_back(0);
  CHECK(errorOf(trailing) == FrameError::kBadLength);
  auto cutAddress = rawOpen("api", "1.2.3.4:5");
  cutAddress.pop_back();
  CHECK(errorOf(cutAddress) == FrameError::kBadLength);

  // Every proper prefix of an open frame is refused.
  const auto open = rawOpen("api", "[::1]:8080");
  for (size_t size = 0; size < open.size(); ++size) {
    CHECK_FALSE(decodeFrame(std::span(open).first(size)).ok());
  }
}

TEST_CASE("bridge frame: open routes must be \"\" or one lowercase DNS label") {
  CHECK(errorOf(rawOpen(std::string(64, 'a'), "")) == FrameError::kRouteTooLong);
  CHECK(errorOf(bytes({1, 0, 0, 0, 7, 255})) == FrameError::kRouteTooLong);
  for (const std::string_view bad : std::initializer_list<std::string_view>{
           "API", "-api", "api-", "a.b", "a_b", "a b", std::string_view("a\0b", 3), "\xC3\xA9"}) {
    CAPTURE(bad);
    CHECK(errorOf(rawOpen(bad, "")) == FrameError::kBadRoute);
  }
  for (const std::string_view good : {"a", "0", "a-b", "xn--bcher-kva", "123abc"}) {
    CAPTURE(good);
    CHECK(decodes(rawOpen(good, "")));
  }
}

TEST_CASE("bridge frame: visitor addresses") {
  CHECK(errorOf(rawOpen("", std::string(65, '1'))) == FrameError::kAddressTooLong);
  for (const std::string_view bad : std::initializer_list<std::string_view>{
           "1.2.3.4",      "1.2.3.4:",
           "1.2.3.4:0",    "1.2.3.4:65536",
           "1.2.3.4:080",  "1.2.3.4:+80",
           "256.1.1.1:80", "1.2.3:80",
           "01.2.3.4:80",  ":80",
           "::1:80",       "[::1]80",
           "[::1]:",       "[::1]",
           "[1.2.3.4]:80", "[fe80::1%eth0]:80",
           "[::1]:80:80",  "1.2.3.4:80 ",
           "[::1]:8a",     "[]:80",
           "[:::]:80",     std::string_view("1.2.3.4\0:80", 11)}) {
    CAPTURE(bad);
    CHECK_FALSE(isValidVisitorAddress(bad));
    CHECK(errorOf(rawOpen("", bad)) == FrameError::kBadAddress);
  }
  for (const std::string_view good : {"0.0.0.0:1", "255.255.255.255:65535", "[::]:1",
                                      "[2001:DB8::a]:443", "[::ffff:1.2.3.4]:9"}) {
    CAPTURE(good);
    CHECK(isValidVisitorAddress(good));
    CHECK(decodes(rawOpen("", good)));
  }
}

TEST_CASE("bridge frame: validUtf8Prefix") {
  CHECK(validUtf8Prefix("") == 0);
  CHECK(validUtf8Prefix("abc") == 3);
  CHECK(validUtf8Prefix("\xE2\x82\xAC") == 3);      // U+20AC
  CHECK(validUtf8Prefix("\xF4\x8F\xBF\xBF") == 4);  // U+10FFFF
  CHECK(validUtf8Prefix("ab\xE2\x82") == 2);        // cut character
  CHECK(validUtf8Prefix("ab\xE0\x80\x80") == 2);    // overlong
  CHECK(validUtf8Prefix("\xED\x9F\xBF") == 3);      // U+D7FF, just below the surrogates
  CHECK(validUtf8Prefix("\xED\xA0\x80") == 0);      // a surrogate
  CHECK(validUtf8Prefix("\xF0\x8F\xBF\xBF") == 0);  // overlong 4-byte
  CHECK(validUtf8Prefix("\xE2\x28\xA1") == 0);      // bad continuation
}

TEST_CASE("bridge frame: the examples in docs/protocol.md") {
  const auto open = encodeOpen(1, "", "198.51.100.20:40000");
  REQUIRE(open.has_value());
  CHECK(*open == withText(bytes({1, 0, 0, 0, 1, 0, 0x13}), "198.51.100.20:40000"));
  const auto apiOpen = encodeOpen(1, "api", "203.0.113.7:51234");
  REQUIRE(apiOpen.has_value());
  CHECK(*apiOpen == withText(bytes({1, 0, 0, 0, 1, 3, 'a', 'p', 'i', 0x11}), "203.0.113.7:51234"));
  CHECK(encodeEnd(258) == bytes({0x03, 0x00, 0x00, 0x01, 0x02}));
  CHECK(encodeCredit(1, 65536) == bytes({0x05, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00}));
}

TEST_CASE("bridge frame: names") {
  CHECK(frameKindName(FrameKind::kOpen) == "open");
  CHECK(frameKindName(FrameKind::kCredit) == "credit");
  CHECK(frameErrorName(FrameError::kZeroCredit) == "zero_credit");
  CHECK(frameErrorName(FrameError::kBadAddress) == "bad_address");
}

TEST_CASE("stream credit: the exact window is allowed, one byte more is a violation") {
  StreamCredit credit(kDefaultWindow);
  CHECK(credit.available() == kDefaultWindow);
  CHECK(credit.consume(kDefaultWindow - 1) == CreditStatus::kOk);
  CHECK(credit.consume(2) == CreditStatus::kExceeded);
  CHECK(credit.available() == 1);  // a failed consume changes nothing
  CHECK(credit.consume(1) == CreditStatus::kOk);
  CHECK(credit.available() == 0);
  CHECK(credit.consume(0) == CreditStatus::kOk);
  CHECK(credit.consume(1) == CreditStatus::kExceeded);

  StreamCredit fresh(kMinWindow);
  CHECK(fresh.consume(kMinWindow + 1) == CreditStatus::kExceeded);
  CHECK(fresh.available() == kMinWindow);
  CHECK(fresh.consume(size_t{1} << 40) == CreditStatus::kExceeded);
}

TEST_CASE("stream credit: grants restore credit, up to 2^31-1 and not one byte beyond") {
  StreamCredit credit(kMinWindow);
  REQUIRE(credit.consume(kMinWindow) == CreditStatus::kOk);
  CHECK(credit.grant(32768) == CreditStatus::kOk);
  CHECK(credit.available() == 32768);
  CHECK(credit.grant(0) == CreditStatus::kOk);
  CHECK(credit.available() == 32768);
  CHECK(credit.grant(kMaxCredit - 32768) == CreditStatus::kOk);
  CHECK(credit.available() == kMaxCredit);
  CHECK(credit.grant(1) == CreditStatus::kOverflow);
  CHECK(credit.available() == kMaxCredit);

  StreamCredit empty(0);
  CHECK(empty.grant(0xFFFFFFFF) == CreditStatus::kOverflow);
  CHECK(empty.grant(0x80000000) == CreditStatus::kOverflow);
  CHECK(empty.grant(kMaxCredit) == CreditStatus::kOk);

  StreamCredit clamped(0xFFFFFFFF);
  CHECK(clamped.available() == kMaxCredit);
}

TEST_CASE("stream credit: sender and receiver ledgers stay equal") {
  // The sender sends whatever its credit allows; the receiver consumes the same bytes and
  // grants back in quarter-window batches, as docs/protocol.md recommends.
  StreamCredit sender(kMinWindow);
  StreamCredit receiver(kMinWindow);
  uint32_t consumedNotGranted = 0;
  uint64_t delivered = 0;
  for (int round = 0; round < 1000; ++round) {
    const auto chunk = static_cast<uint32_t>(std::min<size_t>(
        {sender.available(), kMaxDataPayload, static_cast<size_t>(round * 7919 % 32768 + 1)}));
    if (chunk > 0) {
      REQUIRE(sender.consume(chunk) == CreditStatus::kOk);
      REQUIRE(receiver.consume(chunk) == CreditStatus::kOk);
      delivered += chunk;
      consumedNotGranted += chunk;
    }
    if (consumedNotGranted >= kMinWindow / 4) {
      REQUIRE(receiver.grant(consumedNotGranted) == CreditStatus::kOk);
      REQUIRE(sender.grant(consumedNotGranted) == CreditStatus::kOk);
      consumedNotGranted = 0;
    }
    REQUIRE(sender.available() == receiver.available());
    REQUIRE(sender.available() + consumedNotGranted == kMinWindow);
  }
  CHECK(delivered > kMinWindow);
}
