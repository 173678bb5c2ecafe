// The `status` message otunnel sends after attach (docs/protocol.md 4.5, docs/pools-status.md).
#include <doctest/doctest.h>

#include <string>

#include "common/bridge_control.h"

using namespace ot::bridge;

namespace {

StatusReport twoProfiles() {
  StatusReport report;
  report.profiles.push_back({"tls443", 0, 4, 4, 0, ""});
  report.profiles.push_back(
      {"backup", 1, 2, 0, 7500, "connect to 127.0.20.9:1: connection refused"});
  return report;
}

ClientMessageError errorOf(const std::string& text) {
  CAPTURE(text);
  const auto parsed = parseAttachedClientMessage(text);
  REQUIRE_FALSE(parsed.ok());
  return parsed.error();
}

}  // namespace

TEST_CASE("bridge status: round trip and wire shape") {
  const StatusReport report = twoProfiles();
  const std::string text = serializeStatus(report);
  CHECK(text.rfind(R"({"type":"status","profiles":[{"name":"tls443","index":0,"links_wanted":4,)",
                   0) == 0);
  const auto parsed = parseAttachedClientMessage(text);
  REQUIRE(parsed.ok());
  CHECK(parsed.value() == report);
}

TEST_CASE("bridge status: unknown members ignored, absent counts are 0") {
  const auto parsed = parseAttachedClientMessage(
      R"({"type":"status","later":1,"profiles":[{"name":"a","links_up":2,"extra":"x"}]})");
  REQUIRE(parsed.ok());
  REQUIRE(parsed.value().profiles.size() == 1);
  CHECK(parsed.value().profiles[0].name == "a");
  CHECK(parsed.value().profiles[0].linksUp == 2);
  CHECK(parsed.value().profiles[0].linksWanted == 0);
  CHECK(parsed.value().profiles[0].nextTryMs == 0);
}

TEST_CASE("bridge status: what the relay ignores") {
  CHECK(errorOf("nope") == ClientMessageError::kNotJson);
  CHECK(errorOf("[]") == ClientMessageError::kNotObject);
  CHECK(errorOf(R"({"type":"hello"})") == ClientMessageError::kUnknownType);
  CHECK(errorOf(R"({"type":"attach","token":"t"})") == ClientMessageError::kUnknownType);
  CHECK(errorOf(R"({"type":"status"})") == ClientMessageError::kBadField);
  CHECK(errorOf(R"({"type":"status","profiles":{}})") == ClientMessageError::kBadField);
  CHECK(errorOf(R"({"type":"status","profiles":[{"name":"bad name"}]})") ==
        ClientMessageError::kBadField);
  CHECK(errorOf(R"({"type":"status","profiles":[{"index":8}]})") == ClientMessageError::kBadField);
  CHECK(errorOf(R"({"type":"status","profiles":[{"links_up":-1}]})") ==
        ClientMessageError::kBadField);
  CHECK(errorOf(R"({"type":"status","profiles":[{"links_up":1.5}]})") ==
        ClientMessageError::kBadField);
  CHECK(errorOf(R"({"type":"status","profiles":[{"last_error":5}]})") ==
        ClientMessageError::kBadField);
  CHECK(errorOf(R"({"type":"status","profiles":[{"last_error":")" + std::string(201, 'e') +
                R"("}]})") == ClientMessageError::kBadField);
  std::string nine = R"({"type":"status","profiles":[)";
  for (int i = 0; i < 9; ++i) nine += std::string(i == 0 ? "" : ",") + "{}";
  CHECK(errorOf(nine + "]}") == ClientMessageError::kBadField);
  // Too long: refused before it is parsed at all.
  CHECK(errorOf(R"({"type":"status","pad":")" + std::string(kMaxStatusMessageBytes, 'x') +
                R"(","profiles":[]})") == ClientMessageError::kTooLarge);
}

TEST_CASE("bridge status: the sender bounds what it sends") {
  StatusReport report;
  for (uint32_t i = 0; i < 12; ++i) {
    // The longest names; errors of two-byte characters, cut at a character boundary.
    std::string error;
    for (int j = 0; j < 150; ++j) error += "\xC3\xA9";
    report.profiles.push_back({std::string(kMaxNameLength, 'n'), i, 5000, 5000, 1ULL << 40, error});
  }
  const std::string text = serializeStatus(report);
  CHECK(text.size() <= kMaxStatusMessageBytes);
  const auto parsed = parseAttachedClientMessage(text);
  REQUIRE(parsed.ok());
  REQUIRE(parsed.value().profiles.size() == kMaxProfiles);
  const ProfileReport& first = parsed.value().profiles[0];
  CHECK(first.lastError.size() == kMaxStatusErrorLength);
  CHECK(first.linksWanted == 1024);
  CHECK(first.nextTryMs == 24ULL * 3600 * 1000);
  CHECK(parsed.value().profiles[7].index == 7);
}
