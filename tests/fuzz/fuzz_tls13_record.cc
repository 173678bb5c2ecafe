// The detached TLS 1.3 record layer's opener (common/tls13_record.h) on arbitrary bytes, with a
// fixed key. Byte 0 picks the suite and the mode:
// - raw: the rest is the peer's ciphertext, fed in pieces cut where byte 1 says (headers, lengths
//   and types are what gets exercised; a forged tag must never open);
// - sealed: the rest is a list of inner plaintexts (2-byte length prefix each), sealed here with
//   the peer's key in sequence, so content types, padding, alerts and KeyUpdates get exercised.
// Invariants: consumed/produced stay inside the buffers, a raw input never produces plaintext,
// an error is final, and a failed layer answers with at most one alert record.
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/tls13_key_schedule.h"
#include "common/tls13_record.h"

using namespace ot::tls13;

namespace {

void check(bool condition) {
  if (!condition) __builtin_trap();
}

constexpr std::array<uint8_t, 48> kClientSecret = {
    1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
    25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48};
constexpr std::array<uint8_t, 48> kServerSecret = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 9, 8, 7, 6, 5, 4,
                                                   3, 2, 1, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 9, 8,
                                                   7, 6, 5, 4, 3, 2, 1, 0, 9, 8, 7, 6, 5, 4, 3, 2};

const char* evpName(Suite suite) {
  return suite == Suite::kAes128GcmSha256   ? "AES-128-GCM"
         : suite == Suite::kAes256GcmSha384 ? "AES-256-GCM"
                                            : "ChaCha20-Poly1305";
}

// The peer's record: `inner` sealed under the client's key with `seq`.
void sealInto(Suite suite, const TrafficKeys& keys, uint64_t seq, std::span<const uint8_t> inner,
              std::vector<uint8_t>& out) {
  static EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  const size_t length = inner.size() + kTagSize;
  const size_t start = out.size();
  out.resize(start + kHeaderSize + length);
  uint8_t* header = out.data() + start;
  header[0] = kTypeApplicationData;
  header[1] = 3;
  header[2] = 3;
  header[3] = static_cast<uint8_t>(length >> 8);
  header[4] = static_cast<uint8_t>(length);
  auto nonce = keys.iv;
  for (size_t i = 0; i < 8; ++i) nonce[kIvSize - 1 - i] ^= static_cast<uint8_t>(seq >> (8 * i));
  EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, evpName(suite), nullptr);
  int n = 0;
  int m = 0;
  check(EVP_EncryptInit_ex2(ctx, cipher, keys.key.data(), nonce.data(), nullptr) == 1);
  check(EVP_EncryptUpdate(ctx, nullptr, &n, header, 5) == 1);
  check(EVP_EncryptUpdate(ctx, header + 5, &n, inner.data(), static_cast<int>(inner.size())) == 1);
  check(EVP_EncryptFinal_ex(ctx, header + 5 + n, &m) == 1);
  check(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, header + 5 + inner.size()) == 1);
  EVP_CIPHER_free(cipher);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Suite suite = static_cast<Suite>(data[0] % 3);
  const bool sealed = (data[0] & 0x80) != 0;
  const size_t secretSize = hashSize(suite);
  RecordLayer layer(suite, std::span(kClientSecret.data(), secretSize), 0,
                    std::span(kServerSecret.data(), secretSize), 0);
  check(layer.valid());
  std::vector<uint8_t> input;
  std::span<const uint8_t> rest(data + 2, size - 2);
  if (sealed) {
    TrafficKeys keys;
    check(deriveTrafficKeys(suite, std::span(kClientSecret.data(), secretSize), keys));
    for (uint64_t seq = 0; rest.size() >= 2; ++seq) {
      const size_t n = std::min<size_t>(rest.size() - 2, (size_t{rest[0]} << 8) | rest[1]);
      sealInto(suite, keys, seq, rest.subspan(2, n), input);
      rest = rest.subspan(2 + n);
    }
  } else {
    input.assign(rest.begin(), rest.end());
  }
  // Fed in two pieces, as a cut socket read would; the caller keeps what was not consumed.
  const size_t cut = input.empty() ? 0 : data[1] % (input.size() + 1);
  std::vector<uint8_t> out(1 + size_t{data[1]} * 97);
  std::vector<uint8_t> toSend;
  std::vector<uint8_t> pending(input.begin(), input.begin() + static_cast<long>(cut));
  size_t fed = cut;
  bool failed = false;
  for (int round = 0; round < 1000; ++round) {
    const auto opened = layer.open(pending, out, toSend);
    check(opened.consumed <= pending.size());
    check(opened.produced <= out.size());
    if (!sealed) check(opened.produced == 0 && opened.consumed == 0);  // nothing forged opens
    pending.erase(pending.begin(), pending.begin() + static_cast<long>(opened.consumed));
    if (opened.status == RecordLayer::OpenStatus::kError) {
      check(layer.failed());
      failed = true;
      break;
    }
    if (opened.status == RecordLayer::OpenStatus::kClosed) break;
    if (opened.status == RecordLayer::OpenStatus::kNeedRoom) {
      out.resize(out.size() * 2 + kMaxCiphertext);
      continue;
    }
    if (fed == input.size()) break;
    pending.insert(pending.end(), input.begin() + static_cast<long>(fed), input.end());
    fed = input.size();
  }
  if (failed) {
    const size_t sent = toSend.size();
    check(layer.open(input, out, toSend).status == RecordLayer::OpenStatus::kError);
    check(toSend.size() == sent);
    // What was sent: KeyUpdate answers and at most one alert record, each a whole record.
    std::span<const uint8_t> records(toSend);
    while (!records.empty()) {
      const size_t n = completeRecordSize(records);
      check(n > 0);
      records = records.subspan(n);
    }
  }
  return 0;
}
