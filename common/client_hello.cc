#include "common/client_hello.h"

#include <algorithm>
#include <array>

namespace ot {
namespace {

constexpr uint8_t kContentTypeHandshake = 22;
constexpr uint8_t kHandshakeClientHello = 1;
constexpr size_t kHandshakeHeaderSize = 4;
constexpr uint16_t kExtServerName = 0;
constexpr uint16_t kExtAlpn = 16;
constexpr uint16_t kExtSupportedVersions = 43;
constexpr uint8_t kNameTypeHostName = 0;
constexpr size_t kMaxHostNameWire = 255;  // OpenSSL's TLSEXT_MAXLEN_host_name: longer is fatal
constexpr size_t kMaxHostName = 253;
constexpr size_t kMaxLabel = 63;
constexpr size_t kMaxSessionId = 32;
constexpr size_t kRandomSize = 32;

// Bounds-checked reads over one span: every accessor checks the length before it reads, and a
// failed read leaves nothing half-consumed that callers could mistake for data.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> data) : data_(data) {}

  [[nodiscard]] bool empty() const { return pos_ == data_.size(); }

  [[nodiscard]] std::optional<uint8_t> u8() {
    if (data_.size() - pos_ < 1) return std::nullopt;
    return data_[pos_++];
  }
  [[nodiscard]] std::optional<uint16_t> u16() {
    if (data_.size() - pos_ < 2) return std::nullopt;
    const auto value = static_cast<uint16_t>((data_[pos_] << 8) | data_[pos_ + 1]);
    pos_ += 2;
    return value;
  }
  [[nodiscard]] std::optional<std::span<const uint8_t>> bytes(size_t n) {
    if (data_.size() - pos_ < n) return std::nullopt;
    const auto out = data_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  // opaque x<0..2^8-1> and x<0..2^16-1>: a length prefix, then that many bytes.
  [[nodiscard]] std::optional<std::span<const uint8_t>> vector8() {
    const auto n = u8();
    if (!n) return std::nullopt;
    return bytes(*n);
  }
  [[nodiscard]] std::optional<std::span<const uint8_t>> vector16() {
    const auto n = u16();
    if (!n) return std::nullopt;
    return bytes(*n);
  }

 private:
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
};

size_t readU24(std::span<const uint8_t> p) {
  return (static_cast<size_t>(p[0]) << 16) | (static_cast<size_t>(p[1]) << 8) | p[2];
}

bool isLabelByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// server_name (RFC 6066 3). Like BoringSSL we accept exactly one entry, of type host_name: the
// extensibility the RFC meant was never usable, and no client sends more. Names that OpenSSL and
// BoringSSL abort the handshake for (empty, longer than 255, containing NUL) are kMalformed; a
// name that only fails our DNS plausibility check is reported as kInvalid (no usable SNI).
bool parseServerName(std::span<const uint8_t> data, ClientHelloInfo& info) {
  Cursor ext(data);
  const auto list = ext.vector16();
  if (!list || !ext.empty() || list->empty()) return false;
  Cursor entries(*list);
  const auto type = entries.u8();
  const auto name = entries.vector16();
  if (!type || !name || !entries.empty() || *type != kNameTypeHostName) return false;
  if (name->empty() || name->size() > kMaxHostNameWire) return false;
  if (std::find(name->begin(), name->end(), uint8_t{0}) != name->end()) return false;
  std::string raw;
  raw.reserve(name->size());
  for (const uint8_t b : *name) raw.push_back(static_cast<char>(b));
  if (auto normalized = normalizeHostName(raw)) {
    info.sni = SniStatus::kValid;
    info.serverName = std::move(*normalized);
  } else {
    info.sni = SniStatus::kInvalid;
    info.serverName.clear();
  }
  return true;
}

// application_layer_protocol_negotiation (RFC 7301 3.1): ProtocolName<1..2^8-1> inside
// protocol_name_list<2..2^16-1>, and the list must fill the extension exactly.
bool parseAlpn(std::span<const uint8_t> data, ClientHelloInfo& info) {
  Cursor ext(data);
  const auto list = ext.vector16();
  if (!list || !ext.empty() || list->size() < 2) return false;
  Cursor names(*list);
  std::vector<std::string> alpn;
  while (!names.empty()) {
    const auto name = names.vector8();
    if (!name || name->empty()) return false;
    std::string& out = alpn.emplace_back();
    out.reserve(name->size());
    for (const uint8_t b : *name) out.push_back(static_cast<char>(b));
  }
  info.alpn = std::move(alpn);
  return true;
}

// supported_versions in a ClientHello (RFC 8446 4.2.1): ProtocolVersion versions<2..254>.
bool parseSupportedVersions(std::span<const uint8_t> data, ClientHelloInfo& info) {
  Cursor ext(data);
  const auto list = ext.vector8();
  if (!list || !ext.empty() || list->size() < 2 || list->size() % 2 != 0) return false;
  Cursor versions(*list);
  std::vector<uint16_t> out;
  out.reserve(list->size() / 2);
  while (const auto version = versions.u16()) out.push_back(*version);
  info.supportedVersions = std::move(out);
  return true;
}

// The ClientHello body (after the 4-byte handshake header), which must be consumed exactly.
ClientHelloResult parseClientHello(std::span<const uint8_t> body) {
  ClientHelloResult malformed{ClientHelloStatus::kError, ClientHelloError::kMalformed, {}};
  ClientHelloResult done{ClientHelloStatus::kDone, ClientHelloError::kNone, {}};
  ClientHelloInfo& info = done.info;

  Cursor in(body);
  const auto version = in.u16();
  const auto random = in.bytes(kRandomSize);
  const auto sessionId = in.vector8();
  const auto cipherSuites = in.vector16();
  const auto compression = in.vector8();
  if (!version || !random || !sessionId || sessionId->size() > kMaxSessionId || !cipherSuites ||
      cipherSuites->size() < 2 || cipherSuites->size() % 2 != 0 || !compression ||
      compression->empty()) {
    return malformed;
  }
  info.legacyVersion = *version;
  if (in.empty()) return done;  // a hello from before extensions: no SNI, nothing else to read

  const auto extensions = in.vector16();
  if (!extensions || !in.empty()) return malformed;
  Cursor ext(*extensions);
  std::vector<uint16_t> seen;
  while (!ext.empty()) {
    const auto type = ext.u16();
    const auto data = ext.vector16();
    if (!type || !data) return malformed;
    seen.push_back(*type);
    bool ok = true;
    switch (*type) {
      case kExtServerName:
        ok = parseServerName(*data, info);
        break;
      case kExtAlpn:
        ok = parseAlpn(*data, info);
        break;
      case kExtSupportedVersions:
        ok = parseSupportedVersions(*data, info);
        break;
      default:
        break;
    }
    if (!ok) return malformed;
  }
  // RFC 8446 4.2 and RFC 5246 7.4.1.4: at most one extension of each type.
  std::sort(seen.begin(), seen.end());
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
    return {ClientHelloStatus::kError, ClientHelloError::kDuplicateExtension, {}};
  }
  return done;
}

}  // namespace

std::string_view clientHelloErrorName(ClientHelloError error) {
  switch (error) {
    case ClientHelloError::kNone:
      return "none";
    case ClientHelloError::kNotTls:
      return "not_tls";
    case ClientHelloError::kBadRecord:
      return "bad_record";
    case ClientHelloError::kNotClientHello:
      return "not_client_hello";
    case ClientHelloError::kMalformed:
      return "malformed";
    case ClientHelloError::kDuplicateExtension:
      return "duplicate_extension";
    case ClientHelloError::kTooLarge:
      return "too_large";
  }
  return "unknown";
}

std::optional<std::string> normalizeHostName(std::string_view name) {
  if (name.empty() || name.size() > kMaxHostName) return std::nullopt;
  std::string out;
  out.reserve(name.size());
  size_t labelStart = 0;
  bool labelAllDigits = true;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.') {
      const size_t labelSize = i - labelStart;
      if (labelSize == 0 || labelSize > kMaxLabel) return std::nullopt;  // "a..b", "a.", ".a"
      if (i == name.size() && labelAllDigits) return std::nullopt;       // "10.0.0.1"
      if (i < name.size()) out.push_back('.');
      labelStart = i + 1;
      labelAllDigits = true;
      continue;
    }
    char c = name[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (!isLabelByte(c)) return std::nullopt;
    if (c < '0' || c > '9') labelAllDigits = false;
    out.push_back(c);
  }
  return out;
}

ClientHelloReader::ClientHelloReader(size_t maxBytes) : maxBytes_(maxBytes) {}

ClientHelloResult& ClientHelloReader::fail(ClientHelloError error) {
  result_ = {ClientHelloStatus::kError, error, {}};
  handshake_ = {};
  return result_;
}

ClientHelloResult ClientHelloReader::feed(std::span<const uint8_t> bytes) {
  if (result_.status != ClientHelloStatus::kNeedMore) return result_;
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  if (buffer_.empty()) return result_;
  // Decided on the first byte so the relay can answer plain HTTP or close SSH at once.
  if (buffer_[0] != kContentTypeHandshake) return fail(ClientHelloError::kNotTls);

  // Only records completed since the last call are parsed; a partial record waits, and its
  // header is checked once (record_length_ remembers it).
  while (true) {
    const size_t available = buffer_.size() - recordStart_;
    if (recordLength_ == 0) {
      if (available < kTlsRecordHeaderSize) break;
      const auto header =
          std::span<const uint8_t>(buffer_).subspan(recordStart_, kTlsRecordHeaderSize);
      examined_ += kTlsRecordHeaderSize;
      const size_t length = (static_cast<size_t>(header[3]) << 8) | header[4];
      // RFC 8446 5.1 says to ignore the record version; we accept major 3 with minor 0..3 (the
      // first record often says 0x0301, SSLv3 clients 0x0300; whether SSLv3 is acceptable is the
      // terminator's call) and refuse the rest as not plausibly TLS.
      if (header[0] != kContentTypeHandshake || header[1] != 3 || header[2] > 3 || length == 0 ||
          length > kTlsMaxRecordPayload) {
        return fail(ClientHelloError::kBadRecord);
      }
      if (recordStart_ + kTlsRecordHeaderSize + length > maxBytes_) {
        return fail(ClientHelloError::kTooLarge);
      }
      recordLength_ = length;
    }
    if (available < kTlsRecordHeaderSize + recordLength_) {
      checkAnnouncedLength();
      return result_;
    }
    const auto payload = std::span<const uint8_t>(buffer_).subspan(
        recordStart_ + kTlsRecordHeaderSize, recordLength_);
    recordStart_ += kTlsRecordHeaderSize + recordLength_;
    recordLength_ = 0;
    if (onRecord(payload).status != ClientHelloStatus::kNeedMore) return result_;
  }
  return result_;
}

void ClientHelloReader::checkAnnouncedLength() {
  // The handshake header may already be here while its record is not complete: judge its type
  // and length now, so a hello announcing more than the budget is refused as soon as its header
  // arrives instead of when (if ever) the record completes. Earlier complete records sit in
  // handshake_; the current record's payload so far follows them.
  if (announcedChecked_ || result_.status != ClientHelloStatus::kNeedMore) return;
  std::array<uint8_t, kHandshakeHeaderSize> head{};
  size_t have = 0;
  for (size_t i = 0; i < handshake_.size() && have < head.size(); ++i) head[have++] = handshake_[i];
  const size_t partialStart = recordStart_ + kTlsRecordHeaderSize;
  for (size_t i = partialStart; i < buffer_.size() && have < head.size(); ++i) {
    head[have++] = buffer_[i];
  }
  if (have < head.size()) return;
  announcedChecked_ = true;
  if (head[0] != kHandshakeClientHello) {
    fail(ClientHelloError::kNotClientHello);
    return;
  }
  // The message starts after the first record header; whatever the fragmentation, it needs at
  // least this many bytes on the wire.
  const size_t total = kHandshakeHeaderSize + readU24(std::span<const uint8_t>(head).subspan(1));
  if (kTlsRecordHeaderSize + total > maxBytes_) fail(ClientHelloError::kTooLarge);
}

ClientHelloResult& ClientHelloReader::onRecord(std::span<const uint8_t> payload) {
  // The common case (the whole message in one record) is parsed in place; only a message that
  // spans records is gathered into handshake_.
  std::span<const uint8_t> message = payload;
  const bool whole = handshake_.empty() && payload.size() >= kHandshakeHeaderSize &&
                     payload.size() - kHandshakeHeaderSize >= readU24(payload.subspan(1));
  if (!whole) {
    handshake_.insert(handshake_.end(), payload.begin(), payload.end());
    examined_ += payload.size();
    message = handshake_;
  }
  if (message[0] != kHandshakeClientHello) return fail(ClientHelloError::kNotClientHello);

  if (message.size() >= kHandshakeHeaderSize) {
    const size_t bodySize = readU24(message.subspan(1));
    const size_t total = kHandshakeHeaderSize + bodySize;
    if (message.size() >= total) {
      // Bytes after the hello inside this record are not ours to judge: the terminator will.
      examined_ += bodySize;
      result_ = parseClientHello(message.subspan(kHandshakeHeaderSize, bodySize));
      if (result_.status == ClientHelloStatus::kDone) result_.info.helloEnd = recordStart_;
      handshake_ = {};
      return result_;
    }
    // The rest needs at least this many more bytes on the wire: fail now rather than buffer up
    // to the limit first.
    const size_t missing = total - message.size();
    const size_t records = (missing + kTlsMaxRecordPayload - 1) / kTlsMaxRecordPayload;
    if (recordStart_ + missing + records * kTlsRecordHeaderSize > maxBytes_) {
      return fail(ClientHelloError::kTooLarge);
    }
  }
  // At least one more record (a header and one byte) must fit.
  if (recordStart_ + kTlsRecordHeaderSize + 1 > maxBytes_) {
    return fail(ClientHelloError::kTooLarge);
  }
  return result_;
}

}  // namespace ot
