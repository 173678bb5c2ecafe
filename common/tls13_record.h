// The TLS 1.3 record layer after the handshake (RFC 8446 section 5), for a connection whose
// handshake OpenSSL ran and whose SSL object was then freed (TlsEngine's detached mode). Per
// direction it keeps a traffic secret, key, IV and the next 64-bit sequence number (~210 bytes
// in all); the AEAD work runs on one EVP_CIPHER_CTX per thread, keyed once per call. Pure: no
// I/O, no SSL calls; the caller owns every buffer (nothing is allocated per record).
//
// What it accepts from the peer: application data (type 23), alerts (close_notify = EOF,
// user_canceled ignored, anything else fails) and a KeyUpdate (its read side updates, and an
// update_requested is answered with our own KeyUpdate(update_not_requested) before our write side
// updates), and on a client's layer whole NewSessionTicket messages (dropped). Everything else
// after the handshake (NewSessionTicket from a client, a post-handshake
// CertificateRequest or Certificate, a handshake message split across records, an outer
// ChangeCipherSpec or plaintext record) is unexpected_message. A fatal error leaves the matching
// encrypted alert to send; the layer then refuses every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "common/tls13_key_schedule.h"

namespace ot::tls13 {

constexpr size_t kHeaderSize = 5;
constexpr size_t kTagSize = 16;
constexpr size_t kMaxPlaintext = 16384;                 // 2^14
constexpr size_t kMaxCiphertext = kMaxPlaintext + 256;  // the record's length field at most
// What sealing adds to a record's plaintext: the header, the inner content type, the tag.
constexpr size_t kRecordOverhead = kHeaderSize + 1 + kTagSize;
constexpr uint8_t kTypeChangeCipherSpec = 20;
constexpr uint8_t kTypeAlert = 21;
constexpr uint8_t kTypeHandshake = 22;
constexpr uint8_t kTypeApplicationData = 23;
// A sequence number is never used at this value: the connection fails instead of wrapping.
constexpr uint64_t kSeqLimit = std::numeric_limits<uint64_t>::max();

enum class AlertCode : uint8_t {
  kCloseNotify = 0,
  kUnexpectedMessage = 10,
  kBadRecordMac = 20,
  kRecordOverflow = 22,
  kIllegalParameter = 47,
  kDecodeError = 50,
  kInternalError = 80,
  kUserCanceled = 90,
};

// The length of the complete record at the front of `input` (header included), 0 while its
// header or body is still incomplete.
[[nodiscard]] size_t completeRecordSize(std::span<const uint8_t> input);

class RecordLayer {
 public:
  struct Direction {
    TrafficKeys keys;
    uint64_t seq = 0;
  };

  // Empty (valid() false) when a secret has the wrong size for `suite` or derivation failed.
  RecordLayer(Suite suite, std::span<const uint8_t> readSecret, uint64_t readSeq,
              std::span<const uint8_t> writeSecret, uint64_t writeSeq);
  ~RecordLayer();
  RecordLayer(const RecordLayer&) = delete;
  RecordLayer& operator=(const RecordLayer&) = delete;

  [[nodiscard]] bool valid() const { return valid_; }
  // Where both directions stand when the layer takes over a running connection.
  void setSequenceNumbers(uint64_t readSeq, uint64_t writeSeq) {
    read_.seq = readSeq;
    write_.seq = writeSeq;
  }
  // A client's layer: NewSessionTicket messages from the server are read and dropped (without
  // this they are unexpected_message, as they are from a client).
  void ignoreSessionTickets() { ignoreTickets_ = true; }
  [[nodiscard]] bool failed() const { return error_ != nullptr; }
  [[nodiscard]] bool closed() const { return closed_; }
  // Why the layer failed ("" while it has not).
  [[nodiscard]] const char* errorText() const { return error_ != nullptr ? error_ : ""; }
  [[nodiscard]] Suite suite() const { return suite_; }
  [[nodiscard]] uint64_t readSeq() const { return read_.seq; }
  [[nodiscard]] uint64_t writeSeq() const { return write_.seq; }
  // The alert description the peer sent when it failed us with one (-1: none).
  [[nodiscard]] int peerAlert() const { return peerAlert_; }

  // Appends `plaintext` as application data records (at most 2^14 bytes each, no padding) to
  // `out`. False on failure (the sequence limit): then the alert is appended instead.
  [[nodiscard]] bool seal(std::span<const uint8_t> plaintext, std::vector<uint8_t>& out);
  // The lines a seal or an open reads (both directions' keys and sequence numbers, the suite),
  // asked for ahead (common/prefetch.h).
  void prefetch() const;
  // seal() of the pieces' bytes one after another, read straight from each piece (records cut
  // at 2^14 bytes whatever the pieces' bounds): no copy to join them first.
  [[nodiscard]] bool sealGather(std::span<const std::span<const uint8_t>> pieces,
                                std::vector<uint8_t>& out);
  // Appends an encrypted alert (close_notify is a warning, the rest fatal). A fatal alert also
  // fails the layer with `reason`.
  void sealAlert(AlertCode code, std::vector<uint8_t>& out, const char* reason = nullptr);

  enum class OpenStatus : uint8_t {
    kOk,        // every complete record that fit was opened; the rest waits for more input
    kNeedRoom,  // the next record's plaintext does not fit in what is left of `out`
    kClosed,    // close_notify arrived (consumed); nothing after it is read
    kError,     // fatal: errorText(); the alert to send was appended to `toSend`
  };
  struct OpenResult {
    size_t consumed = 0;  // input bytes used (whole records only)
    size_t produced = 0;  // application data bytes written to `out`
    OpenStatus status = OpenStatus::kOk;
  };
  // Opens the complete records at the front of `input` into `out`, in order, as long as each
  // one's plaintext fits; a cut record stays for the next call (the caller keeps input[consumed:]
  // and passes it again with what follows). Our answers (a KeyUpdate, a fatal alert) are appended
  // to `toSend`. A record needs room for its ciphertext length minus the tag in `out`.
  [[nodiscard]] OpenResult open(std::span<const uint8_t> input, std::span<uint8_t> out,
                                std::vector<uint8_t>& toSend);

  // Proof helpers for taking a connection over from OpenSSL (they change nothing):
  // `record` is exactly what sealing `plaintext` as application data under the write key with
  // sequence number `seq` gives (AEAD output is deterministic).
  [[nodiscard]] bool sealMatches(uint64_t seq, std::span<const uint8_t> plaintext,
                                 std::span<const uint8_t> record) const;
  // `record` (one complete record) authenticates under the read key with sequence number `seq`.
  [[nodiscard]] bool opensWith(uint64_t seq, std::span<const uint8_t> record) const;

 private:
  // Where sealing stands in a list of pieces (the piece, the offset in it).
  struct GatherCursor {
    std::span<const std::span<const uint8_t>> pieces;
    size_t index = 0;
    size_t offset = 0;
  };
  bool sealRecord(uint8_t type, std::span<const uint8_t> data, std::vector<uint8_t>& out);
  // One record of the next `size` bytes at `cursor` (which moves past them).
  bool sealRecord(uint8_t type, GatherCursor& cursor, size_t size, std::vector<uint8_t>& out);
  OpenStatus handleHandshake(std::span<const uint8_t> body, std::vector<uint8_t>& toSend);
  OpenStatus fail(AlertCode code, const char* reason, std::vector<uint8_t>& toSend);

  Direction read_;
  Direction write_;
  Suite suite_;
  bool valid_ = false;
  bool closed_ = false;
  bool ignoreTickets_ = false;
  int16_t peerAlert_ = -1;
  const char* error_ = nullptr;
};

}  // namespace ot::tls13
