// ClientHelloReader: real captured hellos (tests/fixtures/client_hello, made by
// tests/tools/capture_client_hellos.py) fed whole, byte by byte, re-framed into small records and
// truncated; then hand-built hellos for every refusal the reader makes.
#include "common/client_hello.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

using Bytes = std::vector<uint8_t>;
using ot::ClientHelloError;
using ot::ClientHelloReader;
using ot::ClientHelloResult;
using ot::ClientHelloStatus;
using ot::SniStatus;

const char* const kFixtureNames[] = {"openssl_sni",         "openssl_alpn", "openssl_tls12",
                                     "openssl_multirecord", "curl_h2",      "chromium_pq"};

struct Fixture {
  std::string name;
  Bytes bytes;
  std::string sni;
  std::vector<std::string> alpn;
  size_t records = 0;
};

// Read with read() rather than istreambuf_iterator, which trips g++'s -Wnull-dereference at -O2.
std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  REQUIRE_MESSAGE(in.good(), "missing fixture file " << path);
  std::string out(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  REQUIRE(in.good());
  return out;
}

Fixture loadFixture(const std::string& name) {
  const std::string base = std::string(OT_FIXTURE_DIR) + "/client_hello/" + name;
  const std::string bin = readFile(base + ".bin");
  Fixture f;
  f.name = name;
  f.bytes.assign(bin.begin(), bin.end());
  const auto json = nlohmann::json::parse(readFile(base + ".json"));
  f.sni = json.at("sni").get<std::string>();
  f.alpn = json.at("alpn").get<std::vector<std::string>>();
  f.records = json.at("records").get<size_t>();
  REQUIRE(json.at("bytes").get<size_t>() == f.bytes.size());
  return f;
}

std::vector<Fixture> loadFixtures() {
  std::vector<Fixture> out;
  for (const char* name : kFixtureNames) out.push_back(loadFixture(name));
  return out;
}

Bytes ascii(std::string_view s) {
  return Bytes(s.begin(), s.end());
}

void put16(Bytes& out, size_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}
void put24(Bytes& out, size_t v) {
  out.push_back(static_cast<uint8_t>(v >> 16));
  put16(out, v & 0xffff);
}
void append(Bytes& out, const Bytes& more) {
  out.insert(out.end(), more.begin(), more.end());
}

// The handshake bytes a fixture carries, with the record layer stripped.
Bytes handshakeOf(const Bytes& wire) {
  Bytes out;
  size_t pos = 0;
  while (pos + 5 <= wire.size()) {
    const size_t length = (size_t{wire[pos + 3]} << 8) | wire[pos + 4];
    REQUIRE(pos + 5 + length <= wire.size());
    out.insert(out.end(), wire.begin() + static_cast<long>(pos + 5),
               wire.begin() + static_cast<long>(pos + 5 + length));
    pos += 5 + length;
  }
  REQUIRE(pos == wire.size());
  return out;
}

size_t recordCount(const Bytes& wire) {
  size_t count = 0;
  for (size_t pos = 0; pos + 5 <= wire.size(); ++count) {
    pos += 5 + ((size_t{wire[pos + 3]} << 8) | wire[pos + 4]);
  }
  return count;
}

// Re-frames handshake bytes into handshake records of at most `chunk` payload bytes. The first
// record says 0x0301, the rest 0x0303, as browsers do.
Bytes frame(const Bytes& handshake, size_t chunk, uint8_t type = 22) {
  Bytes out;
  for (size_t pos = 0; pos < handshake.size(); pos += chunk) {
    const size_t n = std::min(chunk, handshake.size() - pos);
    out.push_back(type);
    out.push_back(3);
    out.push_back(pos == 0 ? 1 : 3);
    put16(out, n);
    out.insert(out.end(), handshake.begin() + static_cast<long>(pos),
               handshake.begin() + static_cast<long>(pos + n));
  }
  return out;
}

Bytes extension(uint16_t type, const Bytes& data) {
  Bytes out;
  put16(out, type);
  put16(out, data.size());
  append(out, data);
  return out;
}

Bytes sniData(std::string_view name) {
  Bytes entry{0};
  put16(entry, name.size());
  append(entry, ascii(name));
  Bytes data;
  put16(data, entry.size());
  append(data, entry);
  return data;
}

Bytes alpnData(const std::vector<std::string>& names) {
  Bytes list;
  for (const auto& n : names) {
    list.push_back(static_cast<uint8_t>(n.size()));
    append(list, ascii(n));
  }
  Bytes data;
  put16(data, list.size());
  append(data, list);
  return data;
}

// A ClientHello body with the given extension block bytes (already concatenated); pass nullptr
// semantics via `withExtensions = false` for a pre-extension hello.
Bytes helloBody(const Bytes& extensions, bool withExtensions = true) {
  Bytes body{0x03, 0x03};
  body.insert(body.end(), 32, 0xab);  // random
  body.push_back(32);
  body.insert(body.end(), 32, 0xcd);  // legacy_session_id
  put16(body, 4);
  append(body, {0x13, 0x01, 0x13, 0x02});  // cipher suites
  append(body, {0x01, 0x00});              // compression: null
  if (withExtensions) {
    put16(body, extensions.size());
    append(body, extensions);
  }
  return body;
}

Bytes handshakeMessage(const Bytes& body, uint8_t type = 1) {
  Bytes out{type};
  put24(out, body.size());
  append(out, body);
  return out;
}

Bytes helloWithExtensions(const Bytes& extensions) {
  return frame(handshakeMessage(helloBody(extensions)), 16384);
}

Bytes helloWithSni(std::string_view name) {
  return helloWithExtensions(extension(0, sniData(name)));
}

ClientHelloResult feedAll(const Bytes& bytes, size_t max = ot::kClientHelloDefaultMaxBytes) {
  ClientHelloReader reader(max);
  return reader.feed(bytes);
}

ClientHelloError errorOf(const Bytes& bytes) {
  const auto result = feedAll(bytes);
  CHECK(result.status == ClientHelloStatus::kError);
  return result.error;
}

}  // namespace

TEST_CASE("client_hello: error names are stable") {
  CHECK(ot::clientHelloErrorName(ClientHelloError::kNone) == "none");
  CHECK(ot::clientHelloErrorName(ClientHelloError::kNotTls) == "not_tls");
  CHECK(ot::clientHelloErrorName(ClientHelloError::kBadRecord) == "bad_record");
  CHECK(ot::clientHelloErrorName(ClientHelloError::kNotClientHello) == "not_client_hello");
  CHECK(ot::clientHelloErrorName(ClientHelloError::kMalformed) == "malformed");
  CHECK(ot::clientHelloErrorName(ClientHelloError::kDuplicateExtension) == "duplicate_extension");
  CHECK(ot::clientHelloErrorName(ClientHelloError::kTooLarge) == "too_large");
}

TEST_CASE("client_hello: captured fixtures parse whole with the expected SNI and ALPN") {
  for (const auto& f : loadFixtures()) {
    CAPTURE(f.name);
    ClientHelloReader reader;
    const auto result = reader.feed(f.bytes);
    REQUIRE(result.status == ClientHelloStatus::kDone);
    CHECK(result.info.sni == SniStatus::kValid);
    CHECK(result.info.serverName == f.sni);
    CHECK(result.info.alpn == f.alpn);
    CHECK(result.info.legacyVersion == 0x0303);
    CHECK(result.info.helloEnd == f.bytes.size());
    CHECK(recordCount(f.bytes) == f.records);
    CHECK(Bytes(reader.buffered().begin(), reader.buffered().end()) == f.bytes);
    CHECK(reader.result() == result);
    const auto& versions = result.info.supportedVersions;
    const bool tls13 = std::find(versions.begin(), versions.end(), 0x0304) != versions.end();
    CHECK(tls13 == (f.name != "openssl_tls12"));
  }
}

TEST_CASE("client_hello: the fixtures cover what they claim") {
  const auto pq = loadFixture("chromium_pq");
  CHECK(pq.bytes.size() > 1500);  // X25519MLKEM768 key share
  CHECK(pq.sni == "route.tunnel.example.localhost");
  const auto multi = loadFixture("openssl_multirecord");
  CHECK(recordCount(multi.bytes) == 2);
  CHECK(multi.alpn.size() == 102);
  const auto tls12 = loadFixture("openssl_tls12");
  CHECK(feedAll(tls12.bytes).info.supportedVersions.empty());
  CHECK(loadFixture("openssl_sni").alpn.empty());
  CHECK(loadFixture("curl_h2").alpn == std::vector<std::string>{"h2", "http/1.1"});
}

TEST_CASE("client_hello: fixtures fed byte by byte need more until the last byte") {
  for (const auto& f : loadFixtures()) {
    CAPTURE(f.name);
    ClientHelloReader whole;
    const auto expected = whole.feed(f.bytes);
    ClientHelloReader reader;
    for (size_t i = 0; i + 1 < f.bytes.size(); ++i) {
      const auto r = reader.feed(std::span(f.bytes).subspan(i, 1));
      REQUIRE_MESSAGE(r.status == ClientHelloStatus::kNeedMore, "at byte " << i);
    }
    const auto result = reader.feed(std::span(f.bytes).last(1));
    CHECK(result == expected);
    CHECK(reader.buffered().size() == f.bytes.size());
    // Same work as one big feed: no rescanning from the start.
    CHECK(reader.bytesExamined() == whole.bytesExamined());
  }
}

TEST_CASE("client_hello: fixtures re-framed into records of 1..N bytes still parse") {
  const std::vector<size_t> larger = {500, 1000, 1500, 4096, 16383, 16384};
  for (const auto& f : loadFixtures()) {
    CAPTURE(f.name);
    const auto expected = feedAll(f.bytes).info;
    const Bytes handshake = handshakeOf(f.bytes);
    std::vector<size_t> sizes;
    for (size_t n = 1; n <= 300; ++n) sizes.push_back(n);
    sizes.insert(sizes.end(), larger.begin(), larger.end());
    for (const size_t chunk : sizes) {
      CAPTURE(chunk);
      const Bytes wire = frame(handshake, chunk);
      ClientHelloReader reader(1 << 20);  // 1-byte records of a 20 KB hello are ~120 KB
      const auto result = reader.feed(wire);
      REQUIRE(result.status == ClientHelloStatus::kDone);
      auto info = result.info;
      CHECK(info.helloEnd == wire.size());
      info.helloEnd = expected.helloEnd;
      CHECK(info == expected);
    }
  }
}

TEST_CASE("client_hello: every truncation of a fixture needs more") {
  for (const auto& f : loadFixtures()) {
    CAPTURE(f.name);
    // The 20 KB fixture gets a stride plus every prefix around its record boundary.
    const size_t stride = f.bytes.size() > 4096 ? 37 : 1;
    for (size_t n = 0; n < f.bytes.size(); ++n) {
      const bool nearBoundary = n + 8 >= 16389 && n <= 16389 + 8;
      if (n % stride != 0 && !nearBoundary && n + 8 < f.bytes.size()) continue;
      ClientHelloReader reader;
      const auto result = reader.feed(std::span(f.bytes).first(n));
      REQUIRE_MESSAGE(result.status == ClientHelloStatus::kNeedMore, "prefix " << n);
      CHECK(reader.buffered().size() == n);
    }
  }
}

TEST_CASE("client_hello: a message split inside its 4-byte header across records") {
  const Bytes handshake = handshakeMessage(helloBody(extension(0, sniData("split.example"))));
  for (size_t cut = 1; cut < 4; ++cut) {
    CAPTURE(cut);
    Bytes wire = frame(Bytes(handshake.begin(), handshake.begin() + static_cast<long>(cut)), 16384);
    append(wire, frame(Bytes(handshake.begin() + static_cast<long>(cut), handshake.end()), 16384));
    const auto result = feedAll(wire);
    REQUIRE(result.status == ClientHelloStatus::kDone);
    CHECK(result.info.serverName == "split.example");
    CHECK(result.info.helloEnd == wire.size());
  }
}

TEST_CASE("client_hello: work is linear in the bytes fed") {
  const auto f = loadFixture("chromium_pq");
  const Bytes handshake = handshakeOf(f.bytes);
  const size_t body = handshake.size() - 4;

  // One record, parsed in place: the header, then the body once.
  ClientHelloReader whole;
  REQUIRE(whole.feed(f.bytes).status == ClientHelloStatus::kDone);
  CHECK(whole.bytesExamined() == 5 + body);

  // 1-byte records fed one byte at a time: each header once, each byte gathered once, body once.
  const Bytes wire = frame(handshake, 1);
  ClientHelloReader reader;
  ClientHelloResult last;
  for (size_t i = 0; i < wire.size(); ++i) last = reader.feed(std::span(wire).subspan(i, 1));
  REQUIRE(last.status == ClientHelloStatus::kDone);
  CHECK(reader.bytesExamined() == 5 * handshake.size() + handshake.size() + body);
  CHECK(reader.bytesExamined() <= 2 * wire.size());
}

TEST_CASE("client_hello: the byte budget") {
  SUBCASE("a hello that ends exactly at the budget is done; one byte less is too large") {
    for (const auto& f : loadFixtures()) {
      CAPTURE(f.name);
      CHECK(feedAll(f.bytes, f.bytes.size()).status == ClientHelloStatus::kDone);
      CHECK(feedAll(f.bytes, f.bytes.size() - 1).error == ClientHelloError::kTooLarge);
    }
  }
  SUBCASE("a record reaching past the budget is refused on its header") {
    const auto f = loadFixture("curl_h2");
    ClientHelloReader reader(f.bytes.size() - 1);
    for (size_t i = 0; i < 4; ++i) {
      REQUIRE(reader.feed(std::span(f.bytes).subspan(i, 1)).status == ClientHelloStatus::kNeedMore);
    }
    CHECK(reader.feed(std::span(f.bytes).subspan(4, 1)).error == ClientHelloError::kTooLarge);
    CHECK(reader.buffered().size() == 5);
  }
  SUBCASE("a hello claiming more than 64 KiB is refused once its length is read") {
    Bytes wire{22, 3, 1, 0, 4, 1};
    put24(wire, 0x10000);
    CHECK(errorOf(wire) == ClientHelloError::kTooLarge);
  }
  SUBCASE("a 16 MB hello is refused on its handshake header, before its record completes") {
    // The record says 16384 bytes and only the handshake header of them arrived: waiting for the
    // rest would hold the connection until the hello timeout.
    Bytes wire{22, 3, 1, 0x40, 0x00, 1};
    put24(wire, 0xFFFFFF);
    ClientHelloReader reader;
    const auto first = reader.feed(std::span(wire).first(wire.size() - 1));
    CHECK(first.status == ClientHelloStatus::kNeedMore);
    CHECK(reader.feed(std::span(wire).last(1)).error == ClientHelloError::kTooLarge);
  }
  SUBCASE("a record that is not a ClientHello is refused on its first payload bytes") {
    Bytes wire{22, 3, 1, 0x40, 0x00, 2};
    put24(wire, 100);
    CHECK(errorOf(wire) == ClientHelloError::kNotClientHello);
  }
  SUBCASE("the claimed length is checked against the bytes its records need") {
    // 9 bytes so far, then 65507 more handshake bytes need 4 records: 9 + 65507 + 20 = 65536.
    Bytes fits{22, 3, 1, 0, 4, 1};
    put24(fits, 65507);
    CHECK(feedAll(fits).status == ClientHelloStatus::kNeedMore);
    Bytes over{22, 3, 1, 0, 4, 1};
    put24(over, 65508);
    CHECK(errorOf(over) == ClientHelloError::kTooLarge);
  }
  SUBCASE("many small records stop before the buffer passes the budget") {
    Bytes handshake{1};
    put24(handshake, 64000);
    handshake.resize(4 + 64000, 0x42);
    const Bytes wire = frame(handshake, 100);  // 64004 + 641 * 5 bytes: over the budget
    ClientHelloReader reader;
    ClientHelloResult result;
    for (size_t i = 0; i < wire.size() && result.status == ClientHelloStatus::kNeedMore; ++i) {
      result = reader.feed(std::span(wire).subspan(i, 1));
    }
    CHECK(result.error == ClientHelloError::kTooLarge);
    CHECK(reader.buffered().size() <= ot::kClientHelloDefaultMaxBytes);
    // The claimed length told the reader early: it did not wait for the records to run out.
    CHECK(reader.buffered().size() < ot::kClientHelloDefaultMaxBytes - 1000);
  }
  SUBCASE("the 20 KB fixture in 1-byte records does not fit the default budget") {
    const Bytes wire = frame(handshakeOf(loadFixture("openssl_multirecord").bytes), 1);
    CHECK(errorOf(wire) == ClientHelloError::kTooLarge);
  }
}

TEST_CASE("client_hello: not TLS is decided on the first byte") {
  const std::vector<Bytes> inputs = {
      ascii("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"),
      ascii("PROXY TCP4 192.0.2.1 192.0.2.2 56324 443\r\n"),
      {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x21, 0x11},
      ascii("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"),
      {0x80, 0x2e, 0x01, 0x00, 0x02},   // SSLv2-format hello
      {23, 3, 3, 0, 5, 1, 2, 3, 4, 5},  // application data first
      {21, 3, 3, 0, 2, 2, 40},          // alert first
  };
  for (const auto& input : inputs) {
    ClientHelloReader reader;
    const auto first = reader.feed(std::span(input).first(1));
    CHECK(first.status == ClientHelloStatus::kError);
    CHECK(first.error == ClientHelloError::kNotTls);
    // Decided: later bytes are neither parsed nor kept.
    CHECK(reader.feed(std::span(input).subspan(1)) == first);
    CHECK(reader.buffered().size() == 1);
    CHECK(errorOf(input) == ClientHelloError::kNotTls);
  }
  ClientHelloReader empty;
  CHECK(empty.feed({}).status == ClientHelloStatus::kNeedMore);
  const Bytes handshakeByte{22};
  CHECK(empty.feed(handshakeByte).status == ClientHelloStatus::kNeedMore);
}

TEST_CASE("client_hello: record headers") {
  const Bytes good = helloWithSni("a.example");
  auto withVersion = [&](uint8_t major, uint8_t minor) {
    Bytes wire = good;
    wire[1] = major;
    wire[2] = minor;
    return wire;
  };
  for (uint8_t minor = 0; minor <= 3; ++minor) {
    CAPTURE(minor);
    CHECK(feedAll(withVersion(3, minor)).status == ClientHelloStatus::kDone);
  }
  CHECK(errorOf(withVersion(3, 4)) == ClientHelloError::kBadRecord);
  CHECK(errorOf(withVersion(2, 0)) == ClientHelloError::kBadRecord);
  CHECK(errorOf(withVersion(4, 1)) == ClientHelloError::kBadRecord);

  SUBCASE("zero-length record, decided on its header") {
    const Bytes zero{22, 3, 1, 0, 0};
    CHECK(errorOf(zero) == ClientHelloError::kBadRecord);
  }
  SUBCASE("record longer than 2^14") {
    Bytes over{22, 3, 1};
    put16(over, 16385);
    CHECK(errorOf(over) == ClientHelloError::kBadRecord);
    Bytes max{22, 3, 1};
    put16(max, 16384);
    max.push_back(1);
    put24(max, 20000);
    CHECK(feedAll(max).status == ClientHelloStatus::kNeedMore);
  }
  SUBCASE("a non-handshake record in the middle of the hello") {
    const Bytes handshake = handshakeOf(good);
    for (const uint8_t type : {uint8_t{20}, uint8_t{21}, uint8_t{23}}) {
      Bytes wire = frame(Bytes(handshake.begin(), handshake.begin() + 10), 16384);
      append(wire, frame(Bytes(handshake.begin() + 10, handshake.end()), 16384, type));
      CHECK(errorOf(wire) == ClientHelloError::kBadRecord);
    }
  }
}

TEST_CASE("client_hello: the first handshake message must be client_hello") {
  CHECK(errorOf(frame(handshakeMessage(helloBody({}), 2), 16384)) ==
        ClientHelloError::kNotClientHello);
  // Decided from a 1-byte first record, before the message length is known.
  const Bytes oneByte{22, 3, 1, 0, 1, 2};
  CHECK(errorOf(oneByte) == ClientHelloError::kNotClientHello);
}

TEST_CASE("client_hello: malformed bodies") {
  const Bytes sni = extension(0, sniData("ok.example"));
  auto hello = [](const Bytes& body) { return frame(handshakeMessage(body), 16384); };
  auto malformed = [](const Bytes& wire) { return errorOf(wire) == ClientHelloError::kMalformed; };

  SUBCASE("fixed fields") {
    CHECK(malformed(hello({0x03, 0x03})));  // ends inside random
    Bytes longSession = helloBody(sni);
    longSession[34] = 33;  // session id length 33 > 32 (the bytes still nest)
    longSession.insert(longSession.begin() + 35, 0xcd);
    CHECK(malformed(hello(longSession)));
    Bytes oddSuites = helloBody(sni);
    oddSuites[68] = 3;  // cipher_suites length 3
    oddSuites.erase(oddSuites.begin() + 69);
    CHECK(malformed(hello(oddSuites)));
    Bytes noCompression = helloBody(sni);
    noCompression[73] = 0;
    noCompression.erase(noCompression.begin() + 74);
    CHECK(malformed(hello(noCompression)));
  }
  SUBCASE("extension block length does not match the rest of the message") {
    Bytes shortBlock = helloBody(sni);
    shortBlock[76] = static_cast<uint8_t>(shortBlock[76] - 1);  // one trailing byte
    CHECK(malformed(hello(shortBlock)));
    Bytes longBlock = helloBody(sni);
    longBlock[76] = static_cast<uint8_t>(longBlock[76] + 1);
    CHECK(malformed(hello(longBlock)));
    Bytes trailing = helloBody(sni);
    trailing.push_back(0);  // message longer than its extension block
    CHECK(malformed(hello(trailing)));
  }
  SUBCASE("an extension overrunning the block") {
    Bytes ext = extension(0x1234, {1, 2, 3});
    ext[3] = 4;  // claims 4 data bytes, 3 present
    CHECK(malformed(helloWithExtensions(ext)));
    const Bytes half{0x12};  // half an extension type
    CHECK(malformed(helloWithExtensions(half)));
  }
  SUBCASE("SNI lengths that lie") {
    Bytes listLong = sniData("ok.example");
    listLong[1] = static_cast<uint8_t>(listLong[1] + 1);
    CHECK(malformed(helloWithExtensions(extension(0, listLong))));
    Bytes listShort = sniData("ok.example");
    listShort[1] = static_cast<uint8_t>(listShort[1] - 1);
    CHECK(malformed(helloWithExtensions(extension(0, listShort))));
    Bytes nameLong = sniData("ok.example");
    nameLong[4] = static_cast<uint8_t>(nameLong[4] + 1);
    CHECK(malformed(helloWithExtensions(extension(0, nameLong))));
    Bytes extra = sniData("ok.example");
    extra.push_back(0);  // a byte after the list inside the extension
    CHECK(malformed(helloWithExtensions(extension(0, extra))));
  }
  SUBCASE("SNI contents OpenSSL/BoringSSL refuse") {
    const Bytes emptyList{0, 0};
    CHECK(malformed(helloWithExtensions(extension(0, emptyList))));
    CHECK(malformed(helloWithSni("")));
    CHECK(malformed(helloWithSni(std::string(256, 'a'))));
    CHECK(malformed(helloWithSni(std::string("a\0b.example", 11))));
    Bytes otherType = sniData("ok.example");
    otherType[2] = 1;
    CHECK(malformed(helloWithExtensions(extension(0, otherType))));
    // Two host names in one list.
    Bytes entry{0};
    put16(entry, 4);
    append(entry, ascii("a.bc"));
    Bytes two;
    put16(two, 2 * entry.size());
    append(two, entry);
    append(two, entry);
    CHECK(malformed(helloWithExtensions(extension(0, two))));
  }
  SUBCASE("ALPN") {
    CHECK(malformed(helloWithExtensions(extension(16, alpnData({"h2", ""})))));
    const Bytes emptyList{0, 0};
    CHECK(malformed(helloWithExtensions(extension(16, emptyList))));
    Bytes lies = alpnData({"h2", "http/1.1"});
    lies[1] = static_cast<uint8_t>(lies[1] + 1);
    CHECK(malformed(helloWithExtensions(extension(16, lies))));
    Bytes nameLies = alpnData({"h2"});
    nameLies[2] = 3;
    CHECK(malformed(helloWithExtensions(extension(16, nameLies))));
  }
  SUBCASE("supported_versions") {
    const Bytes odd{3, 0x03, 0x04, 0x03};
    CHECK(malformed(helloWithExtensions(extension(43, odd))));
    const Bytes empty{0};
    CHECK(malformed(helloWithExtensions(extension(43, empty))));
    const Bytes lies{4, 0x03, 0x04};
    CHECK(malformed(helloWithExtensions(extension(43, lies))));
  }
}

TEST_CASE("client_hello: duplicate extensions") {
  Bytes twoSni = extension(0, sniData("a.example"));
  append(twoSni, extension(0, sniData("b.example")));
  CHECK(errorOf(helloWithExtensions(twoSni)) == ClientHelloError::kDuplicateExtension);
  Bytes twoUnknown = extension(0x1234, {});
  append(twoUnknown, extension(0x0a0a, {}));
  append(twoUnknown, extension(0x1234, {9}));
  CHECK(errorOf(helloWithExtensions(twoUnknown)) == ClientHelloError::kDuplicateExtension);
  Bytes distinct = extension(0x0a0a, {});
  append(distinct, extension(0x1a1a, {0}));
  append(distinct, extension(0, sniData("c.example")));
  const auto ok = feedAll(helloWithExtensions(distinct));
  CHECK(ok.status == ClientHelloStatus::kDone);
  CHECK(ok.info.serverName == "c.example");
}

TEST_CASE("client_hello: server names") {
  auto sniOf = [](std::string_view name) { return feedAll(helloWithSni(name)).info; };
  auto info = sniOf("Demo.Example.LOCALHOST");
  CHECK(info.sni == SniStatus::kValid);
  CHECK(info.serverName == "demo.example.localhost");
  CHECK(sniOf("under_score-1.example").serverName == "under_score-1.example");
  CHECK(sniOf("xn--bcher-kva.example").serverName == "xn--bcher-kva.example");
  CHECK(sniOf("localhost").serverName == "localhost");
  CHECK(sniOf("1a.example.42x").sni == SniStatus::kValid);

  const std::string label63(63, 'a');
  CHECK(sniOf(label63 + ".example").sni == SniStatus::kValid);
  std::string name253 = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  REQUIRE(name253.size() == 253);
  CHECK(sniOf(name253).serverName == name253);

  // Well formed but not routable: reported as no valid SNI, not as an error.
  for (const std::string& bad : std::vector<std::string>{
           "127.0.0.1", "::1", "[::1]", "demo.example.", "a..b", ".a.b", "a.b..", "sp ace.example",
           "\xc3\xa9t\xc3\xa9.example", "a/b", "a*b.example", std::string(64, 'a') + ".example",
           name253 + "c", "10.1"}) {
    CAPTURE(bad);
    const auto r = feedAll(helloWithSni(bad));
    REQUIRE(r.status == ClientHelloStatus::kDone);
    CHECK(r.info.sni == SniStatus::kInvalid);
    CHECK(r.info.serverName.empty());
  }
  CHECK(ot::normalizeHostName("A.B") == std::optional<std::string>("a.b"));
  CHECK(!ot::normalizeHostName(""));
  CHECK(!ot::normalizeHostName("1.2.3.4"));
}

TEST_CASE("client_hello: hellos without SNI or without extensions are done") {
  const auto noSni = feedAll(helloWithExtensions(extension(16, alpnData({"h2"}))));
  REQUIRE(noSni.status == ClientHelloStatus::kDone);
  CHECK(noSni.info.sni == SniStatus::kAbsent);
  CHECK(noSni.info.serverName.empty());
  CHECK(noSni.info.alpn == std::vector<std::string>{"h2"});

  const auto empty = feedAll(helloWithExtensions({}));
  REQUIRE(empty.status == ClientHelloStatus::kDone);
  CHECK(empty.info.sni == SniStatus::kAbsent);

  const auto legacy = feedAll(frame(handshakeMessage(helloBody({}, false)), 16384));
  REQUIRE(legacy.status == ClientHelloStatus::kDone);
  CHECK(legacy.info.sni == SniStatus::kAbsent);
  CHECK(legacy.info.alpn.empty());
}

TEST_CASE("client_hello: bytes after the hello are kept but not parsed") {
  const auto f = loadFixture("openssl_alpn");
  Bytes wire = f.bytes;
  const Bytes after = {23, 3, 3, 0, 0, 0xff, 0xfe};  // even an invalid record
  append(wire, after);
  ClientHelloReader reader;
  const auto result = reader.feed(wire);
  REQUIRE(result.status == ClientHelloStatus::kDone);
  CHECK(result.info.helloEnd == f.bytes.size());
  CHECK(Bytes(reader.buffered().begin(), reader.buffered().end()) == wire);
  // Decided: later feeds change nothing.
  CHECK(reader.feed(after) == result);
  CHECK(reader.buffered().size() == wire.size());

  // Extra handshake bytes inside the record that completes the hello.
  Bytes handshake = handshakeOf(f.bytes);
  handshake.push_back(0x0f);
  const auto inRecord = feedAll(frame(handshake, 16384));
  REQUIRE(inRecord.status == ClientHelloStatus::kDone);
  CHECK(inRecord.info.serverName == f.sni);
}
