// PROXY protocol v1/v2 (HAProxy's proxy-protocol.txt): a resumable reader for the header a load
// balancer puts in front of a visitor's TLS bytes, and encoders for the same header. Pure codec:
// no I/O, no logging, no exceptions. A ProxyHeaderReader belongs to one connection and is only
// touched by that connection's loop thread; it buffers at most the header itself.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ot {

// v2 TLV types (spec section 2.2). Unknown types are still returned to the caller.
inline constexpr uint8_t kPp2TypeAlpn = 0x01;
inline constexpr uint8_t kPp2TypeAuthority = 0x02;
inline constexpr uint8_t kPp2TypeCrc32c = 0x03;
inline constexpr uint8_t kPp2TypeNoop = 0x04;
inline constexpr uint8_t kPp2TypeUniqueId = 0x05;
inline constexpr uint8_t kPp2TypeSsl = 0x20;
inline constexpr uint8_t kPp2SubtypeSslVersion = 0x21;
inline constexpr uint8_t kPp2SubtypeSslCn = 0x22;
inline constexpr uint8_t kPp2SubtypeSslCipher = 0x23;
inline constexpr uint8_t kPp2SubtypeSslSigAlg = 0x24;
inline constexpr uint8_t kPp2SubtypeSslKeyAlg = 0x25;
inline constexpr uint8_t kPp2TypeNetns = 0x30;

inline constexpr size_t kProxyV1MaxSize = 107;              // including CRLF
inline constexpr size_t kProxyV2FixedSize = 16;             // signature + ver/cmd + fam + len
inline constexpr size_t kProxyV2MaxSize = 16 + 65535;       // the largest the wire can express
inline constexpr size_t kProxyDefaultMaxHeaderSize = 4096;  // what relayd accepts by default

enum class ProxyError : uint8_t {
  kNone,
  kNotProxyProtocol,  // neither "PROXY " nor the v2 signature: a direct visitor, not a balancer
  kBadV1Syntax,
  kV1TooLong,
  kBadVersion,
  kBadCommand,
  kBadFamily,  // unknown v1 protocol word, or a v2 family/transport byte we refuse
  kBadAddress,
  kBadPort,
  kLengthMismatch,  // v2 length shorter than the family's address block
  kTooLarge,        // v2 header larger than the reader's configured maximum
  kBadTlv,
  kBadCrc32c,
};

// Stable snake_case name ("not_proxy_protocol", ...) for metric labels and log lines.
[[nodiscard]] std::string_view proxyErrorName(ProxyError error);

// One endpoint as carried in the header. IPv4 uses the first 4 bytes of `bytes`.
struct ProxyAddress {
  enum class Family : uint8_t { kInet4, kInet6 };

  Family family = Family::kInet4;
  std::array<uint8_t, 16> bytes{};
  uint16_t port = 0;

  [[nodiscard]] static ProxyAddress ipv4(std::array<uint8_t, 4> address, uint16_t port);
  [[nodiscard]] static ProxyAddress ipv6(std::array<uint8_t, 16> address, uint16_t port);
  // "1.2.3.4:5" or "[::1]:5".
  [[nodiscard]] std::string toString() const;
  bool operator==(const ProxyAddress&) const = default;
};

struct ProxyEndpoints {
  ProxyAddress source;
  ProxyAddress destination;
  bool operator==(const ProxyEndpoints&) const = default;
};

struct ProxyTlv {
  uint8_t type = 0;
  std::vector<uint8_t> value;
  bool operator==(const ProxyTlv&) const = default;
};

enum class ProxyCommand : uint8_t { kLocal = 0, kProxy = 1 };

struct ProxyHeader {
  uint8_t version = 1;                          // 1 or 2
  ProxyCommand command = ProxyCommand::kProxy;  // kLocal only from v2
  // nullopt: the caller uses the socket's own peer address. That is the case for LOCAL, v1
  // UNKNOWN, v2 AF_UNSPEC and v2 AF_UNIX (accepted per the spec's "fall back to UNSPEC" rule).
  std::optional<ProxyEndpoints> addresses;
  std::vector<ProxyTlv> tlvs;  // v2 only, in wire order, CRC32C and NOOP included
  size_t size = 0;             // bytes the header occupies on the wire
  bool operator==(const ProxyHeader&) const = default;
};

enum class ProxyStatus : uint8_t { kNeedMore, kDone, kError };

struct ProxyReadResult {
  ProxyStatus status = ProxyStatus::kNeedMore;
  ProxyError error = ProxyError::kNone;  // set when status == kError
  // Bytes of the span given to this feed() call that belong to the header. On kDone the rest of
  // that span (from `consumed` on) is the payload (the ClientHello). On kNeedMore it is the
  // whole span. On kError it is how far the reader got before refusing.
  size_t consumed = 0;
  ProxyHeader header;  // set when status == kDone
};

// Fed the socket's bytes in arbitrary pieces; never takes a byte past the header. Work is linear
// in the input. Once Done or Error, further feeds return the same result with consumed == 0.
// The configured maximum applies to v2 (v1 is always limited to 107 bytes) and is capped at
// kProxyV2MaxSize.
class ProxyHeaderReader {
 public:
  explicit ProxyHeaderReader(size_t maxHeaderSize = kProxyDefaultMaxHeaderSize);

  [[nodiscard]] ProxyReadResult feed(std::span<const uint8_t> bytes);

 private:
  enum class Stage : uint8_t { kDetect, kV1, kV2Fixed, kV2Payload, kFinished };

  // Takes one byte of a v1 line or the v2 fixed part; returns an error or kNone.
  [[nodiscard]] ProxyError takeV1Byte(uint8_t byte);
  [[nodiscard]] ProxyError takeV2FixedByte(uint8_t byte);
  [[nodiscard]] ProxyReadResult finish(ProxyReadResult result);

  size_t maxHeaderSize_;
  Stage stage_ = Stage::kDetect;
  bool v1LineComplete_ = false;
  size_t v2TotalSize_ = 0;
  std::vector<uint8_t> buffer_;  // the header bytes seen so far
  ProxyReadResult final_;        // kept once finished
};

// Cheap whole-buffer helper (tests, tools): feeds `bytes` to a fresh reader.
[[nodiscard]] ProxyReadResult readProxyHeader(std::span<const uint8_t> bytes,
                                              size_t maxHeaderSize = kProxyDefaultMaxHeaderSize);

// "PROXY TCP4 ...\r\n" / "PROXY TCP6 ...\r\n"; nullopt gives "PROXY UNKNOWN\r\n". Mixed families
// are written as TCP6 with the IPv4 side IPv4-mapped (::ffff:a.b.c.d).
[[nodiscard]] std::vector<uint8_t> encodeProxyV1(const std::optional<ProxyEndpoints>& addresses);

// A v2 header: TCP over IPv4/IPv6, or AF_UNSPEC when `addresses` is nullopt. Mixed families are
// IPv4-mapped as for v1. With appendCrc32c a CRC32C TLV is added last and filled in. nullopt when
// the TLVs do not fit the 16-bit length.
[[nodiscard]] std::optional<std::vector<uint8_t>> encodeProxyV2(
    ProxyCommand command, const std::optional<ProxyEndpoints>& addresses,
    std::span<const ProxyTlv> tlvs = {}, bool appendCrc32c = false);

// CRC32C (Castagnoli, as in RFC 4960 appendix B), exposed for tests.
[[nodiscard]] uint32_t crc32c(std::span<const uint8_t> bytes);

}  // namespace ot
