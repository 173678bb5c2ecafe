#include "common/tls13_record.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "common/prefetch.h"

namespace ot::tls13 {
namespace {

// One AEAD context per thread, shared by every connection the thread runs. The key is set once
// per call (per batch of records) and only the nonce per record; CallScope forgets the binding at
// the end of each call, as the next call may be another connection's (or a freed one's) key.
struct ThreadAead {
  EVP_CIPHER_CTX* ctx = nullptr;
  const EVP_CIPHER* boundCipher = nullptr;  // the cipher the context holds; kept across calls
  const uint8_t* boundKey = nullptr;
  int boundEnc = -1;
  ThreadAead() = default;
  ThreadAead(const ThreadAead&) = delete;
  ThreadAead& operator=(const ThreadAead&) = delete;
  ~ThreadAead() { EVP_CIPHER_CTX_free(ctx); }
};
thread_local ThreadAead tAead;

struct CallScope {
  CallScope() = default;
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  ~CallScope() { tAead.boundKey = nullptr; }
};

// `body` (a handshake record's content) is one or more whole handshake messages, all of type
// `type` (a client's NewSessionTickets: they may be dropped, nothing is cut across records).
bool droppableTickets(std::span<const uint8_t> body, uint8_t type) {
  if (body.empty()) return false;
  while (!body.empty()) {
    if (body.size() < 4 || body[0] != type) return false;
    const size_t length = (size_t{body[1]} << 16) | (size_t{body[2]} << 8) | body[3];
    if (body.size() - 4 < length) return false;
    body = body.subspan(4 + length);
  }
  return true;
}

// Fetched once per process (a locked lookup each); never freed.
const EVP_CIPHER* cipherFor(Suite suite) {
  static EVP_CIPHER* const ciphers[3] = {
      EVP_CIPHER_fetch(nullptr, "AES-128-GCM", nullptr),
      EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr),
      EVP_CIPHER_fetch(nullptr, "ChaCha20-Poly1305", nullptr),
  };
  return ciphers[static_cast<size_t>(suite)];
}

bool bindKey(Suite suite, const RecordLayer::Direction& direction, int enc) {
  ThreadAead& aead = tAead;
  if (aead.ctx == nullptr) aead.ctx = EVP_CIPHER_CTX_new();
  if (aead.ctx == nullptr || cipherFor(suite) == nullptr) return false;
  if (aead.boundKey == direction.keys.key.data() && aead.boundEnc == enc) return true;
  aead.boundKey = nullptr;
  // Naming the cipher makes OpenSSL free and make the provider's context anew (a reset, a
  // cleanse, an allocation: ~90 ns of a ~490 ns small record when every record is another idle
  // bridge's); a context that already holds this cipher only takes the new key.
  const EVP_CIPHER* cipher = cipherFor(suite);
  const bool sameCipher = aead.boundCipher == cipher;
  aead.boundCipher = nullptr;
  if (EVP_CipherInit_ex2(aead.ctx, sameCipher ? nullptr : cipher, direction.keys.key.data(),
                         nullptr, enc, nullptr) != 1)
    return false;
  aead.boundCipher = cipher;
  aead.boundKey = direction.keys.key.data();
  aead.boundEnc = enc;
  return true;
}

// After a failed record the context is made anew at the next one, whatever state it was left in.
void forgetContext() {
  tAead.boundKey = nullptr;
  tAead.boundCipher = nullptr;
}

// Keys the thread's context for `direction` and sets the nonce (iv XOR the padded seq) and AAD.
bool startRecord(Suite suite, const RecordLayer::Direction& direction, int enc, uint64_t seq,
                 const uint8_t* header) {
  if (!bindKey(suite, direction, enc)) return false;
  std::array<uint8_t, kIvSize> nonce = direction.keys.iv;
  for (size_t i = 0; i < 8; ++i) nonce[kIvSize - 1 - i] ^= static_cast<uint8_t>(seq >> (8 * i));
  int n = 0;
  return EVP_CipherInit_ex2(tAead.ctx, nullptr, nullptr, nonce.data(), -1, nullptr) == 1 &&
         EVP_CipherUpdate(tAead.ctx, nullptr, &n, header, static_cast<int>(kHeaderSize)) == 1;
}

bool update(uint8_t* out, const uint8_t* in, size_t size, size_t& produced) {
  int n = 0;
  if (size == 0) return true;
  if (EVP_CipherUpdate(tAead.ctx, out, &n, in, static_cast<int>(size)) != 1) return false;
  produced = static_cast<size_t>(n);
  return true;
}

void writeHeader(uint8_t* header, size_t length) {
  header[0] = kTypeApplicationData;
  header[1] = 0x03;
  header[2] = 0x03;
  header[3] = static_cast<uint8_t>(length >> 8);
  header[4] = static_cast<uint8_t>(length);
}

}  // namespace

size_t completeRecordSize(std::span<const uint8_t> input) {
  if (input.size() < kHeaderSize) return 0;
  const size_t size = kHeaderSize + ((size_t{input[3]} << 8) | input[4]);
  return input.size() >= size ? size : 0;
}

RecordLayer::RecordLayer(Suite suite, std::span<const uint8_t> readSecret, uint64_t readSeq,
                         std::span<const uint8_t> writeSecret, uint64_t writeSeq)
    : suite_(suite) {
  valid_ = deriveTrafficKeys(suite, readSecret, read_.keys) &&
           deriveTrafficKeys(suite, writeSecret, write_.keys);
  read_.seq = readSeq;
  write_.seq = writeSeq;
}

RecordLayer::~RecordLayer() {
  read_.keys.cleanse();
  write_.keys.cleanse();
}

bool RecordLayer::sealRecord(uint8_t type, std::span<const uint8_t> data,
                             std::vector<uint8_t>& out) {
  const std::span<const uint8_t> one[1] = {data};
  GatherCursor cursor{one};
  return sealRecord(type, cursor, data.size(), out);
}

bool RecordLayer::sealRecord(uint8_t type, GatherCursor& cursor, size_t size,
                             std::vector<uint8_t>& out) {
  if (!valid_ || write_.seq >= kSeqLimit) return false;
  const size_t length = size + 1 + kTagSize;
  const size_t start = out.size();
  out.resize(start + kHeaderSize + length);
  uint8_t* header = out.data() + start;
  writeHeader(header, length);
  uint8_t* body = header + kHeaderSize;
  bool ok = startRecord(suite_, write_, 1, write_.seq, header);
  // The record's plaintext straight from the caller's pieces: no copy before the AEAD.
  size_t done = 0;
  while (ok && done < size) {
    const std::span<const uint8_t> piece = cursor.pieces[cursor.index];
    const size_t n = std::min(piece.size() - cursor.offset, size - done);
    size_t produced = 0;
    ok = update(body + done, piece.data() + cursor.offset, n, produced) && produced == n;
    done += n;
    cursor.offset += n;
    if (cursor.offset == piece.size()) {
      ++cursor.index;
      cursor.offset = 0;
    }
  }
  size_t m = 0;
  int finalSize = 0;
  ok = ok && update(body + size, &type, 1, m) &&
       EVP_CipherFinal_ex(tAead.ctx, body + size + m, &finalSize) == 1 &&
       m + static_cast<size_t>(finalSize) == 1 &&
       EVP_CIPHER_CTX_ctrl(tAead.ctx, EVP_CTRL_AEAD_GET_TAG, static_cast<int>(kTagSize),
                           body + size + 1) == 1;
  if (!ok) {
    out.resize(start);
    forgetContext();
    return false;
  }
  ++write_.seq;
  return true;
}

bool RecordLayer::seal(std::span<const uint8_t> plaintext, std::vector<uint8_t>& out) {
  const std::span<const uint8_t> one[1] = {plaintext};
  return sealGather(one, out);
}

void RecordLayer::prefetch() const {
  prefetchLine(read_.keys.key.data());
  prefetchLine(read_.keys.iv.data());
  prefetchLine(&read_.seq);
  prefetchLine(write_.keys.key.data());
  prefetchLine(write_.keys.iv.data());
  prefetchLine(&write_.seq);
  prefetchLine(&suite_);
}

bool RecordLayer::sealGather(std::span<const std::span<const uint8_t>> pieces,
                             std::vector<uint8_t>& out) {
  if (failed() || !valid_) return false;
  CallScope scope;
  size_t total = 0;
  for (const auto& piece : pieces) total += piece.size();
  const size_t records = std::max<size_t>(1, (total + kMaxPlaintext - 1) / kMaxPlaintext);
  const size_t needed = out.size() + total + records * kRecordOverhead;
  if (needed > out.capacity()) out.reserve(std::max(needed, 2 * out.capacity()));
  GatherCursor cursor{pieces};
  while (cursor.index < pieces.size() && pieces[cursor.index].empty()) ++cursor.index;
  size_t done = 0;
  do {
    const size_t n = std::min(kMaxPlaintext, total - done);
    if (!sealRecord(kTypeApplicationData, cursor, n, out)) {
      error_ = write_.seq >= kSeqLimit ? "tls write failed: the sequence number is exhausted"
                                       : "tls write failed: the AEAD refused";
      return false;
    }
    done += n;
    while (cursor.index < pieces.size() && cursor.offset == pieces[cursor.index].size()) {
      ++cursor.index;
      cursor.offset = 0;
    }
  } while (done < total);
  return true;
}

void RecordLayer::sealAlert(AlertCode code, std::vector<uint8_t>& out, const char* reason) {
  if (failed()) return;
  CallScope scope;
  const bool fatal = code != AlertCode::kCloseNotify && code != AlertCode::kUserCanceled;
  const uint8_t alert[2] = {static_cast<uint8_t>(fatal ? 2 : 1), static_cast<uint8_t>(code)};
  (void)sealRecord(kTypeAlert, alert, out);
  if (fatal) error_ = reason != nullptr ? reason : "tls failed";
}

RecordLayer::OpenStatus RecordLayer::fail(AlertCode code, const char* reason,
                                          std::vector<uint8_t>& toSend) {
  sealAlert(code, toSend, reason);
  if (error_ == nullptr) error_ = reason;
  return OpenStatus::kError;
}

RecordLayer::OpenResult RecordLayer::open(std::span<const uint8_t> input, std::span<uint8_t> out,
                                          std::vector<uint8_t>& toSend) {
  OpenResult result;
  if (failed() || !valid_) {
    if (error_ == nullptr) error_ = "tls read failed: no keys";
    result.status = OpenStatus::kError;
    return result;
  }
  if (closed_) {
    result.status = OpenStatus::kClosed;
    return result;
  }
  CallScope scope;
  while (input.size() - result.consumed >= kHeaderSize) {
    const std::span<const uint8_t> rest = input.subspan(result.consumed);
    const size_t length = (size_t{rest[3]} << 8) | rest[4];
    if (rest[0] != kTypeApplicationData) {
      result.status = fail(AlertCode::kUnexpectedMessage,
                           rest[0] == kTypeChangeCipherSpec
                               ? "tls read failed: a ChangeCipherSpec after the handshake"
                               : "tls read failed: an unprotected record after the handshake",
                           toSend);
      return result;
    }
    if (length > kMaxCiphertext) {
      result.status =
          fail(AlertCode::kRecordOverflow, "tls read failed: a record over 2^14+256", toSend);
      return result;
    }
    if (length < kTagSize + 1) {
      result.status = fail(AlertCode::kDecodeError, "tls read failed: a record too short", toSend);
      return result;
    }
    if (rest.size() < kHeaderSize + length) break;  // cut: the rest comes with the next call
    const size_t innerSize = length - kTagSize;
    if (out.size() - result.produced < innerSize) {
      result.status = OpenStatus::kNeedRoom;
      return result;
    }
    if (read_.seq >= kSeqLimit) {
      result.status = fail(AlertCode::kInternalError,
                           "tls read failed: the sequence number is exhausted", toSend);
      return result;
    }
    uint8_t* inner = out.data() + result.produced;
    const uint8_t* body = rest.data() + kHeaderSize;
    size_t n = 0;
    int finalSize = 0;
    const bool ok =
        startRecord(suite_, read_, 0, read_.seq, rest.data()) &&
        update(inner, body, innerSize, n) &&
        EVP_CIPHER_CTX_ctrl(tAead.ctx, EVP_CTRL_AEAD_SET_TAG, static_cast<int>(kTagSize),
                            const_cast<uint8_t*>(body + innerSize)) == 1 &&
        EVP_CipherFinal_ex(tAead.ctx, inner + n, &finalSize) == 1;
    if (!ok) {
      forgetContext();
      result.status = fail(AlertCode::kBadRecordMac, "tls read failed: bad record mac", toSend);
      return result;
    }
    ++read_.seq;
    result.consumed += kHeaderSize + length;
    size_t size = innerSize;  // strip the zero padding; the last non-zero byte is the type
    while (size > 0 && inner[size - 1] == 0) --size;
    if (size == 0) {
      result.status = fail(AlertCode::kUnexpectedMessage,
                           "tls read failed: a record without a content type", toSend);
      return result;
    }
    const uint8_t type = inner[size - 1];
    const size_t contentSize = size - 1;
    if (contentSize > kMaxPlaintext) {
      result.status = fail(AlertCode::kRecordOverflow,
                           "tls read failed: a record's plaintext over 2^14", toSend);
      return result;
    }
    if (type == kTypeApplicationData) {
      result.produced += contentSize;
    } else if (type == kTypeAlert) {
      if (contentSize != 2) {
        result.status = fail(AlertCode::kDecodeError, "tls read failed: a malformed alert", toSend);
        return result;
      }
      if (inner[1] == static_cast<uint8_t>(AlertCode::kCloseNotify)) {
        closed_ = true;
        result.status = OpenStatus::kClosed;
        return result;
      }
      if (inner[1] == static_cast<uint8_t>(AlertCode::kUserCanceled)) continue;
      error_ = "tls read failed: the peer sent an alert";
      peerAlert_ = inner[1];
      result.status = OpenStatus::kError;
      return result;
    } else if (type == kTypeHandshake) {
      const OpenStatus status = handleHandshake(std::span(inner, contentSize), toSend);
      if (status != OpenStatus::kOk) {
        result.status = status;
        return result;
      }
    } else {
      result.status = fail(AlertCode::kUnexpectedMessage,
                           "tls read failed: an unknown inner content type", toSend);
      return result;
    }
  }
  return result;
}

RecordLayer::OpenStatus RecordLayer::handleHandshake(std::span<const uint8_t> body,
                                                     std::vector<uint8_t>& toSend) {
  constexpr uint8_t kKeyUpdate = 24;
  constexpr uint8_t kNewSessionTicket = 4;
  if (ignoreTickets_ && droppableTickets(body, kNewSessionTicket)) return OpenStatus::kOk;
  if (body.size() < 4 || body[0] != kKeyUpdate) {
    return fail(AlertCode::kUnexpectedMessage,
                "tls read failed: a handshake message other than KeyUpdate after the handshake",
                toSend);
  }
  const size_t length = (size_t{body[1]} << 16) | (size_t{body[2]} << 8) | body[3];
  if (length != 1)
    return fail(AlertCode::kDecodeError, "tls read failed: a malformed KeyUpdate", toSend);
  // Handshake messages may not span a key change: the KeyUpdate ends its record.
  if (body.size() != 5) {
    return fail(AlertCode::kUnexpectedMessage,
                "tls read failed: a KeyUpdate not alone at the end of its record", toSend);
  }
  const uint8_t request = body[4];
  if (request > 1) {
    return fail(AlertCode::kIllegalParameter, "tls read failed: a KeyUpdate with a bad request",
                toSend);
  }
  tAead.boundKey = nullptr;  // the keys change in place
  if (!updateTrafficKeys(suite_, read_.keys)) {
    return fail(AlertCode::kInternalError, "tls read failed: key update", toSend);
  }
  read_.seq = 0;
  if (request == 1) {
    const uint8_t answer[5] = {kKeyUpdate, 0, 0, 1, 0};  // update_not_requested
    if (!sealRecord(kTypeHandshake, answer, toSend)) {
      return fail(AlertCode::kInternalError, "tls read failed: cannot answer a KeyUpdate", toSend);
    }
    tAead.boundKey = nullptr;
    if (!updateTrafficKeys(suite_, write_.keys)) {
      error_ = "tls read failed: key update";
      return OpenStatus::kError;
    }
    write_.seq = 0;
  }
  return OpenStatus::kOk;
}

bool RecordLayer::sealMatches(uint64_t seq, std::span<const uint8_t> plaintext,
                              std::span<const uint8_t> record) const {
  const size_t length = plaintext.size() + 1 + kTagSize;
  if (!valid_ || seq >= kSeqLimit || record.size() != kHeaderSize + length) return false;
  std::array<uint8_t, kHeaderSize> header{};
  writeHeader(header.data(), length);
  if (std::memcmp(header.data(), record.data(), kHeaderSize) != 0) return false;
  CallScope scope;
  if (!startRecord(suite_, write_, 1, seq, header.data())) return false;
  // In slices, so a wrong candidate costs one slice, not the whole record.
  std::array<uint8_t, 256> buffer{};
  const uint8_t* expected = record.data() + kHeaderSize;
  size_t checked = 0;
  for (size_t done = 0; done < plaintext.size();) {
    const size_t n = std::min(buffer.size(), plaintext.size() - done);
    size_t produced = 0;
    if (!update(buffer.data(), plaintext.data() + done, n, produced)) return false;
    if (std::memcmp(buffer.data(), expected + checked, produced) != 0) return false;
    checked += produced;
    done += n;
  }
  const uint8_t type = kTypeApplicationData;
  size_t produced = 0;
  int finalSize = 0;
  if (!update(buffer.data(), &type, 1, produced) ||
      EVP_CipherFinal_ex(tAead.ctx, buffer.data() + produced, &finalSize) != 1)
    return false;
  produced += static_cast<size_t>(finalSize);
  if (checked + produced != plaintext.size() + 1 ||
      std::memcmp(buffer.data(), expected + checked, produced) != 0)
    return false;
  std::array<uint8_t, kTagSize> tag{};
  return EVP_CIPHER_CTX_ctrl(tAead.ctx, EVP_CTRL_AEAD_GET_TAG, static_cast<int>(kTagSize),
                             tag.data()) == 1 &&
         CRYPTO_memcmp(tag.data(), expected + plaintext.size() + 1, kTagSize) == 0;
}

bool RecordLayer::opensWith(uint64_t seq, std::span<const uint8_t> record) const {
  if (!valid_ || seq >= kSeqLimit || completeRecordSize(record) != record.size() ||
      record[0] != kTypeApplicationData || record.size() < kHeaderSize + kTagSize + 1 ||
      record.size() > kHeaderSize + kMaxCiphertext)
    return false;
  CallScope scope;
  if (!startRecord(suite_, read_, 0, seq, record.data())) return false;
  const size_t innerSize = record.size() - kHeaderSize - kTagSize;
  const uint8_t* body = record.data() + kHeaderSize;
  std::array<uint8_t, 512> buffer{};  // the plaintext is thrown away
  for (size_t done = 0; done < innerSize;) {
    const size_t n = std::min(buffer.size() - 64, innerSize - done);
    size_t produced = 0;
    if (!update(buffer.data(), body + done, n, produced)) return false;
    done += n;
  }
  int finalSize = 0;
  const bool ok = EVP_CIPHER_CTX_ctrl(tAead.ctx, EVP_CTRL_AEAD_SET_TAG, static_cast<int>(kTagSize),
                                      const_cast<uint8_t*>(body + innerSize)) == 1 &&
                  EVP_CipherFinal_ex(tAead.ctx, buffer.data(), &finalSize) == 1;
  OPENSSL_cleanse(buffer.data(), buffer.size());
  return ok;
}

}  // namespace ot::tls13
