// TLS ClientHello reader (RFC 8446 4.1.2 and 5.1, RFC 5246 7.4.1.2, RFC 6066 3, RFC 7301 3.1):
// relayd feeds it a visitor's first bytes to learn the SNI (and ALPN) and route the connection
// without decrypting it. Pure codec: no I/O, no logging, no exceptions, no globals. A reader
// belongs to one connection and is only touched by that connection's loop thread. It owns a copy
// of every byte it was fed, because the relay replays exactly those bytes to the tunnel client or
// to its own TLS terminator: it never consumes what it cannot replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ot {

inline constexpr size_t kTlsRecordHeaderSize = 5;
inline constexpr size_t kTlsMaxRecordPayload = 16384;  // 2^14, RFC 8446 5.1
inline constexpr size_t kClientHelloDefaultMaxBytes = 65536;

enum class ClientHelloError : uint8_t {
  kNone,
  // The first byte is not 22 (handshake): plain HTTP, a PROXY header, SSH, an SSLv2-format hello,
  // or a TLS record of another type. Decided from the first byte alone.
  kNotTls,
  // A record header we refuse: content type other than handshake after the first record, version
  // outside 0x0300..0x0303, or length 0 or above 2^14.
  kBadRecord,
  kNotClientHello,  // the first handshake message is not client_hello (type 1)
  kMalformed,       // a length that does not nest exactly, a vector outside its bounds, a bad SNI
  kDuplicateExtension,
  kTooLarge,  // the hello cannot be complete within the reader's byte budget
};

// Stable snake_case name ("not_tls", "bad_record", ...) for metric labels and log lines.
[[nodiscard]] std::string_view clientHelloErrorName(ClientHelloError error);

// What the server_name extension gave us. kInvalid is a well-formed extension whose name is not a
// routable DNS name (an IP literal, a trailing dot, characters outside [a-z0-9-_]): routing treats
// it like no SNI, as nginx does for a name that fails its host validation.
enum class SniStatus : uint8_t { kAbsent, kValid, kInvalid };

struct ClientHelloInfo {
  SniStatus sni = SniStatus::kAbsent;
  std::string serverName;                   // lowercased; empty unless sni == kValid
  std::vector<std::string> alpn;            // in the client's order; empty without the extension
  uint16_t legacyVersion = 0;               // ClientHello.legacy_version (0x0303 for TLS 1.2+)
  std::vector<uint16_t> supportedVersions;  // empty without the extension (TLS 1.2 clients)
  // Bytes of buffered() up to the end of the record that completed the hello; whatever follows
  // arrived in the same reads but was neither parsed nor needed.
  size_t helloEnd = 0;
  bool operator==(const ClientHelloInfo&) const = default;
};

enum class ClientHelloStatus : uint8_t { kNeedMore, kDone, kError };

struct ClientHelloResult {
  ClientHelloStatus status = ClientHelloStatus::kNeedMore;
  ClientHelloError error = ClientHelloError::kNone;  // set when status == kError
  ClientHelloInfo info;                              // set when status == kDone
  bool operator==(const ClientHelloResult&) const = default;
};

// Fed the socket's bytes in arbitrary pieces. It keeps every byte, parses each TLS record once
// when it is complete (so feeding byte by byte is linear work), and gathers the handshake message
// across records, which post-quantum key shares and long ALPN lists need. Nothing after the
// record that completes the ClientHello is looked at.
//
// Budget: kTooLarge as soon as the hello provably cannot end within maxBytes of input (a record
// reaching past it, or a handshake length that cannot fit, judged as soon as the handshake header
// has arrived, even inside a record that is not complete yet). A hello that ends within the budget
// is kDone even if the same feed() carried more bytes after it.
//
// Once kDone or kError, further feeds neither append nor parse and return the same result, so
// buffered() is exactly the concatenation of the pieces fed up to and including the one that
// decided.
class ClientHelloReader {
 public:
  explicit ClientHelloReader(size_t maxBytes = kClientHelloDefaultMaxBytes);

  [[nodiscard]] ClientHelloResult feed(std::span<const uint8_t> bytes);
  [[nodiscard]] const ClientHelloResult& result() const { return result_; }

  // Every byte fed so far, for replay. Invalidated by the next feed().
  [[nodiscard]] std::span<const uint8_t> buffered() const { return buffer_; }
  // The same bytes moved out, for a caller done with the reader (buffered() is empty after).
  [[nodiscard]] std::vector<uint8_t> takeBuffered() { return std::move(buffer_); }

  // Bytes the parser has looked at (record headers, handshake bytes gathered across records, the
  // hello body). For tests: proves work is linear whatever the feeding pattern.
  [[nodiscard]] size_t bytesExamined() const { return examined_; }

 private:
  ClientHelloResult& fail(ClientHelloError error);
  ClientHelloResult& onRecord(std::span<const uint8_t> payload);
  void checkAnnouncedLength();

  size_t maxBytes_;
  std::vector<uint8_t> buffer_;
  size_t recordStart_ = 0;          // offset in buffer_ of the first record not yet parsed
  size_t recordLength_ = 0;         // its payload length once its header passed; 0 before
  std::vector<uint8_t> handshake_;  // message bytes gathered when it spans records
  size_t examined_ = 0;
  bool announcedChecked_ = false;  // the handshake header was judged before its record completed
  ClientHelloResult result_;
};

// Lowercases `name` and returns it if it is a routable DNS host name: 1..253 bytes of dot
// separated labels, each 1..63 bytes of [a-z0-9-_], no trailing dot (RFC 6066 forbids it and
// browsers strip it), and a last label that is not all digits (so IPv4 literals are refused; IPv6
// literals fail the character set). Otherwise nullopt.
[[nodiscard]] std::optional<std::string> normalizeHostName(std::string_view name);

}  // namespace ot
