// The detached TLS 1.3 record layer (common/tls13_record.h) and its key schedule
// (common/tls13_key_schedule.h): RFC 8448 vectors, round trips on the three suites, and every
// rule of RFC 8446 section 5 it enforces. Records the peer "sends" are sealed here with EVP
// directly (sealRaw), independently of the code under test.
#include "common/tls13_record.h"

#include <doctest/doctest.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/tls13_key_schedule.h"

using namespace ot::tls13;

namespace {

using Bytes = std::vector<uint8_t>;

Bytes hex(std::string text) {
  Bytes out;
  std::string digits;
  for (char c : text)
    if (c != ' ') digits += c;
  for (size_t i = 0; i + 1 < digits.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  return out;
}

Bytes range(size_t n, uint8_t start = 0) {
  Bytes out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(start + i);
  return out;
}

const char* evpName(Suite suite) {
  switch (suite) {
    case Suite::kAes128GcmSha256:
      return "AES-128-GCM";
    case Suite::kAes256GcmSha384:
      return "AES-256-GCM";
    case Suite::kChacha20Poly1305Sha256:
      return "ChaCha20-Poly1305";
  }
  return "";
}

constexpr Suite kSuites[] = {Suite::kAes128GcmSha256, Suite::kAes256GcmSha384,
                             Suite::kChacha20Poly1305Sha256};

std::array<uint8_t, kIvSize> nonceFor(const TrafficKeys& keys, uint64_t seq) {
  auto nonce = keys.iv;
  for (size_t i = 0; i < 8; ++i) nonce[kIvSize - 1 - i] ^= static_cast<uint8_t>(seq >> (8 * i));
  return nonce;
}

// A record as a peer would seal it: `inner` is the TLSInnerPlaintext (content, type, padding).
Bytes sealRaw(Suite suite, const TrafficKeys& keys, uint64_t seq, const Bytes& inner,
              uint8_t outerType = kTypeApplicationData) {
  const size_t length = inner.size() + kTagSize;
  Bytes record = {outerType, 3, 3, static_cast<uint8_t>(length >> 8), static_cast<uint8_t>(length)};
  record.resize(kHeaderSize + length);
  EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, evpName(suite), nullptr);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  const auto nonce = nonceFor(keys, seq);
  int n = 0;
  int m = 0;
  REQUIRE(EVP_EncryptInit_ex2(ctx, cipher, keys.key.data(), nonce.data(), nullptr) == 1);
  REQUIRE(EVP_EncryptUpdate(ctx, nullptr, &n, record.data(), 5) == 1);
  REQUIRE(EVP_EncryptUpdate(ctx, record.data() + 5, &n, inner.data(),
                            static_cast<int>(inner.size())) == 1);
  REQUIRE(EVP_EncryptFinal_ex(ctx, record.data() + 5 + n, &m) == 1);
  REQUIRE(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, record.data() + 5 + inner.size()) ==
          1);
  EVP_CIPHER_CTX_free(ctx);
  EVP_CIPHER_free(cipher);
  return record;
}

// The TLSInnerPlaintext of one record sealed by the layer, or none when it does not open.
std::optional<Bytes> openRaw(Suite suite, const TrafficKeys& keys, uint64_t seq,
                             const Bytes& record) {
  if (record.size() < kHeaderSize + kTagSize) return std::nullopt;
  const size_t innerSize = record.size() - kHeaderSize - kTagSize;
  Bytes inner(innerSize + 16);
  EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, evpName(suite), nullptr);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  const auto nonce = nonceFor(keys, seq);
  int n = 0;
  int m = 0;
  bool ok = EVP_DecryptInit_ex2(ctx, cipher, keys.key.data(), nonce.data(), nullptr) == 1 &&
            EVP_DecryptUpdate(ctx, nullptr, &n, record.data(), 5) == 1 &&
            EVP_DecryptUpdate(ctx, inner.data(), &n, record.data() + 5,
                              static_cast<int>(innerSize)) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16,
                                const_cast<uint8_t*>(record.data() + 5 + innerSize)) == 1 &&
            EVP_DecryptFinal_ex(ctx, inner.data() + n, &m) == 1;
  EVP_CIPHER_CTX_free(ctx);
  EVP_CIPHER_free(cipher);
  if (!ok) return std::nullopt;
  inner.resize(innerSize);
  return inner;
}

// Two fixed secrets per suite: the client's and the server's.
Bytes secretOf(Suite suite, uint8_t seed) {
  return range(hashSize(suite), seed);
}

TrafficKeys keysOf(Suite suite, const Bytes& secret) {
  TrafficKeys keys;
  REQUIRE(deriveTrafficKeys(suite, secret, keys));
  return keys;
}

// The server's layer: reads the client's records, writes under the server's secret.
struct Server {
  Suite suite;
  Bytes clientSecret;
  Bytes serverSecret;
  RecordLayer layer;
  TrafficKeys client;  // what the test (the client) seals with
  TrafficKeys server;  // what the test opens the layer's records with
  Bytes toSend;

  explicit Server(Suite s, uint64_t readSeq = 0, uint64_t writeSeq = 0)
      : suite(s),
        clientSecret(secretOf(s, 1)),
        serverSecret(secretOf(s, 101)),
        layer(s, clientSecret, readSeq, serverSecret, writeSeq),
        client(keysOf(s, clientSecret)),
        server(keysOf(s, serverSecret)) {}

  RecordLayer::OpenResult open(const Bytes& input, Bytes& out) {
    return layer.open(input, out, toSend);
  }
};

Bytes appData(const Bytes& content) {
  Bytes inner = content;
  inner.push_back(kTypeApplicationData);
  return inner;
}

// The alert the layer left in toSend (one record, sealed under the server key at `seq`).
int sentAlert(const Server& s, uint64_t seq) {
  auto inner = openRaw(s.suite, s.server, seq, s.toSend);
  if (!inner || inner->size() != 3 || (*inner)[2] != kTypeAlert) return -1;
  return (*inner)[1];
}

}  // namespace

TEST_CASE("tls13 key schedule: RFC 8448 application traffic keys") {
  const Bytes serverSecret =
      hex("a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643");
  const Bytes clientSecret =
      hex("9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f792ebb7c17504a5");
  TrafficKeys keys;
  REQUIRE(deriveTrafficKeys(Suite::kAes128GcmSha256, serverSecret, keys));
  CHECK(Bytes(keys.key.begin(), keys.key.begin() + 16) == hex("9f02283b6c9c07efc26bb9f2ac92e356"));
  CHECK(Bytes(keys.iv.begin(), keys.iv.end()) == hex("cf782b88dd83549aadf1e984"));
  REQUIRE(deriveTrafficKeys(Suite::kAes128GcmSha256, clientSecret, keys));
  CHECK(Bytes(keys.key.begin(), keys.key.begin() + 16) == hex("17422dda596ed5d9acd890e3c63f5051"));
  CHECK(Bytes(keys.iv.begin(), keys.iv.end()) == hex("5b78923dee08579033e523d9"));
  // A secret of the wrong size for the suite is refused.
  CHECK_FALSE(deriveTrafficKeys(Suite::kAes256GcmSha384, serverSecret, keys));
}

namespace {

// HKDF-Expand-Label the long way, with OpenSSL's own HKDF (EVP_KDF, expand only, a context per
// call): the reference the code under test (HMAC on a kept context) must agree with.
Bytes opensslExpandLabel(Suite suite, const Bytes& secret, const std::string& label,
                         const Bytes& context, size_t size) {
  Bytes info = {static_cast<uint8_t>(size >> 8), static_cast<uint8_t>(size),
                static_cast<uint8_t>(6 + label.size())};
  for (char c : "tls13 " + label) info.push_back(static_cast<uint8_t>(c));
  info.push_back(static_cast<uint8_t>(context.size()));
  info.insert(info.end(), context.begin(), context.end());
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
  char* digest = const_cast<char*>(suite == Suite::kAes256GcmSha384 ? "SHA384" : "SHA256");
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(secret.data()),
                                        secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), info.size()),
      OSSL_PARAM_construct_end(),
  };
  Bytes out(size);
  const bool ok = EVP_KDF_derive(ctx, out.data(), out.size(), params) == 1;
  EVP_KDF_CTX_free(ctx);
  EVP_KDF_free(kdf);
  REQUIRE(ok);
  return out;
}

}  // namespace

TEST_CASE("tls13 key schedule: HKDF-Expand-Label agrees with OpenSSL's HKDF at every size") {
  for (Suite suite : kSuites) {
    const Bytes secret = secretOf(suite, 11);
    const Bytes otherSecret = secretOf(suite, 12);
    const size_t hash = hashSize(suite);
    // One block, a block and a byte, several blocks, the RFC's largest output (255 blocks).
    for (size_t size :
         {size_t{1}, size_t{12}, size_t{16}, hash, hash + 1, 3 * hash + 5, 255 * hash}) {
      for (const Bytes& context : {Bytes{}, range(32, 5), range(255, 9)}) {
        CAPTURE(size);
        CAPTURE(context.size());
        Bytes out(size);
        REQUIRE(hkdfExpandLabel(suite, secret, "key", context, out));
        CHECK(out == opensslExpandLabel(suite, secret, "key", context, size));
        // The kept context carries nothing from one secret to the next.
        REQUIRE(hkdfExpandLabel(suite, otherSecret, "iv", context, out));
        CHECK(out == opensslExpandLabel(suite, otherSecret, "iv", context, size));
      }
    }
    // Past 255 blocks, a label over 255 bytes or an empty secret: refused, the output zeroed.
    Bytes tooLong(255 * hash + 1, 0xaa);
    CHECK_FALSE(hkdfExpandLabel(suite, secret, "key", {}, tooLong));
    CHECK(tooLong == Bytes(tooLong.size(), 0));
    Bytes out(16, 0xaa);
    CHECK_FALSE(hkdfExpandLabel(suite, secret, std::string(250, 'x'), {}, out));
    CHECK(out == Bytes(16, 0));
    out.assign(16, 0xaa);
    CHECK_FALSE(hkdfExpandLabel(suite, Bytes{}, "key", {}, out));
    CHECK(out == Bytes(16, 0));
  }
}

TEST_CASE("tls13 key schedule: the KeyUpdate step is HKDF-Expand-Label 'traffic upd'") {
  for (Suite suite : kSuites) {
    const Bytes secret = secretOf(suite, 7);
    TrafficKeys keys = keysOf(suite, secret);
    Bytes expected(hashSize(suite));
    REQUIRE(hkdfExpandLabel(suite, secret, "traffic upd", {}, expected));
    REQUIRE(updateTrafficKeys(suite, keys));
    CHECK(Bytes(keys.secret.begin(), keys.secret.begin() + hashSize(suite)) == expected);
    CHECK(keys.key == keysOf(suite, expected).key);
    CHECK(keys.iv == keysOf(suite, expected).iv);
    CHECK(expected != secret);
  }
}

TEST_CASE("tls13 record: RFC 8448 application data records, both directions") {
  const Bytes serverSecret =
      hex("a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643");
  const Bytes clientSecret =
      hex("9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f792ebb7c17504a5");
  // The server's reply is its second record (its NewSessionTicket was seq 0).
  RecordLayer layer(Suite::kAes128GcmSha256, clientSecret, 0, serverSecret, 1);
  REQUIRE(layer.valid());
  const Bytes fromClient =
      hex("1703030043a23f7054b62c94d0affafe8228ba55cbefacea42f914aa66bcab3f2b9819a8a5b46b395bd54a9a"
          "20441e2b62974e1f5a6292a2977014bd1e3deae63aeebb21694915e4");
  const Bytes fromServer =
      hex("17030300432e937e11ef4ac740e538ad36005fc4a46932fc3225d05f82aa1b36e30efaf97d90e6dffc602dcb"
          "501a59a8fcc49c4bf2e5f0a21c0047c2abf332540dd032e167c2955d");
  Bytes out(100);
  Bytes toSend;
  const auto opened = layer.open(fromClient, out, toSend);
  CHECK(opened.status == RecordLayer::OpenStatus::kOk);
  CHECK(opened.consumed == fromClient.size());
  REQUIRE(opened.produced == 50);
  CHECK(Bytes(out.begin(), out.begin() + 50) == range(50));
  CHECK(toSend.empty());
  CHECK(layer.sealMatches(1, range(50), fromServer));
  CHECK_FALSE(layer.sealMatches(0, range(50), fromServer));
  Bytes sealed;
  REQUIRE(layer.seal(range(50), sealed));
  CHECK(sealed == fromServer);
  CHECK(layer.writeSeq() == 2);
  CHECK(layer.readSeq() == 1);
}

TEST_CASE("tls13 record: round trips on every suite, many records in one input") {
  for (Suite suite : kSuites) {
    CAPTURE(static_cast<int>(suite));
    Server s(suite, 5, 9);
    // The layer's own records open with the peer's view of the keys, in sequence.
    Bytes sealed;
    const Bytes big = range(40000, 3);  // 3 records: 16384 + 16384 + 7232
    REQUIRE(s.layer.seal(big, sealed));
    Bytes joined;
    size_t pos = 0;
    for (uint64_t seq = 9; seq < 12; ++seq) {
      const size_t size = completeRecordSize(std::span(sealed).subspan(pos));
      REQUIRE(size > 0);
      const auto first = sealed.begin() + static_cast<long>(pos);
      auto inner = openRaw(suite, s.server, seq, Bytes(first, first + static_cast<long>(size)));
      REQUIRE(inner);
      REQUIRE(inner->back() == kTypeApplicationData);  // no padding
      CHECK(inner->size() - 1 <= kMaxPlaintext);
      joined.insert(joined.end(), inner->begin(), inner->end() - 1);
      pos += size;
    }
    CHECK(pos == sealed.size());
    CHECK(joined == big);
    CHECK(s.layer.sealMatches(12, range(10), [&] {
      Bytes r;
      RecordLayer copy(suite, s.clientSecret, 0, s.serverSecret, 12);
      REQUIRE(copy.seal(range(10), r));
      return r;
    }()));
    // Many records from the peer in one input, with padding and a zero-length record.
    Bytes input;
    for (uint64_t i = 0; i < 20; ++i) {
      Bytes inner = appData(range(i * 100, static_cast<uint8_t>(i)));
      inner.resize(inner.size() + i * 3, 0);  // padding
      const Bytes r = sealRaw(suite, s.client, 5 + i, inner);
      input.insert(input.end(), r.begin(), r.end());
    }
    Bytes out(200000);
    const auto opened = s.open(input, out);
    CHECK(opened.status == RecordLayer::OpenStatus::kOk);
    CHECK(opened.consumed == input.size());
    Bytes expected;
    for (uint64_t i = 0; i < 20; ++i) {
      const Bytes part = range(i * 100, static_cast<uint8_t>(i));
      expected.insert(expected.end(), part.begin(), part.end());
    }
    REQUIRE(opened.produced == expected.size());
    CHECK(Bytes(out.begin(), out.begin() + static_cast<long>(expected.size())) == expected);
    CHECK(s.layer.readSeq() == 25);
  }
}

TEST_CASE("tls13 record: input split at every byte reassembles") {
  Server s(Suite::kAes128GcmSha256);
  Bytes input;
  for (uint64_t i = 0; i < 3; ++i) {
    const Bytes r = sealRaw(s.suite, s.client, i, appData(range(30, static_cast<uint8_t>(10 * i))));
    input.insert(input.end(), r.begin(), r.end());
  }
  for (size_t cut = 0; cut <= input.size(); ++cut) {
    CAPTURE(cut);
    Server t(Suite::kAes128GcmSha256);
    Bytes pending(input.begin(), input.begin() + static_cast<long>(cut));
    Bytes out(1000);
    Bytes got;
    auto opened = t.open(pending, out);
    REQUIRE(opened.status == RecordLayer::OpenStatus::kOk);
    got.insert(got.end(), out.begin(), out.begin() + static_cast<long>(opened.produced));
    pending.erase(pending.begin(), pending.begin() + static_cast<long>(opened.consumed));
    pending.insert(pending.end(), input.begin() + static_cast<long>(cut), input.end());
    opened = t.open(pending, out);
    REQUIRE(opened.status == RecordLayer::OpenStatus::kOk);
    CHECK(opened.consumed == pending.size());
    got.insert(got.end(), out.begin(), out.begin() + static_cast<long>(opened.produced));
    Bytes expected;
    for (uint64_t i = 0; i < 3; ++i) {
      const Bytes part = range(30, static_cast<uint8_t>(10 * i));
      expected.insert(expected.end(), part.begin(), part.end());
    }
    CHECK(got == expected);
  }
}

TEST_CASE("tls13 record: a record that does not fit waits for room") {
  Server s(Suite::kAes256GcmSha384);
  const Bytes r = sealRaw(s.suite, s.client, 0, appData(range(100)));
  Bytes small(50);
  auto opened = s.open(r, small);
  CHECK(opened.status == RecordLayer::OpenStatus::kNeedRoom);
  CHECK(opened.consumed == 0);
  Bytes out(101);
  opened = s.open(r, out);
  CHECK(opened.status == RecordLayer::OpenStatus::kOk);
  CHECK(opened.produced == 100);
}

TEST_CASE("tls13 record: tampering fails with bad_record_mac and an encrypted alert") {
  const Server base(Suite::kChacha20Poly1305Sha256);
  const Bytes good = sealRaw(base.suite, base.client, 0, appData(range(40)));
  for (size_t at : {size_t{1}, size_t{2}, size_t{7}, good.size() - 1}) {  // version, body, tag
    CAPTURE(at);
    Server s(Suite::kChacha20Poly1305Sha256);
    Bytes bad = good;
    bad[at] ^= 0x01;
    Bytes out(100);
    const auto opened = s.open(bad, out);
    CHECK(opened.status == RecordLayer::OpenStatus::kError);
    CHECK(opened.produced == 0);
    CHECK(sentAlert(s, 0) == static_cast<int>(AlertCode::kBadRecordMac));
    CHECK(s.layer.failed());
    // Failed for good: the good record is refused too, and nothing more is sent.
    const size_t sent = s.toSend.size();
    CHECK(s.open(good, out).status == RecordLayer::OpenStatus::kError);
    CHECK(s.toSend.size() == sent);
  }
  // A shorter length field: the tag is checked over the wrong bytes.
  Server s(Suite::kChacha20Poly1305Sha256);
  Bytes bad = good;
  bad[4] = static_cast<uint8_t>(bad[4] - 1);
  Bytes out(100);
  CHECK(s.open(bad, out).status == RecordLayer::OpenStatus::kError);
  CHECK(sentAlert(s, 0) == static_cast<int>(AlertCode::kBadRecordMac));
  // The wrong sequence number (a replayed or dropped record) fails the same way.
  Server t(Suite::kChacha20Poly1305Sha256, 1);
  CHECK(t.open(good, out).status == RecordLayer::OpenStatus::kError);
}

TEST_CASE("tls13 record: oversize records fail with record_overflow") {
  Server s(Suite::kAes128GcmSha256);
  Bytes header = {kTypeApplicationData, 3, 3, 0x41, 0x01};  // 2^14 + 256 + 1
  Bytes out(20000);
  CHECK(s.open(header, out).status == RecordLayer::OpenStatus::kError);  // from the header alone
  CHECK(sentAlert(s, 0) == static_cast<int>(AlertCode::kRecordOverflow));
  // A record within 2^14+256 whose plaintext (padding stripped) exceeds 2^14.
  Server t(Suite::kAes128GcmSha256);
  const Bytes r = sealRaw(t.suite, t.client, 0, appData(Bytes(kMaxPlaintext + 1, 1)));
  CHECK(t.open(r, out).status == RecordLayer::OpenStatus::kError);
  CHECK(sentAlert(t, 0) == static_cast<int>(AlertCode::kRecordOverflow));
  // Exactly 2^14 with padding up to the 2^14+256 record limit is fine.
  Server u(Suite::kAes128GcmSha256);
  Bytes inner = appData(Bytes(kMaxPlaintext, 1));
  inner.resize(kMaxCiphertext - kTagSize, 0);
  const auto opened = u.open(sealRaw(u.suite, u.client, 0, inner), out);
  CHECK(opened.status == RecordLayer::OpenStatus::kOk);
  CHECK(opened.produced == kMaxPlaintext);
}

TEST_CASE("tls13 record: zero-length application data, padding only, alerts") {
  Server s(Suite::kAes128GcmSha256);
  Bytes out(100);
  auto opened = s.open(sealRaw(s.suite, s.client, 0, {kTypeApplicationData}), out);
  CHECK(opened.status == RecordLayer::OpenStatus::kOk);
  CHECK(opened.produced == 0);
  CHECK(s.layer.readSeq() == 1);
  // user_canceled is ignored; close_notify is the end (what follows is not read).
  Bytes input = sealRaw(s.suite, s.client, 1, {1, 90, kTypeAlert});
  const Bytes close = sealRaw(s.suite, s.client, 2, {1, 0, kTypeAlert});
  input.insert(input.end(), close.begin(), close.end());
  const Bytes after = sealRaw(s.suite, s.client, 3, appData(range(5)));
  input.insert(input.end(), after.begin(), after.end());
  opened = s.open(input, out);
  CHECK(opened.status == RecordLayer::OpenStatus::kClosed);
  CHECK(opened.produced == 0);
  CHECK(opened.consumed == input.size() - after.size());
  CHECK(s.layer.closed());
  CHECK(s.toSend.empty());
  // All-zero inner plaintext: no content type.
  Server t(Suite::kAes128GcmSha256);
  CHECK(t.open(sealRaw(t.suite, t.client, 0, Bytes(8, 0)), out).status ==
        RecordLayer::OpenStatus::kError);
  CHECK(sentAlert(t, 0) == static_cast<int>(AlertCode::kUnexpectedMessage));
  // A fatal alert from the peer: an error, no alert back.
  Server u(Suite::kAes128GcmSha256);
  CHECK(u.open(sealRaw(u.suite, u.client, 0, {2, 40, kTypeAlert}), out).status ==
        RecordLayer::OpenStatus::kError);
  CHECK(u.layer.peerAlert() == 40);
  CHECK(u.toSend.empty());
  // Our own close_notify is a warning alert that leaves the layer usable.
  Server v(Suite::kAes128GcmSha256);
  v.layer.sealAlert(AlertCode::kCloseNotify, v.toSend);
  CHECK(sentAlert(v, 0) == 0);
  CHECK_FALSE(v.layer.failed());
}

TEST_CASE("tls13 record: unexpected messages after the handshake") {
  Bytes out(100);
  SUBCASE("an outer ChangeCipherSpec") {
    Server s(Suite::kAes128GcmSha256);
    CHECK(s.open({kTypeChangeCipherSpec, 3, 3, 0, 1, 1}, out).status ==
          RecordLayer::OpenStatus::kError);
    CHECK(sentAlert(s, 0) == static_cast<int>(AlertCode::kUnexpectedMessage));
  }
  SUBCASE("a plaintext alert") {
    Server s(Suite::kAes128GcmSha256);
    CHECK(s.open({kTypeAlert, 3, 3, 0, 2, 1, 0}, out).status == RecordLayer::OpenStatus::kError);
    CHECK(sentAlert(s, 0) == static_cast<int>(AlertCode::kUnexpectedMessage));
  }
  SUBCASE("a NewSessionTicket from the client") {
    Server s(Suite::kAes128GcmSha256);
    CHECK(s.open(sealRaw(s.suite, s.client, 0, {4, 0, 0, 1, 0, kTypeHandshake}), out).status ==
          RecordLayer::OpenStatus::kError);
    CHECK(sentAlert(s, 0) == static_cast<int>(AlertCode::kUnexpectedMessage));
  }
  SUBCASE("a KeyUpdate cut across records") {
    Server s(Suite::kAes128GcmSha256);
    CHECK(s.open(sealRaw(s.suite, s.client, 0, {24, 0, 0, kTypeHandshake}), out).status ==
          RecordLayer::OpenStatus::kError);
    CHECK(sentAlert(s, 0) == static_cast<int>(AlertCode::kUnexpectedMessage));
  }
  SUBCASE("a KeyUpdate with a bad request") {
    Server s(Suite::kAes128GcmSha256);
    CHECK(s.open(sealRaw(s.suite, s.client, 0, {24, 0, 0, 1, 2, kTypeHandshake}), out).status ==
          RecordLayer::OpenStatus::kError);
    CHECK(sentAlert(s, 0) == static_cast<int>(AlertCode::kIllegalParameter));
  }
  SUBCASE("an unknown inner type") {
    Server s(Suite::kAes128GcmSha256);
    CHECK(s.open(sealRaw(s.suite, s.client, 0, {1, 2, 99}), out).status ==
          RecordLayer::OpenStatus::kError);
    CHECK(sentAlert(s, 0) == static_cast<int>(AlertCode::kUnexpectedMessage));
  }
}

TEST_CASE("tls13 record: KeyUpdate, not requested and requested") {
  for (Suite suite : kSuites) {
    CAPTURE(static_cast<int>(suite));
    Server s(suite, 3, 4);
    Bytes out(100);
    // update_not_requested: the read side moves to the next secret (seq 0); nothing to send.
    Bytes input = sealRaw(suite, s.client, 3, {24, 0, 0, 1, 0, kTypeHandshake});
    TrafficKeys next = s.client;
    REQUIRE(updateTrafficKeys(suite, next));
    Bytes data = sealRaw(suite, next, 0, appData(range(7)));
    input.insert(input.end(), data.begin(), data.end());
    auto opened = s.open(input, out);
    CHECK(opened.status == RecordLayer::OpenStatus::kOk);
    CHECK(opened.produced == 7);
    CHECK(s.toSend.empty());
    CHECK(s.layer.readSeq() == 1);
    // update_requested: our KeyUpdate(update_not_requested) under the old write key, then ours
    // moves too.
    TrafficKeys third = next;
    REQUIRE(updateTrafficKeys(suite, third));
    input = sealRaw(suite, next, 1, {24, 0, 0, 1, 1, kTypeHandshake});
    data = sealRaw(suite, third, 0, appData(range(9)));
    input.insert(input.end(), data.begin(), data.end());
    opened = s.open(input, out);
    CHECK(opened.status == RecordLayer::OpenStatus::kOk);
    CHECK(opened.produced == 9);
    auto answer = openRaw(suite, s.server, 4, s.toSend);
    REQUIRE(answer);
    CHECK(*answer == Bytes{24, 0, 0, 1, 0, kTypeHandshake});
    CHECK(s.layer.writeSeq() == 0);
    TrafficKeys serverNext = s.server;
    REQUIRE(updateTrafficKeys(suite, serverNext));
    Bytes sealed;
    REQUIRE(s.layer.seal(range(3), sealed));
    auto inner = openRaw(suite, serverNext, 0, sealed);
    REQUIRE(inner);
    CHECK(*inner == appData(range(3)));
  }
}

TEST_CASE("tls13 record: sequence numbers never wrap") {
  Server s(Suite::kAes128GcmSha256, kSeqLimit - 1, kSeqLimit - 1);
  Bytes sealed;
  CHECK(s.layer.seal(range(4), sealed));  // the last usable number
  CHECK(s.layer.writeSeq() == kSeqLimit);
  const size_t before = sealed.size();
  CHECK_FALSE(s.layer.seal(range(4), sealed));
  CHECK(sealed.size() == before);
  CHECK(s.layer.failed());
  Server t(Suite::kAes128GcmSha256, kSeqLimit - 1);
  Bytes out(100);
  auto opened = t.open(sealRaw(t.suite, t.client, kSeqLimit - 1, appData(range(4))), out);
  CHECK(opened.status == RecordLayer::OpenStatus::kOk);
  CHECK(opened.produced == 4);
  CHECK(t.open(sealRaw(t.suite, t.client, 0, appData(range(4))), out).status ==
        RecordLayer::OpenStatus::kError);
}

TEST_CASE("tls13 record: a client's layer drops the server's NewSessionTickets") {
  Bytes out(200);
  // Two whole tickets in one record (a 3-byte and an empty body), then application data.
  const Bytes tickets = {4, 0, 0, 3, 7, 8, 9, 4, 0, 0, 0, kTypeHandshake};
  SUBCASE("dropped, and the data after them is read") {
    Server s(Suite::kAes128GcmSha256);
    s.layer.ignoreSessionTickets();
    Bytes input = sealRaw(s.suite, s.client, 0, tickets);
    const Bytes data = sealRaw(s.suite, s.client, 1, appData(range(50)));
    input.insert(input.end(), data.begin(), data.end());
    const auto opened = s.open(input, out);
    CHECK(opened.status == RecordLayer::OpenStatus::kOk);
    CHECK(opened.consumed == input.size());
    CHECK(Bytes(out.begin(), out.begin() + static_cast<long>(opened.produced)) == range(50));
    CHECK(s.toSend.empty());
    CHECK(s.layer.readSeq() == 2);
  }
  SUBCASE("a ticket cut across records still fails") {
    Server s(Suite::kAes128GcmSha256);
    s.layer.ignoreSessionTickets();
    CHECK(s.open(sealRaw(s.suite, s.client, 0, {4, 0, 0, 9, 1, kTypeHandshake}), out).status ==
          RecordLayer::OpenStatus::kError);
    CHECK(sentAlert(s, 0) == static_cast<int>(AlertCode::kUnexpectedMessage));
  }
  SUBCASE("another handshake message beside a ticket still fails") {
    Server s(Suite::kAes128GcmSha256);
    s.layer.ignoreSessionTickets();
    CHECK(s.open(sealRaw(s.suite, s.client, 0, {4, 0, 0, 0, 13, 0, 0, 0, kTypeHandshake}), out)
              .status == RecordLayer::OpenStatus::kError);
  }
}

TEST_CASE("tls13 record: sealGather gives the records seal gives for the joined bytes") {
  const Bytes all = range(40000, 3);
  // Piece bounds on and off the 2^14 record bounds, empty pieces among them.
  const std::vector<std::vector<size_t>> splits = {
      {40000}, {0, 40000, 0}, {1, 16383, 1, 16384, 7231}, {5, 0, 9, 16384, 23602}, {20000, 20000}};
  for (const auto& split : splits) {
    CAPTURE(split.size());
    Server a(Suite::kAes128GcmSha256, 0, 7);
    Server b(Suite::kAes128GcmSha256, 0, 7);
    Bytes joined;
    REQUIRE(a.layer.seal(all, joined));
    std::vector<std::span<const uint8_t>> pieces;
    size_t at = 0;
    for (size_t n : split) {
      pieces.emplace_back(all.data() + at, n);
      at += n;
    }
    REQUIRE(at == all.size());
    Bytes gathered = {0xAA};  // appended after what is there
    REQUIRE(b.layer.sealGather(pieces, gathered));
    CHECK(Bytes(gathered.begin() + 1, gathered.end()) == joined);
    CHECK(b.layer.writeSeq() == a.layer.writeSeq());
  }
  SUBCASE("nothing at all: one empty record, as seal") {
    Server a(Suite::kAes128GcmSha256);
    Server b(Suite::kAes128GcmSha256);
    Bytes joined;
    Bytes gathered;
    REQUIRE(a.layer.seal({}, joined));
    REQUIRE(b.layer.sealGather({}, gathered));
    CHECK(gathered == joined);
  }
}

TEST_CASE(
    "tls13 record: connections interleaved on one thread seal and open under their own keys") {
  // The thread's one AEAD context takes each connection's key in turn, as relayd's loop does for
  // idle bridges' pings and pongs; two connections on the same suite must not share a key, and a
  // failed record must not spoil the next connection's.
  struct Connection {
    Suite suite;
    TrafficKeys readKeys;   // what the peer seals with
    TrafficKeys writeKeys;  // what the peer opens with
    RecordLayer layer;
    Connection(Suite s, uint8_t seed)
        : suite(s),
          readKeys(keysOf(s, secretOf(s, seed))),
          writeKeys(keysOf(s, secretOf(s, static_cast<uint8_t>(seed + 100)))),
          layer(s, secretOf(s, seed), 0, secretOf(s, static_cast<uint8_t>(seed + 100)), 0) {}
  };
  std::vector<std::unique_ptr<Connection>> connections;
  const Suite order[] = {Suite::kAes128GcmSha256, Suite::kAes128GcmSha256, Suite::kAes256GcmSha384,
                         Suite::kChacha20Poly1305Sha256, Suite::kAes128GcmSha256};
  uint8_t seed = 1;
  for (Suite suite : order) connections.push_back(std::make_unique<Connection>(suite, seed++));
  for (uint64_t round = 0; round < 4; ++round) {
    for (size_t i = 0; i < connections.size(); ++i) {
      CAPTURE(round);
      CAPTURE(i);
      Connection& c = *connections[i];
      const Bytes content = range(31, static_cast<uint8_t>(round * 16 + i));
      Bytes sealed;
      REQUIRE(c.layer.seal(content, sealed));
      CHECK(openRaw(c.suite, c.writeKeys, round, sealed) == appData(content));
      Bytes out(64);
      Bytes toSend;
      const auto opened =
          c.layer.open(sealRaw(c.suite, c.readKeys, round, appData(content)), out, toSend);
      REQUIRE(opened.status == RecordLayer::OpenStatus::kOk);
      CHECK(Bytes(out.begin(), out.begin() + static_cast<long>(opened.produced)) == content);
      if (round == 2 && i == 1) {
        // A record under another connection's key fails here, and only here.
        RecordLayer victim(c.suite, secretOf(c.suite, 1), 3, secretOf(c.suite, 101), 0);
        Bytes ignored;
        const auto bad =
            victim.open(sealRaw(c.suite, c.readKeys, 3, appData(content)), out, ignored);
        CHECK(bad.status == RecordLayer::OpenStatus::kError);
      }
    }
  }
}
