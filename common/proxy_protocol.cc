// One concern over ~450 lines: the PROXY protocol wire format, v1 and v2, both directions. The
// resumable reader and the encoders share the signature, the family table, the address text forms
// and CRC32C; the encoders are what the reader's tests and fuzz target check it against.
#include "common/proxy_protocol.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace ot {
namespace {

constexpr std::array<uint8_t, 12> kV2Signature = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                                  0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
constexpr std::string_view kV1Prefix = "PROXY ";

// v2 family/transport bytes we accept. DGRAM (0x12, 0x22, 0x32) is refused: relayd only listens
// on TCP, so a datagram header there means a misconfigured balancer.
constexpr uint8_t kFamUnspec = 0x00;
constexpr uint8_t kFamTcp4 = 0x11;
constexpr uint8_t kFamTcp6 = 0x21;
constexpr uint8_t kFamUnixStream = 0x31;

constexpr size_t v2AddressBlockSize(uint8_t fam) {
  switch (fam) {
    case kFamTcp4:
      return 12;
    case kFamTcp6:
      return 36;
    case kFamUnixStream:
      return 216;
    default:
      return 0;
  }
}

constexpr std::array<uint32_t, 256> makeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1U) != 0 ? (c >> 1) ^ 0x82F63B78U : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = makeCrc32cTable();

uint32_t crc32cUpdate(uint32_t state, std::span<const uint8_t> bytes) {
  for (const uint8_t b : bytes) state = kCrc32cTable[(state ^ b) & 0xFFU] ^ (state >> 8);
  return state;
}

uint16_t readBe16(std::span<const uint8_t> b, size_t at) {
  return static_cast<uint16_t>((b[at] << 8) | b[at + 1]);
}

uint32_t readBe32(std::span<const uint8_t> b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) |
         uint32_t{b[at + 3]};
}

void appendBe16(std::vector<uint8_t>& out, size_t value) {
  out.push_back(static_cast<uint8_t>((value >> 8) & 0xFFU));
  out.push_back(static_cast<uint8_t>(value & 0xFFU));
}

// Decimal without sign or leading zeros ("0" itself is fine), at most maxDigits, at most max.
std::optional<uint32_t> parseDecimal(std::string_view text, size_t maxDigits, uint32_t max) {
  if (text.empty() || text.size() > maxDigits) return std::nullopt;
  if (text.size() > 1 && text[0] == '0') return std::nullopt;
  uint32_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value > max) return std::nullopt;
  return value;
}

std::optional<std::array<uint8_t, 4>> parseIpv4(std::string_view text) {
  std::array<uint8_t, 4> out{};
  for (size_t i = 0; i < 4; ++i) {
    const size_t dot = i < 3 ? text.find('.') : text.size();
    if (dot == std::string_view::npos) return std::nullopt;
    const auto octet = parseDecimal(text.substr(0, dot), 3, 255);
    if (!octet) return std::nullopt;
    out[i] = static_cast<uint8_t>(*octet);
    text.remove_prefix(std::min(text.size(), dot + 1));
  }
  return out;
}

std::optional<std::array<uint8_t, 16>> parseIpv6(std::string_view text) {
  // Checked first so inet_pton never sees an embedded NUL or anything past INET6_ADDRSTRLEN.
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  for (const char c : text) {
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex && c != ':' && c != '.') return std::nullopt;
  }
  std::array<char, INET6_ADDRSTRLEN> z{};
  std::memcpy(z.data(), text.data(), text.size());
  std::array<uint8_t, 16> out{};
  if (inet_pton(AF_INET6, z.data(), out.data()) != 1) return std::nullopt;
  return out;
}

std::string addressText(const ProxyAddress& a) {
  std::array<char, INET6_ADDRSTRLEN> text{};
  const int af = a.family == ProxyAddress::Family::kInet4 ? AF_INET : AF_INET6;
  if (inet_ntop(af, a.bytes.data(), text.data(), text.size()) == nullptr) return {};
  return std::string(text.data());
}

ProxyAddress toIpv6(const ProxyAddress& a) {
  if (a.family == ProxyAddress::Family::kInet6) return a;
  std::array<uint8_t, 16> mapped{};
  mapped[10] = 0xFF;
  mapped[11] = 0xFF;
  std::copy_n(a.bytes.begin(), 4, mapped.begin() + 12);
  return ProxyAddress::ipv6(mapped, a.port);
}

// Neither version can carry one IPv4 and one IPv6 endpoint, so both become IPv6.
ProxyEndpoints sameFamily(ProxyEndpoints e) {
  if (e.source.family != e.destination.family) {
    e.source = toIpv6(e.source);
    e.destination = toIpv6(e.destination);
  }
  return e;
}

struct ParseOutcome {
  ProxyError error = ProxyError::kNone;
  ProxyHeader header;
};

ParseOutcome parseV1(std::span<const uint8_t> line) {
  // The line is complete and known to start with "PROXY " and end with CRLF.
  std::string_view text(reinterpret_cast<const char*>(line.data()), line.size() - 2);
  text.remove_prefix(kV1Prefix.size());
  ParseOutcome out;
  out.header.version = 1;
  out.header.size = line.size();

  const std::string_view proto = text.substr(0, text.find(' '));
  if (proto == "UNKNOWN") return out;  // the spec says to ignore the rest of the line
  if (proto.empty()) return {ProxyError::kBadV1Syntax, {}};
  if (proto != "TCP4" && proto != "TCP6") return {ProxyError::kBadFamily, {}};

  // Exactly five fields separated by single spaces: an empty field is a doubled or stray space.
  std::array<std::string_view, 5> fields;
  for (size_t i = 0; i < fields.size(); ++i) {
    const size_t space = text.find(' ');
    const bool last = i + 1 == fields.size();
    if ((space == std::string_view::npos) != last) return {ProxyError::kBadV1Syntax, {}};
    fields[i] = text.substr(0, space);
    if (fields[i].empty()) return {ProxyError::kBadV1Syntax, {}};
    if (!last) text.remove_prefix(space + 1);
  }

  ProxyEndpoints e;
  if (proto == "TCP4") {
    const auto src = parseIpv4(fields[1]);
    const auto dst = parseIpv4(fields[2]);
    if (!src || !dst) return {ProxyError::kBadAddress, {}};
    e.source = ProxyAddress::ipv4(*src, 0);
    e.destination = ProxyAddress::ipv4(*dst, 0);
  } else {
    const auto src = parseIpv6(fields[1]);
    const auto dst = parseIpv6(fields[2]);
    if (!src || !dst) return {ProxyError::kBadAddress, {}};
    e.source = ProxyAddress::ipv6(*src, 0);
    e.destination = ProxyAddress::ipv6(*dst, 0);
  }
  const auto sport = parseDecimal(fields[3], 5, 65535);
  const auto dport = parseDecimal(fields[4], 5, 65535);
  if (!sport || !dport) return {ProxyError::kBadPort, {}};
  e.source.port = static_cast<uint16_t>(*sport);
  e.destination.port = static_cast<uint16_t>(*dport);
  out.header.addresses = e;
  return out;
}

// Whether type/length/value records fill `bytes` exactly, none running past the end.
bool tlvsTile(std::span<const uint8_t> bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < 3) return false;
    const size_t len = readBe16(bytes, pos + 1);
    pos += 3;
    if (len > bytes.size() - pos) return false;
    pos += len;
  }
  return true;
}

// The SSL TLV's value is client (1) + verify (4) + sub-TLVs.
bool sslTlvWellFormed(std::span<const uint8_t> value) {
  return value.size() >= 5 && tlvsTile(value.subspan(5));
}

ParseOutcome parseV2(std::span<const uint8_t> h) {
  // The fixed part is validated byte by byte already; h holds exactly the whole header.
  const auto command = static_cast<ProxyCommand>(h[12] & 0x0FU);
  const uint8_t fam = h[13];
  const size_t addressSize = v2AddressBlockSize(fam);
  const auto payload = h.subspan(kProxyV2FixedSize);
  ParseOutcome out;
  out.header.version = 2;
  out.header.command = command;
  out.header.size = h.size();

  if (command == ProxyCommand::kProxy && fam == kFamTcp4) {
    ProxyEndpoints e;
    e.source =
        ProxyAddress::ipv4({payload[0], payload[1], payload[2], payload[3]}, readBe16(payload, 8));
    e.destination =
        ProxyAddress::ipv4({payload[4], payload[5], payload[6], payload[7]}, readBe16(payload, 10));
    out.header.addresses = e;
  } else if (command == ProxyCommand::kProxy && fam == kFamTcp6) {
    std::array<uint8_t, 16> src{};
    std::array<uint8_t, 16> dst{};
    std::copy_n(payload.begin(), 16, src.begin());
    std::copy_n(payload.begin() + 16, 16, dst.begin());
    out.header.addresses = ProxyEndpoints{ProxyAddress::ipv6(src, readBe16(payload, 32)),
                                          ProxyAddress::ipv6(dst, readBe16(payload, 34))};
  }

  const auto tlvs = payload.subspan(addressSize);
  if (!tlvsTile(tlvs)) return {ProxyError::kBadTlv, {}};
  std::optional<size_t> crcAt;  // offset of the CRC32C value within h
  size_t pos = 0;
  while (pos < tlvs.size()) {
    const uint8_t type = tlvs[pos];
    const size_t len = readBe16(tlvs, pos + 1);
    pos += 3;
    const auto value = tlvs.subspan(pos, len);
    if (type == kPp2TypeCrc32c) {
      if (len != 4 || crcAt) return {ProxyError::kBadTlv, {}};
      crcAt = kProxyV2FixedSize + addressSize + pos;
    }
    if (type == kPp2TypeSsl && !sslTlvWellFormed(value)) return {ProxyError::kBadTlv, {}};
    out.header.tlvs.push_back(ProxyTlv{type, std::vector<uint8_t>(value.begin(), value.end())});
    pos += len;
  }

  if (crcAt) {
    // The sender computed the checksum with its own field zeroed.
    constexpr std::array<uint8_t, 4> kZero{};
    uint32_t state = crc32cUpdate(0xFFFFFFFFU, h.first(*crcAt));
    state = crc32cUpdate(state, kZero);
    state = crc32cUpdate(state, h.subspan(*crcAt + 4));
    if (~state != readBe32(h, *crcAt)) return {ProxyError::kBadCrc32c, {}};
  }
  return out;
}

}  // namespace

std::string_view proxyErrorName(ProxyError error) {
  switch (error) {
    case ProxyError::kNone:
      return "none";
    case ProxyError::kNotProxyProtocol:
      return "not_proxy_protocol";
    case ProxyError::kBadV1Syntax:
      return "bad_v1_syntax";
    case ProxyError::kV1TooLong:
      return "v1_too_long";
    case ProxyError::kBadVersion:
      return "bad_version";
    case ProxyError::kBadCommand:
      return "bad_command";
    case ProxyError::kBadFamily:
      return "bad_family";
    case ProxyError::kBadAddress:
      return "bad_address";
    case ProxyError::kBadPort:
      return "bad_port";
    case ProxyError::kLengthMismatch:
      return "length_mismatch";
    case ProxyError::kTooLarge:
      return "too_large";
    case ProxyError::kBadTlv:
      return "bad_tlv";
    case ProxyError::kBadCrc32c:
      return "bad_crc32c";
  }
  return "unknown";
}

ProxyAddress ProxyAddress::ipv4(std::array<uint8_t, 4> address, uint16_t port) {
  ProxyAddress a;
  a.family = Family::kInet4;
  std::copy(address.begin(), address.end(), a.bytes.begin());
  a.port = port;
  return a;
}

ProxyAddress ProxyAddress::ipv6(std::array<uint8_t, 16> address, uint16_t port) {
  ProxyAddress a;
  a.family = Family::kInet6;
  a.bytes = address;
  a.port = port;
  return a;
}

std::string ProxyAddress::toString() const {
  const std::string portText = std::to_string(port);
  if (family == Family::kInet4) return addressText(*this) + ":" + portText;
  return "[" + addressText(*this) + "]:" + portText;
}

ProxyHeaderReader::ProxyHeaderReader(size_t maxHeaderSize)
    : maxHeaderSize_(std::min(maxHeaderSize, kProxyV2MaxSize)) {}

ProxyError ProxyHeaderReader::takeV1Byte(uint8_t byte) {
  buffer_.push_back(byte);
  const size_t n = buffer_.size();
  if (n <= kV1Prefix.size()) {
    return byte == static_cast<uint8_t>(kV1Prefix[n - 1]) ? ProxyError::kNone
                                                          : ProxyError::kNotProxyProtocol;
  }
  // Only the last two bytes matter, so each byte costs O(1).
  if (buffer_[n - 2] == '\r') {
    if (byte != '\n') return ProxyError::kBadV1Syntax;
    v1LineComplete_ = true;
    return ProxyError::kNone;
  }
  if (byte == '\n') return ProxyError::kBadV1Syntax;  // LF without CR
  if (n >= kProxyV1MaxSize) return ProxyError::kV1TooLong;
  return ProxyError::kNone;
}

ProxyError ProxyHeaderReader::takeV2FixedByte(uint8_t byte) {
  buffer_.push_back(byte);
  const size_t n = buffer_.size();
  if (n <= kV2Signature.size()) {
    return byte == kV2Signature[n - 1] ? ProxyError::kNone : ProxyError::kNotProxyProtocol;
  }
  if (n == 13) {
    if ((byte >> 4) != 2) return ProxyError::kBadVersion;
    if ((byte & 0x0FU) > 1) return ProxyError::kBadCommand;
  } else if (n == 14) {
    if (byte != kFamUnspec && byte != kFamTcp4 && byte != kFamTcp6 && byte != kFamUnixStream) {
      return ProxyError::kBadFamily;
    }
  } else if (n == kProxyV2FixedSize) {
    // Refused before a single payload byte is buffered.
    const size_t len = readBe16(buffer_, 14);
    if (kProxyV2FixedSize + len > maxHeaderSize_) return ProxyError::kTooLarge;
    if (len < v2AddressBlockSize(buffer_[13])) return ProxyError::kLengthMismatch;
    v2TotalSize_ = kProxyV2FixedSize + len;
    buffer_.reserve(v2TotalSize_);
  }
  return ProxyError::kNone;
}

ProxyReadResult ProxyHeaderReader::finish(ProxyReadResult result) {
  stage_ = Stage::kFinished;
  buffer_ = {};
  final_ = result;
  return result;
}

ProxyReadResult ProxyHeaderReader::feed(std::span<const uint8_t> bytes) {
  if (stage_ == Stage::kFinished) {
    ProxyReadResult again = final_;
    again.consumed = 0;
    return again;
  }
  const auto fail = [this](ProxyError error, size_t used) {
    return finish({ProxyStatus::kError, error, used, {}});
  };
  const auto done = [this, &fail](ParseOutcome outcome, size_t used) {
    if (outcome.error != ProxyError::kNone) return fail(outcome.error, used);
    return finish({ProxyStatus::kDone, ProxyError::kNone, used, std::move(outcome.header)});
  };

  size_t used = 0;
  while (used < bytes.size()) {
    if (stage_ == Stage::kDetect) {
      // One byte tells the versions apart, and anything else (a ClientHello's 0x16) is refused.
      if (bytes[used] == static_cast<uint8_t>(kV1Prefix[0])) {
        stage_ = Stage::kV1;
      } else if (bytes[used] == kV2Signature[0]) {
        stage_ = Stage::kV2Fixed;
      } else {
        return fail(ProxyError::kNotProxyProtocol, used + 1);
      }
    }
    if (stage_ == Stage::kV1) {
      const ProxyError error = takeV1Byte(bytes[used++]);
      if (error != ProxyError::kNone) return fail(error, used);
      if (v1LineComplete_) return done(parseV1(buffer_), used);
    } else if (stage_ == Stage::kV2Fixed) {
      const ProxyError error = takeV2FixedByte(bytes[used++]);
      if (error != ProxyError::kNone) return fail(error, used);
      if (buffer_.size() == kProxyV2FixedSize) stage_ = Stage::kV2Payload;
    } else {
      const size_t take = std::min(v2TotalSize_ - buffer_.size(), bytes.size() - used);
      buffer_.insert(buffer_.end(), bytes.begin() + static_cast<std::ptrdiff_t>(used),
                     bytes.begin() + static_cast<std::ptrdiff_t>(used + take));
      used += take;
    }
    if (stage_ == Stage::kV2Payload && buffer_.size() == v2TotalSize_) {
      return done(parseV2(buffer_), used);
    }
  }
  return {ProxyStatus::kNeedMore, ProxyError::kNone, used, {}};
}

ProxyReadResult readProxyHeader(std::span<const uint8_t> bytes, size_t maxHeaderSize) {
  ProxyHeaderReader reader(maxHeaderSize);
  return reader.feed(bytes);
}

std::vector<uint8_t> encodeProxyV1(const std::optional<ProxyEndpoints>& addresses) {
  std::string line = "PROXY UNKNOWN\r\n";
  if (addresses) {
    const ProxyEndpoints e = sameFamily(*addresses);
    line = std::string("PROXY ") +
           (e.source.family == ProxyAddress::Family::kInet4 ? "TCP4 " : "TCP6 ") +
           addressText(e.source) + " " + addressText(e.destination) + " " +
           std::to_string(e.source.port) + " " + std::to_string(e.destination.port) + "\r\n";
  }
  return {line.begin(), line.end()};
}

std::optional<std::vector<uint8_t>> encodeProxyV2(ProxyCommand command,
                                                  const std::optional<ProxyEndpoints>& addresses,
                                                  std::span<const ProxyTlv> tlvs,
                                                  bool appendCrc32c) {
  std::vector<uint8_t> out(kV2Signature.begin(), kV2Signature.end());
  out.push_back(static_cast<uint8_t>(0x20U | static_cast<uint8_t>(command)));
  if (!addresses) {
    out.push_back(kFamUnspec);
    appendBe16(out, 0);  // patched below
  } else {
    const ProxyEndpoints e = sameFamily(*addresses);
    const bool v4 = e.source.family == ProxyAddress::Family::kInet4;
    const size_t width = v4 ? 4 : 16;
    out.push_back(v4 ? kFamTcp4 : kFamTcp6);
    appendBe16(out, 0);
    out.insert(out.end(), e.source.bytes.begin(), e.source.bytes.begin() + width);
    out.insert(out.end(), e.destination.bytes.begin(), e.destination.bytes.begin() + width);
    appendBe16(out, e.source.port);
    appendBe16(out, e.destination.port);
  }
  for (const ProxyTlv& tlv : tlvs) {
    if (tlv.value.size() > 0xFFFF || out.size() + 3 + tlv.value.size() > kProxyV2MaxSize) {
      return std::nullopt;
    }
    out.push_back(tlv.type);
    appendBe16(out, tlv.value.size());
    out.insert(out.end(), tlv.value.begin(), tlv.value.end());
  }
  if (appendCrc32c) {
    if (out.size() + 7 > kProxyV2MaxSize) return std::nullopt;
    out.insert(out.end(), {kPp2TypeCrc32c, 0, 4, 0, 0, 0, 0});
  }
  const size_t len = out.size() - kProxyV2FixedSize;
  out[14] = static_cast<uint8_t>(len >> 8);
  out[15] = static_cast<uint8_t>(len & 0xFFU);
  if (appendCrc32c) {
    const uint32_t crc = crc32c(out);
    for (size_t i = 0; i < 4; ++i)
      out[out.size() - 4 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  }
  return out;
}

uint32_t crc32c(std::span<const uint8_t> bytes) {
  return ~crc32cUpdate(0xFFFFFFFFU, bytes);
}

}  // namespace ot
