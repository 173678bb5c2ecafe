// Fuzzes ClientHelloReader: the same input fed whole, in pieces split at points derived from the
// input, and byte by byte must reach the same result; the reader must keep exactly the bytes it
// was fed; work must stay linear; and the byte budget must be exact at the hello's end.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/client_hello.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool sameBytes(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// Record headers, gathered handshake bytes and the hello body are each looked at once at most.
bool linear(const ot::ClientHelloReader& reader) {
  return reader.bytesExamined() <= 3 * reader.buffered().size();
}

// Piece sizes come from the input itself (FNV-1a, then xorshift), so a crash replays exactly.
class Splitter {
 public:
  explicit Splitter(std::span<const uint8_t> input) {
    for (const uint8_t b : input) state_ = (state_ ^ b) * 16777619u;
    if (state_ == 0) state_ = 1;
  }
  size_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    // Mostly small pieces, so record and handshake headers get split; sometimes large ones.
    return (state_ % 8 == 0) ? 1 + state_ % 4096 : 1 + state_ % 16;
  }

 private:
  uint32_t state_ = 2166136261u;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  using ot::ClientHelloStatus;

  ot::ClientHelloReader whole;
  const auto expected = whole.feed(input);
  check(sameBytes(whole.buffered(), input));
  check(linear(whole));
  if (expected.status != ClientHelloStatus::kNeedMore) {
    check(whole.feed(input) == expected);  // a decided reader neither changes nor grows
    check(whole.buffered().size() == size);
  }
  if (expected.status == ClientHelloStatus::kError) {
    check(expected.error != ot::ClientHelloError::kNone);
  }

  // Pieces: the same decision, and buffered() is exactly the prefix fed so far.
  ot::ClientHelloReader pieces;
  Splitter splitter(input);
  size_t fed = 0;
  ot::ClientHelloResult got;
  while (fed < size && got.status == ClientHelloStatus::kNeedMore) {
    const size_t n = std::min(splitter.next(), size - fed);
    got = pieces.feed(input.subspan(fed, n));
    fed += n;
    check(sameBytes(pieces.buffered(), input.first(fed)));
  }
  check(got == expected);
  check(linear(pieces));

  // Byte by byte: the same decision, and a hello is done exactly at the end of its last record.
  ot::ClientHelloReader bytes;
  ot::ClientHelloResult single;
  size_t at = 0;
  while (at < size && single.status == ClientHelloStatus::kNeedMore) {
    single = bytes.feed(input.subspan(at++, 1));
  }
  check(single == expected);
  check(linear(bytes));
  check(sameBytes(bytes.buffered(), input.first(at)));

  if (expected.status == ClientHelloStatus::kDone) {
    const auto& info = expected.info;
    check(at == info.helloEnd && info.helloEnd <= size);
    // The budget is exact: a hello fits a budget of its own size and not one byte less.
    ot::ClientHelloReader exact(info.helloEnd);
    check(exact.feed(input) == expected);
    ot::ClientHelloReader tight(info.helloEnd - 1);
    const auto refused = tight.feed(input);
    check(refused.status == ClientHelloStatus::kError &&
          refused.error == ot::ClientHelloError::kTooLarge);
    // A valid name is already normal; anything else leaves the name empty.
    if (info.sni == ot::SniStatus::kValid) {
      const auto again = ot::normalizeHostName(info.serverName);
      check(again.has_value() && *again == info.serverName);
    } else {
      check(info.serverName.empty());
    }
    for (const auto& protocol : info.alpn) check(!protocol.empty() && protocol.size() <= 255);
  }
  return 0;
}
