#include "common/proxy_protocol.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ot {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes bytesOf(std::string_view text) {
  return Bytes(text.begin(), text.end());
}

Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const Bytes kSignature = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
// The first bytes of a TLS 1.2/1.3 ClientHello record.
const Bytes kClientHello = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03};

// A v2 header; the length field is payload.size() unless overridden.
Bytes v2(uint8_t verCmd, uint8_t fam, const Bytes& payload, int lengthOverride = -1) {
  Bytes out = kSignature;
  const size_t len = lengthOverride >= 0 ? static_cast<size_t>(lengthOverride) : payload.size();
  out.push_back(verCmd);
  out.push_back(fam);
  out.push_back(static_cast<uint8_t>(len >> 8));
  out.push_back(static_cast<uint8_t>(len & 0xFF));
  return concat(out, payload);
}

Bytes tlv(uint8_t type, const Bytes& value) {
  Bytes out = {type, static_cast<uint8_t>(value.size() >> 8),
               static_cast<uint8_t>(value.size() & 0xFF)};
  return concat(out, value);
}

// 192.0.2.1:56324 -> 198.51.100.7:443
const Bytes kTcp4Block = {192, 0, 2, 1, 198, 51, 100, 7, 0xDC, 0x04, 0x01, 0xBB};

Bytes tcp6Block() {
  Bytes out(36, 0);
  out[0] = 0x20;  // 2001:db8::1
  out[1] = 0x01;
  out[2] = 0x0D;
  out[3] = 0xB8;
  out[15] = 0x01;
  out[31] = 0x01;  // ::1
  out[32] = 0x30;  // 12345
  out[33] = 0x39;
  out[34] = 0x01;  // 443
  out[35] = 0xBB;
  return out;
}

struct Fed {
  ProxyReadResult last;
  size_t consumed = 0;  // summed over all feeds
  size_t feeds = 0;
};

// Feeds `data` in pieces of `piece` bytes until the reader finishes or the data runs out.
Fed feedInPieces(const Bytes& data, size_t piece, size_t maxSize = kProxyDefaultMaxHeaderSize) {
  ProxyHeaderReader reader(maxSize);
  Fed fed;
  for (size_t at = 0; at < data.size(); at += piece) {
    const size_t n = std::min(piece, data.size() - at);
    fed.last = reader.feed(std::span<const uint8_t>(data).subspan(at, n));
    fed.consumed += fed.last.consumed;
    ++fed.feeds;
    REQUIRE(fed.last.consumed <= n);
    if (fed.last.status != ProxyStatus::kNeedMore) break;
    REQUIRE(fed.last.consumed == n);
  }
  return fed;
}

ProxyReadResult whole(const Bytes& data, size_t maxSize = kProxyDefaultMaxHeaderSize) {
  return readProxyHeader(data, maxSize);
}

void checkError(const Bytes& data, ProxyError expected,
                size_t maxSize = kProxyDefaultMaxHeaderSize) {
  const ProxyReadResult r = whole(data, maxSize);
  CHECK(r.status == ProxyStatus::kError);
  CHECK(proxyErrorName(r.error) == proxyErrorName(expected));
  for (const size_t piece : {size_t{1}, size_t{3}}) {
    const Fed fed = feedInPieces(data, piece, maxSize);
    CHECK(fed.last.status == ProxyStatus::kError);
    CHECK(proxyErrorName(fed.last.error) == proxyErrorName(expected));
    CHECK(fed.consumed == r.consumed);
  }
}

void checkErrorText(std::string_view line, ProxyError expected) {
  INFO("line: ", std::string(line));
  checkError(bytesOf(line), expected);
}

// The properties every valid header must have: same result whole and in pieces, trailing bytes
// untouched, NeedMore (all bytes taken) at every proper prefix.
ProxyHeader checkValid(const Bytes& header, size_t maxSize = kProxyDefaultMaxHeaderSize) {
  const ProxyReadResult r = whole(header, maxSize);
  REQUIRE(r.status == ProxyStatus::kDone);
  CHECK(r.consumed == header.size());
  CHECK(r.header.size == header.size());

  const Bytes withTls = concat(header, kClientHello);
  const ProxyReadResult t = whole(withTls, maxSize);
  REQUIRE(t.status == ProxyStatus::kDone);
  CHECK(t.consumed == header.size());
  CHECK(t.header == r.header);

  for (const size_t piece : {size_t{1}, size_t{2}, size_t{5}, size_t{7}, size_t{64}}) {
    const Fed fed = feedInPieces(withTls, piece, maxSize);
    REQUIRE(fed.last.status == ProxyStatus::kDone);
    CHECK(fed.consumed == header.size());
    CHECK(fed.last.header == r.header);
  }

  for (size_t n = 0; n < header.size(); ++n) {
    const ProxyReadResult p = readProxyHeader(std::span<const uint8_t>(header).first(n), maxSize);
    if (p.status != ProxyStatus::kNeedMore || p.consumed != n) {
      FAIL("prefix of length ", n, " did not give NeedMore");
    }
  }
  return r.header;
}

}  // namespace

TEST_CASE("proxy_protocol: crc32c check value and error names") {
  CHECK(crc32c(bytesOf("123456789")) == 0xE3069283U);
  CHECK(crc32c({}) == 0U);
  CHECK(proxyErrorName(ProxyError::kNotProxyProtocol) == "not_proxy_protocol");
  CHECK(proxyErrorName(ProxyError::kBadV1Syntax) == "bad_v1_syntax");
  CHECK(proxyErrorName(ProxyError::kV1TooLong) == "v1_too_long");
  CHECK(proxyErrorName(ProxyError::kBadVersion) == "bad_version");
  CHECK(proxyErrorName(ProxyError::kBadCommand) == "bad_command");
  CHECK(proxyErrorName(ProxyError::kBadFamily) == "bad_family");
  CHECK(proxyErrorName(ProxyError::kBadAddress) == "bad_address");
  CHECK(proxyErrorName(ProxyError::kBadPort) == "bad_port");
  CHECK(proxyErrorName(ProxyError::kLengthMismatch) == "length_mismatch");
  CHECK(proxyErrorName(ProxyError::kTooLarge) == "too_large");
  CHECK(proxyErrorName(ProxyError::kBadTlv) == "bad_tlv");
  CHECK(proxyErrorName(ProxyError::kBadCrc32c) == "bad_crc32c");
  CHECK(proxyErrorName(ProxyError::kNone) == "none");
}

TEST_CASE("proxy_protocol: address toString") {
  CHECK(ProxyAddress::ipv4({1, 2, 3, 4}, 5).toString() == "1.2.3.4:5");
  CHECK(ProxyAddress::ipv4({255, 255, 255, 255}, 65535).toString() == "255.255.255.255:65535");
  std::array<uint8_t, 16> loopback{};
  loopback[15] = 1;
  CHECK(ProxyAddress::ipv6(loopback, 5).toString() == "[::1]:5");
  std::array<uint8_t, 16> doc{0x20, 0x01, 0x0D, 0xB8};
  doc[15] = 1;
  CHECK(ProxyAddress::ipv6(doc, 443).toString() == "[2001:db8::1]:443");
}

TEST_CASE("proxy_protocol: v1 TCP4") {
  const ProxyHeader h = checkValid(bytesOf("PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n"));
  CHECK(h.version == 1);
  CHECK(h.command == ProxyCommand::kProxy);
  REQUIRE(h.addresses.has_value());
  CHECK(h.addresses->source == ProxyAddress::ipv4({192, 0, 2, 1}, 56324));
  CHECK(h.addresses->destination == ProxyAddress::ipv4({198, 51, 100, 7}, 443));
  CHECK(h.addresses->source.toString() == "192.0.2.1:56324");
  CHECK(h.tlvs.empty());

  const ProxyHeader edge = checkValid(bytesOf("PROXY TCP4 0.0.0.0 255.255.255.255 0 65535\r\n"));
  REQUIRE(edge.addresses.has_value());
  CHECK(edge.addresses->source.toString() == "0.0.0.0:0");
  CHECK(edge.addresses->destination.toString() == "255.255.255.255:65535");
}

TEST_CASE("proxy_protocol: v1 TCP6") {
  const ProxyHeader h = checkValid(bytesOf("PROXY TCP6 2001:db8::1 ::1 12345 443\r\n"));
  REQUIRE(h.addresses.has_value());
  CHECK(h.addresses->source.toString() == "[2001:db8::1]:12345");
  CHECK(h.addresses->destination.toString() == "[::1]:443");
  CHECK(h.addresses->source.family == ProxyAddress::Family::kInet6);

  const ProxyHeader mapped = checkValid(bytesOf("PROXY TCP6 ::ffff:1.2.3.4 FE80::A 1 2\r\n"));
  REQUIRE(mapped.addresses.has_value());
  CHECK(mapped.addresses->source.toString() == "[::ffff:1.2.3.4]:1");
  CHECK(mapped.addresses->destination.toString() == "[fe80::a]:2");

  // The longest form the spec names: 104 bytes.
  const std::string longest =
      "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
      "65535 65535\r\n";
  CHECK(longest.size() == 104);
  checkValid(bytesOf(longest));
}

TEST_CASE("proxy_protocol: v1 UNKNOWN") {
  const ProxyHeader shortForm = checkValid(bytesOf("PROXY UNKNOWN\r\n"));
  CHECK(shortForm.version == 1);
  CHECK_FALSE(shortForm.addresses.has_value());
  CHECK(shortForm.size == 15);

  // Anything after UNKNOWN is ignored, even if it would not parse.
  CHECK_FALSE(checkValid(bytesOf("PROXY UNKNOWN ffff:: ::1 1 2\r\n")).addresses.has_value());
  CHECK_FALSE(checkValid(bytesOf("PROXY UNKNOWN  garbage  999.1 x\r\n")).addresses.has_value());

  // Exactly 107 bytes including CRLF is the limit.
  const std::string at107 = "PROXY UNKNOWN " + std::string(107 - 16, 'x') + "\r\n";
  REQUIRE(at107.size() == 107);
  CHECK(checkValid(bytesOf(at107)).size == 107);
}

TEST_CASE("proxy_protocol: v1 length limit") {
  // The CR is byte 107, so the LF cannot arrive in time.
  const std::string at108 = "PROXY UNKNOWN " + std::string(108 - 16, 'x') + "\r\n";
  REQUIRE(at108.size() == 108);
  checkErrorText(at108, ProxyError::kV1TooLong);
  // Refused at byte 107, without waiting for the 108th.
  const ProxyReadResult r = whole(bytesOf(at108));
  CHECK(r.consumed == 107);

  // No CRLF at all: refused once 107 bytes have come in, even if more follow.
  const Bytes noCrlf = bytesOf("PROXY TCP4 " + std::string(200, '1'));
  checkError(noCrlf, ProxyError::kV1TooLong);
  CHECK(whole(noCrlf).consumed == 107);
}

TEST_CASE("proxy_protocol: v1 malformed") {
  using E = ProxyError;
  // Spacing.
  checkErrorText("PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n", E::kBadV1Syntax);
  checkErrorText("PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", E::kBadV1Syntax);
  checkErrorText("PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", E::kBadV1Syntax);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8  1 2\r\n", E::kBadV1Syntax);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 1  2\r\n", E::kBadV1Syntax);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", E::kBadV1Syntax);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", E::kBadV1Syntax);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", E::kBadV1Syntax);
  checkErrorText("PROXY TCP4\r\n", E::kBadV1Syntax);
  checkErrorText("PROXY TCP4 \r\n", E::kBadV1Syntax);
  checkErrorText("PROXY \r\n", E::kBadV1Syntax);
  checkErrorText("PROXY TCP4\t1.2.3.4 5.6.7.8 1 2\r\n", E::kBadFamily);
  // Line endings: bare LF, CR followed by something else.
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", E::kBadV1Syntax);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n", E::kBadV1Syntax);
  checkErrorText("PROXY UNKNOWN\rx\r\n", E::kBadV1Syntax);
  checkErrorText("PROXY UNKNOWN\n", E::kBadV1Syntax);
  // Protocol word.
  checkErrorText("PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", E::kBadFamily);
  checkErrorText("PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n", E::kBadFamily);
  checkErrorText("PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", E::kBadFamily);
  checkErrorText("PROXY UNKNOWNX\r\n", E::kBadFamily);
  // IPv4.
  checkErrorText("PROXY TCP4 256.2.3.4 5.6.7.8 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.256 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 1.2.3.00 5.6.7.8 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 1..3.4 5.6.7.8 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 1.2.3.4. 5.6.7.8 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 .1.2.3 5.6.7.8 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 1.2.3.1000 5.6.7.8 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 1.2.3.-1 5.6.7.8 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 1.2.3.a 5.6.7.8 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP4 ::1 5.6.7.8 1 2\r\n", E::kBadAddress);
  // IPv6.
  checkErrorText("PROXY TCP6 1.2.3.4 ::1 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP6 ::1 :::1 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP6 ::1 1:2:3:4:5:6:7:8:9 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP6 ::g ::1 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP6 [::1] ::1 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n", E::kBadAddress);
  checkErrorText("PROXY TCP6 " + std::string(46, '0') + " ::1 1 2\r\n", E::kBadAddress);
  checkError(concat(bytesOf("PROXY TCP6 ::1"), concat(Bytes{0}, bytesOf("1 ::1 1 2\r\n"))),
             E::kBadAddress);
  // Ports.
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", E::kBadPort);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n", E::kBadPort);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", E::kBadPort);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 1 00\r\n", E::kBadPort);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", E::kBadPort);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n", E::kBadPort);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n", E::kBadPort);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 1 0x1\r\n", E::kBadPort);
  checkErrorText("PROXY TCP4 1.2.3.4 5.6.7.8 1 100000\r\n", E::kBadPort);
}

TEST_CASE("proxy_protocol: non-PROXY input is refused as soon as it can be told apart") {
  const ProxyReadResult tls = whole(kClientHello);
  CHECK(tls.status == ProxyStatus::kError);
  CHECK(tls.error == ProxyError::kNotProxyProtocol);
  CHECK(tls.consumed == 1);

  const ProxyReadResult http = whole(bytesOf("GET / HTTP/1.1\r\n\r\n"));
  CHECK(http.error == ProxyError::kNotProxyProtocol);
  CHECK(http.consumed == 1);

  const ProxyReadResult proxz = whole(bytesOf("PROXZ TCP4"));
  CHECK(proxz.error == ProxyError::kNotProxyProtocol);
  CHECK(proxz.consumed == 5);

  // "PROXY" without its space is not the v1 prefix.
  const ProxyReadResult noSpace = whole(bytesOf("PROXY\r\n"));
  CHECK(noSpace.error == ProxyError::kNotProxyProtocol);
  CHECK(noSpace.consumed == 6);

  // A wrong byte anywhere in the v2 signature.
  for (size_t i = 0; i < kSignature.size(); ++i) {
    Bytes h = v2(0x21, 0x11, kTcp4Block);
    h[i] ^= 0x40;
    const ProxyReadResult r = whole(h);
    CHECK(r.error == ProxyError::kNotProxyProtocol);
    CHECK(r.consumed == i + 1);
  }

  // Nothing fed yet is not an answer.
  ProxyHeaderReader reader;
  const ProxyReadResult empty = reader.feed({});
  CHECK(empty.status == ProxyStatus::kNeedMore);
  CHECK(empty.consumed == 0);
}

TEST_CASE("proxy_protocol: v2 PROXY TCP4 and TCP6") {
  const ProxyHeader h4 = checkValid(v2(0x21, 0x11, kTcp4Block));
  CHECK(h4.version == 2);
  CHECK(h4.command == ProxyCommand::kProxy);
  CHECK(h4.size == 28);
  REQUIRE(h4.addresses.has_value());
  CHECK(h4.addresses->source.toString() == "192.0.2.1:56324");
  CHECK(h4.addresses->destination.toString() == "198.51.100.7:443");
  CHECK(h4.tlvs.empty());

  const ProxyHeader h6 = checkValid(v2(0x21, 0x21, tcp6Block()));
  CHECK(h6.size == 52);
  REQUIRE(h6.addresses.has_value());
  CHECK(h6.addresses->source.toString() == "[2001:db8::1]:12345");
  CHECK(h6.addresses->destination.toString() == "[::1]:443");
}

TEST_CASE("proxy_protocol: v2 without addresses") {
  // LOCAL (a balancer's health check): the socket's own peer address applies.
  const ProxyHeader local = checkValid(v2(0x20, 0x00, {}));
  CHECK(local.command == ProxyCommand::kLocal);
  CHECK_FALSE(local.addresses.has_value());
  CHECK(local.size == 16);

  // LOCAL with a TCP4 block: the block is skipped, not used.
  const ProxyHeader localWithBlock = checkValid(v2(0x20, 0x11, kTcp4Block));
  CHECK(localWithBlock.command == ProxyCommand::kLocal);
  CHECK_FALSE(localWithBlock.addresses.has_value());

  // PROXY with AF_UNSPEC.
  const ProxyHeader unspec = checkValid(v2(0x21, 0x00, tlv(kPp2TypeNoop, {0, 0})));
  CHECK(unspec.command == ProxyCommand::kProxy);
  CHECK_FALSE(unspec.addresses.has_value());
  REQUIRE(unspec.tlvs.size() == 1);
  CHECK(unspec.tlvs[0].type == kPp2TypeNoop);

  // AF_UNIX stream is accepted as "unknown": 216 address bytes skipped, TLVs after them read.
  const Bytes unixBlock(216, 'u');
  const ProxyHeader unixHeader =
      checkValid(v2(0x21, 0x31, concat(unixBlock, tlv(kPp2TypeAuthority, bytesOf("a.b")))));
  CHECK_FALSE(unixHeader.addresses.has_value());
  REQUIRE(unixHeader.tlvs.size() == 1);
  CHECK(unixHeader.tlvs[0].value == bytesOf("a.b"));
}

TEST_CASE("proxy_protocol: v2 TLVs") {
  const Bytes ssl =
      concat(Bytes{0x07, 0, 0, 0, 0}, concat(tlv(kPp2SubtypeSslVersion, bytesOf("TLSv1.3")),
                                             tlv(kPp2SubtypeSslCn, bytesOf("client"))));
  Bytes payload = kTcp4Block;
  payload = concat(payload, tlv(kPp2TypeAlpn, bytesOf("h2")));
  payload = concat(payload, tlv(kPp2TypeAuthority, bytesOf("abc.tunnel.example")));
  payload = concat(payload, tlv(kPp2TypeUniqueId, Bytes(32, 0xAB)));
  payload = concat(payload, tlv(kPp2TypeSsl, ssl));
  payload = concat(payload, tlv(kPp2TypeNetns, bytesOf("ns1")));
  payload = concat(payload, tlv(kPp2TypeNoop, {}));
  payload = concat(payload, tlv(0xE0, Bytes(300, 0x5A)));  // custom, two-byte length
  const ProxyHeader h = checkValid(v2(0x21, 0x11, payload));
  REQUIRE(h.tlvs.size() == 7);
  CHECK(h.tlvs[0] == ProxyTlv{kPp2TypeAlpn, bytesOf("h2")});
  CHECK(h.tlvs[1] == ProxyTlv{kPp2TypeAuthority, bytesOf("abc.tunnel.example")});
  CHECK(h.tlvs[2] == ProxyTlv{kPp2TypeUniqueId, Bytes(32, 0xAB)});
  CHECK(h.tlvs[3] == ProxyTlv{kPp2TypeSsl, ssl});
  CHECK(h.tlvs[4] == ProxyTlv{kPp2TypeNetns, bytesOf("ns1")});
  CHECK(h.tlvs[5] == ProxyTlv{kPp2TypeNoop, {}});
  CHECK(h.tlvs[6] == ProxyTlv{0xE0, Bytes(300, 0x5A)});
  REQUIRE(h.addresses.has_value());
  CHECK(h.addresses->source.toString() == "192.0.2.1:56324");
}

TEST_CASE("proxy_protocol: v2 CRC32C") {
  const ProxyEndpoints e{ProxyAddress::ipv4({10, 0, 0, 1}, 1000),
                         ProxyAddress::ipv4({10, 0, 0, 2}, 443)};
  const std::vector<ProxyTlv> tlvs = {{kPp2TypeAuthority, bytesOf("x.example")}};
  const auto encoded = encodeProxyV2(ProxyCommand::kProxy, e, tlvs, true);
  REQUIRE(encoded.has_value());
  const ProxyHeader h = checkValid(*encoded);
  REQUIRE(h.tlvs.size() == 2);
  CHECK(h.tlvs[1].type == kPp2TypeCrc32c);
  REQUIRE(h.tlvs[1].value.size() == 4);

  // Recompute independently: CRC over the header with the field zeroed, stored big-endian.
  Bytes zeroed = *encoded;
  std::fill(zeroed.end() - 4, zeroed.end(), 0);
  const uint32_t crc = crc32c(zeroed);
  CHECK(h.tlvs[1].value == Bytes{static_cast<uint8_t>(crc >> 24), static_cast<uint8_t>(crc >> 16),
                                 static_cast<uint8_t>(crc >> 8), static_cast<uint8_t>(crc)});

  // A CRC32C placed before other TLVs is checked too.
  Bytes first = concat(kTcp4Block, tlv(kPp2TypeCrc32c, {0, 0, 0, 0}));
  first = concat(first, tlv(kPp2TypeAlpn, bytesOf("http/1.1")));
  Bytes firstHeader = v2(0x21, 0x11, first);
  const uint32_t firstCrc = crc32c(firstHeader);
  for (size_t i = 0; i < 4; ++i) {
    firstHeader[16 + 12 + 3 + i] = static_cast<uint8_t>(firstCrc >> (24 - 8 * i));
  }
  CHECK(checkValid(firstHeader).tlvs.size() == 2);

  // Any flipped bit anywhere in the header breaks it.
  for (size_t i = 0; i < encoded->size(); ++i) {
    if (i < 16) continue;  // the fixed part has its own errors
    // CRC32C's type 0x03 becomes AUTHORITY (0x02): a valid header with no checksum at all.
    if (i == encoded->size() - 7) continue;
    Bytes bad = *encoded;
    bad[i] ^= 0x01;
    const ProxyReadResult r = whole(bad);
    CHECK(r.status == ProxyStatus::kError);
    // Flipping a TLV length byte makes the TLVs no longer tile the payload.
    CHECK((r.error == ProxyError::kBadCrc32c || r.error == ProxyError::kBadTlv));
  }
  Bytes badCrc = *encoded;
  badCrc.back() ^= 0x80;
  checkError(badCrc, ProxyError::kBadCrc32c);
  Bytes badAddress = *encoded;
  badAddress[16] ^= 0x01;
  checkError(badAddress, ProxyError::kBadCrc32c);

  // Wrong CRC TLV shapes.
  checkError(v2(0x21, 0x11, concat(kTcp4Block, tlv(kPp2TypeCrc32c, {0, 0, 0}))),
             ProxyError::kBadTlv);
  checkError(v2(0x21, 0x11, concat(kTcp4Block, tlv(kPp2TypeCrc32c, {0, 0, 0, 0, 0}))),
             ProxyError::kBadTlv);
  Bytes twice = concat(kTcp4Block, tlv(kPp2TypeCrc32c, {0, 0, 0, 0}));
  twice = concat(twice, tlv(kPp2TypeCrc32c, {0, 0, 0, 0}));
  checkError(v2(0x21, 0x11, twice), ProxyError::kBadTlv);
}

TEST_CASE("proxy_protocol: v2 fixed part malformed") {
  using E = ProxyError;
  checkError(v2(0x11, 0x11, kTcp4Block), E::kBadVersion);
  checkError(v2(0x31, 0x11, kTcp4Block), E::kBadVersion);
  checkError(v2(0x01, 0x11, kTcp4Block), E::kBadVersion);
  checkError(v2(0xF1, 0x11, kTcp4Block), E::kBadVersion);
  checkError(v2(0x22, 0x11, kTcp4Block), E::kBadCommand);
  checkError(v2(0x2F, 0x11, kTcp4Block), E::kBadCommand);
  // Refused at byte 13, before the rest arrives.
  CHECK(whole(concat(kSignature, {0x11})).consumed == 13);
  CHECK(whole(concat(kSignature, {0x11})).error == E::kBadVersion);

  for (const uint8_t fam :
       Bytes{0x01, 0x02, 0x10, 0x12, 0x13, 0x20, 0x22, 0x30, 0x32, 0x41, 0xFF}) {
    INFO("fam ", int{fam});
    checkError(v2(0x21, fam, Bytes(216, 0)), E::kBadFamily);
    CHECK(whole(v2(0x21, fam, {})).consumed == 14);
  }

  // Lengths shorter than the family's address block.
  checkError(v2(0x21, 0x11, Bytes(11, 0)), E::kLengthMismatch);
  checkError(v2(0x21, 0x21, Bytes(35, 0)), E::kLengthMismatch);
  checkError(v2(0x21, 0x31, Bytes(215, 0)), E::kLengthMismatch);
  checkError(v2(0x20, 0x11, {}), E::kLengthMismatch);
  // Decided from the length field alone, before any payload byte arrives.
  const ProxyReadResult early = whole(v2(0x21, 0x21, {}, 12));
  CHECK(early.error == E::kLengthMismatch);
  CHECK(early.consumed == 16);
}

TEST_CASE("proxy_protocol: v2 size limits") {
  // Default maximum 4096: 16 + 4080 fits, 16 + 4081 does not.
  const Bytes fits = v2(0x21, 0x11, concat(kTcp4Block, tlv(0xE1, Bytes(4080 - 12 - 3, 1))));
  CHECK(checkValid(fits).size == 4096);
  const Bytes over = v2(0x21, 0x11, concat(kTcp4Block, tlv(0xE1, Bytes(4081 - 12 - 3, 1))));
  checkError(over, ProxyError::kTooLarge);
  // Refused on the length field: nothing past it is buffered.
  CHECK(whole(over).consumed == 16);

  // A caller-chosen smaller maximum.
  checkError(v2(0x21, 0x11, concat(kTcp4Block, tlv(kPp2TypeNoop, Bytes(10, 0)))),
             ProxyError::kTooLarge, 40);
  CHECK(checkValid(v2(0x21, 0x11, kTcp4Block), 28).size == 28);
  checkError(v2(0x21, 0x11, kTcp4Block), ProxyError::kTooLarge, 27);

  // The largest header the wire can express, read byte by byte in linear time.
  const size_t maxTlv = 65535 - 12 - 3;
  const Bytes largest = v2(0x21, 0x11, concat(kTcp4Block, tlv(0xE2, Bytes(maxTlv, 7))));
  REQUIRE(largest.size() == kProxyV2MaxSize);
  const Fed fed = feedInPieces(concat(largest, kClientHello), 1, kProxyV2MaxSize);
  REQUIRE(fed.last.status == ProxyStatus::kDone);
  CHECK(fed.consumed == kProxyV2MaxSize);
  CHECK(fed.last.header.tlvs.at(0).value.size() == maxTlv);
  // A maximum above what the wire allows is capped rather than trusted.
  CHECK(whole(largest, 1 << 20).status == ProxyStatus::kDone);
  checkError(largest, ProxyError::kTooLarge, kProxyV2MaxSize - 1);
}

TEST_CASE("proxy_protocol: v2 TLV framing") {
  using E = ProxyError;
  // Leftover bytes too short for a TLV header.
  checkError(v2(0x21, 0x11, concat(kTcp4Block, {0x01})), E::kBadTlv);
  checkError(v2(0x21, 0x11, concat(kTcp4Block, {0x01, 0x00})), E::kBadTlv);
  checkError(v2(0x21, 0x00, {0x04}), E::kBadTlv);
  // A TLV longer than what is left.
  checkError(v2(0x21, 0x11, concat(kTcp4Block, {0x02, 0x00, 0x05, 'a', 'b', 'c', 'd'})),
             E::kBadTlv);
  checkError(v2(0x21, 0x11, concat(kTcp4Block, {0x02, 0xFF, 0xFF, 'a'})), E::kBadTlv);
  // A good TLV followed by a truncated one.
  checkError(v2(0x21, 0x11, concat(concat(kTcp4Block, tlv(1, bytesOf("h2"))), {0x02, 0x00, 0x09})),
             E::kBadTlv);
  // SSL TLV: too short for client + verify, and sub-TLVs that do not tile.
  checkError(v2(0x21, 0x11, concat(kTcp4Block, tlv(kPp2TypeSsl, {1, 0, 0, 0}))), E::kBadTlv);
  checkError(v2(0x21, 0x11, concat(kTcp4Block, tlv(kPp2TypeSsl, {1, 0, 0, 0, 0, 0x21, 0, 9}))),
             E::kBadTlv);
  checkError(v2(0x21, 0x11, concat(kTcp4Block, tlv(kPp2TypeSsl, {1, 0, 0, 0, 0, 0x21}))),
             E::kBadTlv);
  // A sub-TLV that overruns what is left of the SSL value though not the whole value.
  checkError(
      v2(0x21, 0x11, concat(kTcp4Block, tlv(kPp2TypeSsl, {1, 0, 0, 0, 0, 0x21, 0, 4, 'a', 'b'}))),
      E::kBadTlv);
  CHECK(checkValid(v2(0x21, 0x11, concat(kTcp4Block, tlv(kPp2TypeSsl, {1, 0, 0, 0, 0}))))
            .tlvs.size() == 1);
}

TEST_CASE("proxy_protocol: v2 lengths that lie") {
  // Too long: the reader waits for bytes that are not header, then the ClientHello it swallowed
  // fails as TLVs (0x16 0x03 0x01 claims 769 bytes).
  const Bytes longer = v2(0x21, 0x11, kTcp4Block, 12 + 8);
  CHECK(whole(longer).status == ProxyStatus::kNeedMore);
  const ProxyReadResult swallowed = whole(concat(longer, kClientHello));
  CHECK(swallowed.status == ProxyStatus::kError);
  CHECK(swallowed.error == ProxyError::kBadTlv);

  // Too short: the header ends where its length says; the rest is left to the caller.
  const Bytes withTlv = v2(0x21, 0x11, concat(kTcp4Block, tlv(1, bytesOf("h2"))), 12);
  const ProxyReadResult r = whole(withTlv);
  REQUIRE(r.status == ProxyStatus::kDone);
  CHECK(r.consumed == 28);
  CHECK(r.header.tlvs.empty());
}

TEST_CASE("proxy_protocol: finished reader repeats its answer") {
  ProxyHeaderReader reader;
  const Bytes h = concat(bytesOf("PROXY UNKNOWN\r\n"), kClientHello);
  const ProxyReadResult first = reader.feed(h);
  REQUIRE(first.status == ProxyStatus::kDone);
  CHECK(first.consumed == 15);
  const ProxyReadResult again = reader.feed(kClientHello);
  CHECK(again.status == ProxyStatus::kDone);
  CHECK(again.consumed == 0);
  CHECK(again.header == first.header);

  ProxyHeaderReader refused;
  CHECK(refused.feed(kClientHello).error == ProxyError::kNotProxyProtocol);
  const ProxyReadResult still = refused.feed(bytesOf("PROXY UNKNOWN\r\n"));
  CHECK(still.status == ProxyStatus::kError);
  CHECK(still.error == ProxyError::kNotProxyProtocol);
  CHECK(still.consumed == 0);
}

TEST_CASE("proxy_protocol: v1 encoder round trips") {
  const ProxyEndpoints e4{ProxyAddress::ipv4({192, 0, 2, 1}, 56324),
                          ProxyAddress::ipv4({198, 51, 100, 7}, 443)};
  const Bytes v1four = encodeProxyV1(e4);
  CHECK(v1four == bytesOf("PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n"));
  CHECK(checkValid(v1four).addresses == e4);

  std::array<uint8_t, 16> a{0x20, 0x01, 0x0D, 0xB8};
  a[15] = 1;
  std::array<uint8_t, 16> b{};
  b[15] = 1;
  const ProxyEndpoints e6{ProxyAddress::ipv6(a, 0), ProxyAddress::ipv6(b, 65535)};
  const Bytes v1six = encodeProxyV1(e6);
  CHECK(v1six == bytesOf("PROXY TCP6 2001:db8::1 ::1 0 65535\r\n"));
  CHECK(checkValid(v1six).addresses == e6);

  CHECK(encodeProxyV1(std::nullopt) == bytesOf("PROXY UNKNOWN\r\n"));

  // Mixed families become IPv6 with the IPv4 side mapped.
  const ProxyEndpoints mixed{ProxyAddress::ipv4({1, 2, 3, 4}, 5), ProxyAddress::ipv6(b, 6)};
  const Bytes v1mixed = encodeProxyV1(mixed);
  CHECK(v1mixed == bytesOf("PROXY TCP6 ::ffff:1.2.3.4 ::1 5 6\r\n"));
  const ProxyHeader h = checkValid(v1mixed);
  REQUIRE(h.addresses.has_value());
  CHECK(h.addresses->source.toString() == "[::ffff:1.2.3.4]:5");
}

TEST_CASE("proxy_protocol: v2 encoder round trips") {
  const ProxyEndpoints e4{ProxyAddress::ipv4({192, 0, 2, 1}, 56324),
                          ProxyAddress::ipv4({198, 51, 100, 7}, 443)};
  const auto four = encodeProxyV2(ProxyCommand::kProxy, e4);
  REQUIRE(four.has_value());
  CHECK(*four == v2(0x21, 0x11, kTcp4Block));
  CHECK(checkValid(*four).addresses == e4);

  const auto six = encodeProxyV2(ProxyCommand::kProxy, std::nullopt);
  REQUIRE(six.has_value());
  CHECK(*six == v2(0x21, 0x00, {}));

  const auto local = encodeProxyV2(ProxyCommand::kLocal, std::nullopt);
  REQUIRE(local.has_value());
  CHECK(*local == v2(0x20, 0x00, {}));
  CHECK(checkValid(*local).command == ProxyCommand::kLocal);

  std::array<uint8_t, 16> a{0x20, 0x01, 0x0D, 0xB8};
  a[15] = 1;
  std::array<uint8_t, 16> b{};
  b[15] = 1;
  const ProxyEndpoints e6{ProxyAddress::ipv6(a, 12345), ProxyAddress::ipv6(b, 443)};
  const std::vector<ProxyTlv> tlvs = {{kPp2TypeAlpn, bytesOf("h2")},
                                      {kPp2TypeAuthority, bytesOf("r.abc.example")},
                                      {kPp2TypeNoop, {}}};
  const auto withTlvs = encodeProxyV2(ProxyCommand::kProxy, e6, tlvs);
  REQUIRE(withTlvs.has_value());
  Bytes expected = tcp6Block();
  for (const auto& t : tlvs) expected = concat(expected, tlv(t.type, t.value));
  CHECK(*withTlvs == v2(0x21, 0x21, expected));
  const ProxyHeader h = checkValid(*withTlvs);
  CHECK(h.addresses == e6);
  CHECK(h.tlvs == tlvs);

  // Mixed families: IPv4-mapped IPv6.
  const auto mixed =
      encodeProxyV2(ProxyCommand::kProxy,
                    ProxyEndpoints{ProxyAddress::ipv4({1, 2, 3, 4}, 5), ProxyAddress::ipv6(b, 6)});
  REQUIRE(mixed.has_value());
  const ProxyHeader m = checkValid(*mixed);
  REQUIRE(m.addresses.has_value());
  CHECK(m.addresses->source.toString() == "[::ffff:1.2.3.4]:5");
  CHECK(m.addresses->destination.toString() == "[::1]:6");

  // TLVs that cannot fit the 16-bit length are refused, not truncated.
  const std::vector<ProxyTlv> tooBig = {{0xE0, Bytes(65535, 0)}};
  CHECK_FALSE(encodeProxyV2(ProxyCommand::kProxy, e4, tooBig).has_value());
  const std::vector<ProxyTlv> valueTooBig = {{0xE0, Bytes(65536, 0)}};
  CHECK_FALSE(encodeProxyV2(ProxyCommand::kProxy, std::nullopt, valueTooBig).has_value());
  const std::vector<ProxyTlv> exact = {{0xE0, Bytes(65535 - 12 - 3, 0)}};
  const auto largest = encodeProxyV2(ProxyCommand::kProxy, e4, exact);
  REQUIRE(largest.has_value());
  CHECK(largest->size() == kProxyV2MaxSize);
  CHECK_FALSE(encodeProxyV2(ProxyCommand::kProxy, e4, exact, true).has_value());
}

}  // namespace ot
