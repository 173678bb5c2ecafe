// The mesh link's frames: the JSON codec, the incremental reader and the snapshot splitter
// (controld/mesh/link_frames.h, frame_reader.h, snapshot_split.h; docs/mesh.md "Link frames").
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "controld/mesh/frame_reader.h"
#include "controld/mesh/link_frames.h"
#include "controld/mesh/snapshot_split.h"

using namespace ot::mesh;

namespace {

BridgeEntry entry(std::string tunnel, std::string bridge, std::vector<std::string> routes,
                  int64_t attachedAt = 1700000000000) {
  BridgeEntry e;
  e.tunnelId = std::move(tunnel);
  e.bridgeId = std::move(bridge);
  e.routes = std::move(routes);
  e.attachedAtMs = attachedAt;
  return e;
}

Frame frame(FrameBody body, int64_t sentAt = 1764650000123) {
  return Frame{sentAt, std::move(body)};
}

Hello sampleHello() {
  Hello hello;
  hello.machine = "m-0123456789ab";
  hello.region = "iad";
  hello.address = "127.0.0.11:9000";
  hello.epoch = 18446744073709551615ULL;  // the whole u64 range survives
  hello.startedAtMs = 1764650000000;
  hello.draining = true;
  return hello;
}

// One of every frame type, in the order a link carries them.
std::vector<Frame> everyFrame() {
  SnapshotPart first{
      41, 0, false, {entry("alpha", "b-1", {""}), entry("beta", "b\"2", {"api", ""})}};
  SnapshotPart second{41, 1, true, {entry("gamma", "b-3", {"x"}, 0)}};
  return {
      frame(sampleHello()),
      frame(first),
      frame(second),
      frame(Attached{42, entry("delta", "b-4", {"", "www"})}),
      frame(Detached{43, "alpha", "b-1"}),
      frame(TunnelCreated{"epsilon"}),
      frame(CertificateChanged{"alpha", CertificateChange::kBound}),
      frame(CertificateChanged{"alpha", CertificateChange::kReady}),
      frame(CertificateChanged{"alpha", CertificateChange::kRenewed}),
      frame(TunnelDeleted{"beta"}),
      frame(JobEnqueued{}),
      frame(Ping{}, -5),
      frame(Leaving{}),
      frame(TunnelReset{"zeta"}),
  };
}

std::string concat(const std::vector<Frame>& frames) {
  std::string bytes;
  for (const auto& f : frames) bytes += encodeFrame(f);
  return bytes;
}

std::vector<Frame> readAll(FrameReader& reader) {
  std::vector<Frame> out;
  while (true) {
    auto result = reader.next();
    REQUIRE(result.status != ReadStatus::kError);
    if (result.status == ReadStatus::kNeedMore) return out;
    out.push_back(std::move(result.frame));
  }
}

std::string prefixed(std::string_view body) {
  std::string out;
  const auto n = static_cast<uint32_t>(body.size());
  out.push_back(static_cast<char>(n >> 24));
  out.push_back(static_cast<char>((n >> 16) & 0xFF));
  out.push_back(static_cast<char>((n >> 8) & 0xFF));
  out.push_back(static_cast<char>(n & 0xFF));
  out.append(body);
  return out;
}

// A body of exactly `size` bytes: `object` with an unknown "pad" field filling the rest.
std::string padded(nlohmann::json object, size_t size) {
  object["pad"] = "";
  const size_t base = object.dump().size();
  REQUIRE(base <= size);
  object["pad"] = std::string(size - base, 'x');
  std::string body = object.dump();
  REQUIRE(body.size() == size);
  return body;
}

FrameError decodeError(std::string_view body) {
  auto decoded = decodeFrameBody(body);
  REQUIRE_FALSE(decoded.ok());
  return decoded.error();
}

}  // namespace

TEST_CASE("mesh frames: every type survives encode then decode") {
  for (const auto& original : everyFrame()) {
    CAPTURE(frameTypeName(original.body));
    const std::string bytes = encodeFrame(original);
    REQUIRE(bytes.size() > 4);
    const auto body = encodeFrameBody(original);
    CHECK(bytes.substr(4) == body);
    auto decoded = decodeFrameBody(body);
    REQUIRE(decoded.ok());
    REQUIRE(decoded.value().has_value());
    CHECK(*decoded.value() == original);
  }
}

TEST_CASE("mesh frames: the wire format is the one docs/mesh.md writes") {
  const auto decode = [](std::string_view body) {
    auto decoded = decodeFrameBody(body);
    REQUIRE(decoded.ok());
    REQUIRE(decoded.value().has_value());
    return *decoded.value();
  };
  CHECK(decode(R"({"type":"hello","sent_at":7,"version":1,"machine":"m-1","region":"iad",
      "address":"[fdaa::3]:9000","epoch":99,"started_at":5,"draining":false})") ==
        frame(Hello{1, "m-1", "iad", "[fdaa::3]:9000", 99, 5, false}, 7));
  CHECK(decode(R"({"type":"snapshot","sent_at":7,"sequence":3,"part":0,"last":true,
      "bridges":[{"tunnel":"abc","bridge":"b1","routes":["","api"],"attached_at":10}]})") ==
        frame(SnapshotPart{3, 0, true, {entry("abc", "b1", {"", "api"}, 10)}}, 7));
  CHECK(decode(R"({"type":"snapshot_part","sent_at":7,"sequence":3,"part":1,"last":false,
      "bridges":[]})") == frame(SnapshotPart{3, 1, false, {}}, 7));
  CHECK(decode(R"({"type":"attached","sent_at":7,"sequence":4,"tunnel":"abc","bridge":"b2",
      "routes":[""],"attached_at":11})") == frame(Attached{4, entry("abc", "b2", {""}, 11)}, 7));
  CHECK(decode(R"({"type":"detached","sent_at":7,"sequence":5,"tunnel":"abc","bridge":"b2"})") ==
        frame(Detached{5, "abc", "b2"}, 7));
  CHECK(decode(R"({"type":"tunnel_created","sent_at":7,"tunnel":"abc"})") ==
        frame(TunnelCreated{"abc"}, 7));
  CHECK(decode(R"({"type":"certificate_changed","sent_at":7,"tunnel":"abc","change":"ready"})") ==
        frame(CertificateChanged{"abc", CertificateChange::kReady}, 7));
  CHECK(decode(R"({"type":"tunnel_deleted","sent_at":7,"tunnel":"abc"})") ==
        frame(TunnelDeleted{"abc"}, 7));
  CHECK(decode(R"({"type":"leaving","sent_at":7})") == frame(Leaving{}, 7));
  CHECK(decode(R"({"type":"job_enqueued","sent_at":7})") == frame(JobEnqueued{}, 7));
  CHECK(decode(R"({"type":"ping","sent_at":7})") == frame(Ping{}, 7));
  CHECK(decode(R"({"type":"tunnel_reset","sent_at":7,"tunnel":"abc"})") ==
        frame(TunnelReset{"abc"}, 7));
  CHECK(encodeFrameBody(frame(TunnelReset{"abc"}, 7)) ==
        R"({"sent_at":7,"tunnel":"abc","type":"tunnel_reset"})");
  // A certificate change this build does not know still marks the record stale.
  CHECK(decode(R"({"type":"certificate_changed","sent_at":7,"tunnel":"abc","change":"revoked"})") ==
        frame(CertificateChanged{"abc", CertificateChange::kOther}, 7));
}

TEST_CASE("mesh frames: unknown fields are ignored, unknown types skipped, null is absent") {
  auto withExtra =
      decodeFrameBody(R"({"type":"ping","sent_at":1,"future":{"deep":[1,2,3]},"zone":"x"})");
  REQUIRE(withExtra.ok());
  CHECK(*withExtra.value() == frame(Ping{}, 1));

  auto unknown = decodeFrameBody(R"({"type":"gossip","anything":true})");
  REQUIRE(unknown.ok());
  CHECK_FALSE(unknown.value().has_value());

  // In a stream the unknown frame is skipped and counted; the frames around it come through.
  FrameReader reader;
  reader.feed(encodeFrame(frame(sampleHello())) + prefixed(R"({"type":"gossip"})") +
              encodeFrame(frame(Ping{})));
  const auto frames = readAll(reader);
  REQUIRE(frames.size() == 2);
  CHECK(std::holds_alternative<Hello>(frames[0].body));
  CHECK(std::holds_alternative<Ping>(frames[1].body));
  CHECK(reader.ignoredFrames() == 1);
  CHECK(reader.framesRead() == 2);

  CHECK(decodeError(R"({"type":"ping","sent_at":null})").code == FrameErrorCode::kBadField);
}

TEST_CASE("mesh frames: refused bodies say why") {
  CHECK(decodeError("").code == FrameErrorCode::kBadJson);
  CHECK(decodeError("{\"type\":").code == FrameErrorCode::kBadJson);
  CHECK(decodeError("[1,2]").code == FrameErrorCode::kBadJson);
  CHECK(decodeError(R"({"sent_at":1})").code == FrameErrorCode::kMissingType);
  CHECK(decodeError(R"({"type":5,"sent_at":1})").code == FrameErrorCode::kMissingType);

  // Every required field of every type, removed, then ill-typed.
  for (const auto& original : everyFrame()) {
    const auto object = nlohmann::json::parse(encodeFrameBody(original));
    for (const auto& item : object.items()) {
      const std::string key = item.key();
      const auto& value = item.value();
      if (key == "type") continue;
      CAPTURE(object["type"]);
      CAPTURE(key);
      auto without = object;
      without.erase(key);
      const auto missing = decodeError(without.dump());
      CHECK(missing.code == FrameErrorCode::kBadField);
      CHECK(missing.detail.find(key) != std::string::npos);
      auto wrong = object;
      wrong[key] = value.is_string() ? nlohmann::json(12) : nlohmann::json("12");
      CHECK(decodeError(wrong.dump()).code == FrameErrorCode::kBadField);
    }
  }

  const auto bad = [](std::string_view body) { return decodeError(body).code; };
  const auto kBadField = FrameErrorCode::kBadField;
  CHECK(bad(R"({"type":"ping","sent_at":1.0})") == kBadField);
  CHECK(bad(R"({"type":"tunnel_reset","sent_at":1,"tunnel":"Not-Label"})") == kBadField);
  CHECK(bad(R"({"type":"detached","sent_at":1,"sequence":-1,"tunnel":"a","bridge":"b"})") ==
        kBadField);
  CHECK(bad(R"({"type":"detached","sent_at":1,"sequence":1,"tunnel":"Not-Label","bridge":"b"})") ==
        kBadField);
  CHECK(bad(R"({"type":"detached","sent_at":1,"sequence":1,"tunnel":"a","bridge":""})") ==
        kBadField);
  const std::string attached = R"({"type":"attached","sent_at":1,"sequence":1,"tunnel":"a",)"
                               R"("bridge":"b","attached_at":1,"routes":)";
  CHECK(bad(attached + "[]}") == kBadField);
  CHECK(bad(attached + R"(["bad_route"]})") == kBadField);
  CHECK(bad(attached + R"([""],"attached_at":-1})") == kBadField);
  std::vector<std::string> tooMany(129, "r");
  CHECK(bad(attached + nlohmann::json(tooMany).dump() + "}") == kBadField);
  CHECK(bad(R"({"type":"hello","sent_at":7,"version":0,"machine":"m-1","region":"iad",
      "address":"a:1","epoch":99,"started_at":5,"draining":false})") == kBadField);
  CHECK(bad(R"({"type":"hello","sent_at":7,"version":1,"machine":"m 1","region":"iad",
      "address":"a:1","epoch":99,"started_at":5,"draining":false})") == kBadField);
  CHECK(bad(R"({"type":"snapshot","sent_at":7,"sequence":3,"part":1,"last":true,"bridges":[]})") ==
        kBadField);  // "snapshot" is part 0, later parts are snapshot_part
  CHECK(bad(R"({"type":"snapshot_part","sent_at":7,"sequence":3,"part":0,"last":true,
      "bridges":[]})") == kBadField);
  CHECK(bad(R"({"type":"snapshot","sent_at":7,"sequence":3,"part":0,"last":true,
      "bridges":[{"tunnel":"a","bridge":"b","routes":[""]}]})") == kBadField);
}

TEST_CASE("mesh frames: the reader answers the same frames however the bytes are cut") {
  const auto frames = everyFrame();
  const std::string bytes = concat(frames);

  FrameReader whole;
  whole.feed(bytes);
  CHECK(readAll(whole) == frames);
  CHECK(whole.bufferedBytes() == 0);

  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    CAPTURE(cut);
    FrameReader reader;
    reader.feed(std::string_view(bytes).substr(0, cut));
    auto got = readAll(reader);
    reader.feed(std::string_view(bytes).substr(cut));
    auto rest = readAll(reader);
    got.insert(got.end(), rest.begin(), rest.end());
    REQUIRE(got == frames);
  }

  FrameReader byteByByte;
  std::vector<Frame> got;
  for (char c : bytes) {
    byteByByte.feed(std::string_view(&c, 1));
    auto some = readAll(byteByByte);
    got.insert(got.end(), some.begin(), some.end());
  }
  CHECK(got == frames);
}

TEST_CASE("mesh frames: the hello may be 4 KiB, later frames 16 MiB, refused from the length") {
  nlohmann::json hello = nlohmann::json::parse(encodeFrameBody(frame(sampleHello())));
  nlohmann::json ping = nlohmann::json::parse(encodeFrameBody(frame(Ping{})));

  SUBCASE("at the bounds") {
    FrameReader reader;
    reader.feed(prefixed(padded(hello, kMaxHelloBytes)));
    reader.feed(prefixed(padded(ping, kMaxFrameBytes)));
    auto first = reader.next();
    REQUIRE(first.status == ReadStatus::kFrame);
    CHECK(std::get<Hello>(first.frame.body) == sampleHello());
    auto second = reader.next();
    REQUIRE(second.status == ReadStatus::kFrame);
    CHECK(std::holds_alternative<Ping>(second.frame.body));
  }
  SUBCASE("a hello one byte over, refused before its body arrives") {
    FrameReader reader;
    reader.feed(prefixed(padded(hello, kMaxHelloBytes + 1)).substr(0, 4));
    auto result = reader.next();
    REQUIRE(result.status == ReadStatus::kError);
    CHECK(result.error.code == FrameErrorCode::kOversized);
    reader.feed(encodeFrame(frame(Ping{})));  // the reader stays failed
    CHECK(reader.next().status == ReadStatus::kError);
  }
  SUBCASE("an unknown frame before the hello is held to the hello's bound") {
    FrameReader reader;
    reader.feed(prefixed(padded(nlohmann::json{{"type", "gossip"}}, kMaxHelloBytes)));
    reader.feed(prefixed(padded(nlohmann::json{{"type", "gossip"}}, kMaxHelloBytes + 1)));
    auto result = reader.next();
    REQUIRE(result.status == ReadStatus::kError);
    CHECK(result.error.code == FrameErrorCode::kOversized);
    CHECK(reader.ignoredFrames() == 1);
  }
  SUBCASE("a later frame one byte over 16 MiB") {
    FrameReader reader;
    reader.feed(encodeFrame(frame(sampleHello())));
    REQUIRE(reader.next().status == ReadStatus::kFrame);
    const auto n = static_cast<uint32_t>(kMaxFrameBytes + 1);
    const char length[4] = {static_cast<char>(n >> 24), static_cast<char>((n >> 16) & 0xFF),
                            static_cast<char>((n >> 8) & 0xFF), static_cast<char>(n & 0xFF)};
    reader.feed(std::string_view(length, 4));
    auto result = reader.next();
    REQUIRE(result.status == ReadStatus::kError);
    CHECK(result.error.code == FrameErrorCode::kOversized);
    CHECK(reader.bufferedBytes() == 0);
  }
  SUBCASE("a bad body ends the stream") {
    FrameReader reader;
    reader.feed(prefixed("{not json") + encodeFrame(frame(Ping{})));
    auto result = reader.next();
    REQUIRE(result.status == ReadStatus::kError);
    CHECK(result.error.code == FrameErrorCode::kBadJson);
    CHECK(reader.next().status == ReadStatus::kError);
  }
}

TEST_CASE("mesh frames: a snapshot goes out in parts of at most the part size of entries") {
  std::vector<BridgeEntry> bridges;
  for (int i = 0; i < 500; ++i) {
    bridges.push_back(entry("t" + std::to_string(i % 37), "bridge-" + std::to_string(i),
                            {"", "r" + std::to_string(i)}, 1000 + i));
  }
  const size_t maxPart = 2000;
  const auto frames = encodeSnapshot(bridges, 77, 123, maxPart);
  REQUIRE(frames.size() > 5);

  FrameReader reader(kMaxFrameBytes, kMaxFrameBytes);
  std::vector<BridgeEntry> back;
  for (size_t i = 0; i < frames.size(); ++i) {
    CAPTURE(i);
    // The entries' bytes: the "bridges" array without its brackets.
    const auto start = frames[i].find("\"bridges\":[") + 11;
    const auto entryBytes = frames[i].size() - 2 - start;  // the array's "]" and the object's "}"
    CHECK(entryBytes <= maxPart);
    reader.feed(frames[i]);
    auto result = reader.next();
    REQUIRE(result.status == ReadStatus::kFrame);
    CHECK(result.frame.sentAtMs == 123);
    CHECK(frameTypeName(result.frame.body) == (i == 0 ? "snapshot" : "snapshot_part"));
    const auto& part = std::get<SnapshotPart>(result.frame.body);
    CHECK(part.sequence == 77);
    CHECK(part.part == i);
    CHECK(part.last == (i + 1 == frames.size()));
    CHECK_FALSE(part.bridges.empty());
    if (i + 1 < frames.size()) {
      // Each part but the last is full: one more entry would have passed the bound.
      CHECK(entryBytes + 1 + encodeBridgeEntry(bridges[back.size() + part.bridges.size()]).size() >
            maxPart);
    }
    back.insert(back.end(), part.bridges.begin(), part.bridges.end());
  }
  CHECK(back == bridges);
}

TEST_CASE(
    "mesh frames: no bridges is one empty snapshot, and 20000 bridges go out in 4 MiB parts") {
  const auto empty = encodeSnapshot({}, 9, 1);
  REQUIRE(empty.size() == 1);
  auto decoded = decodeFrameBody(std::string_view(empty[0]).substr(4));
  REQUIRE(decoded.ok());
  CHECK(*decoded.value() == frame(SnapshotPart{9, 0, true, {}}, 1));

  // 20,000 bridges of 20 routes each: ~8 MiB of entries, so more than one part at the real bound.
  std::vector<BridgeEntry> bridges;
  std::vector<std::string> routes;
  for (int r = 0; r < 20; ++r) routes.push_back("route-number-" + std::to_string(r));
  for (int i = 0; i < 20000; ++i) {
    bridges.push_back(entry("tunnel" + std::to_string(i), "b" + std::to_string(i), routes));
  }
  const auto frames = encodeSnapshot(bridges, 1, 1);
  CHECK(frames.size() >= 2);
  for (const auto& f : frames) {
    CHECK(f.size() - 4 <= kMaxFrameBytes);
    const auto start = f.find("\"bridges\":[") + 11;
    CHECK(f.size() - 2 - start <= kMaxSnapshotPartBytes);
  }
}
