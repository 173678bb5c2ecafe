// Fuzzes ProxyHeaderReader: the input is read whole and in pieces whose sizes are derived from the
// input itself (so a replayed seed always splits the same way); both must agree exactly. A header
// that parses is re-encoded and re-read, and must come back the same.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/proxy_protocol.h"

namespace {

using ot::ProxyHeader;
using ot::ProxyHeaderReader;
using ot::ProxyReadResult;
using ot::ProxyStatus;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool sameResult(const ProxyReadResult& a, const ProxyReadResult& b) {
  return a.status == b.status && a.error == b.error && a.header == b.header;
}

struct Run {
  ProxyReadResult last;
  size_t consumed = 0;
};

Run feedInPieces(std::span<const uint8_t> data) {
  ProxyHeaderReader reader;
  // A small LCG seeded from the data picks piece sizes of 0 to 16 bytes.
  uint32_t state = ot::crc32c(data) ^ static_cast<uint32_t>(data.size());
  Run run;
  size_t at = 0;
  while (at < data.size()) {
    state = state * 1103515245U + 12345U;
    const size_t piece = std::min<size_t>((state >> 16) % 17, data.size() - at);
    run.last = reader.feed(data.subspan(at, piece));
    check(run.last.consumed <= piece);
    run.consumed += run.last.consumed;
    at += piece;
    if (run.last.status != ProxyStatus::kNeedMore) break;
    check(run.last.consumed == piece);
  }
  return run;
}

std::vector<ot::ProxyTlv> withoutCrc(const std::vector<ot::ProxyTlv>& tlvs) {
  std::vector<ot::ProxyTlv> out;
  for (const auto& t : tlvs) {
    if (t.type != ot::kPp2TypeCrc32c) out.push_back(t);
  }
  return out;
}

void checkReencodes(std::span<const uint8_t> original, const ProxyHeader& h) {
  if (h.version == 1) {
    const std::vector<uint8_t> encoded = ot::encodeProxyV1(h.addresses);
    const ProxyReadResult again = ot::readProxyHeader(encoded);
    check(again.status == ProxyStatus::kDone);
    check(again.consumed == encoded.size());
    check(again.header.addresses == h.addresses);
    // Strict v1 parsing means an IPv4 line has exactly one spelling.
    if (h.addresses && h.addresses->source.family == ot::ProxyAddress::Family::kInet4) {
      check(std::equal(encoded.begin(), encoded.end(), original.begin(), original.end()));
    }
    return;
  }
  const auto plain = withoutCrc(h.tlvs);
  const bool hadCrc = plain.size() != h.tlvs.size();
  const auto encoded = ot::encodeProxyV2(h.command, h.addresses, plain, hadCrc);
  check(encoded.has_value());
  const ProxyReadResult again = ot::readProxyHeader(*encoded, ot::kProxyV2MaxSize);
  check(again.status == ProxyStatus::kDone);
  check(again.consumed == encoded->size());
  check(again.header.command == h.command);
  check(again.header.addresses == h.addresses);
  check(withoutCrc(again.header.tlvs) == plain);
  const bool tcp = original[13] == 0x11 || original[13] == 0x21;
  if (tcp && h.command == ot::ProxyCommand::kProxy && !hadCrc) {
    check(std::equal(encoded->begin(), encoded->end(), original.begin(), original.end()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);

  ProxyHeaderReader reader;
  const ProxyReadResult whole = reader.feed(input);
  check(whole.consumed <= size);
  if (whole.status == ProxyStatus::kNeedMore) check(whole.consumed == size);
  if (whole.status == ProxyStatus::kError) check(whole.consumed >= 1);

  const Run split = feedInPieces(input);
  check(sameResult(whole, split.last));
  check(whole.consumed == split.consumed);

  // A finished reader repeats itself and takes nothing more.
  if (whole.status != ProxyStatus::kNeedMore) {
    const ProxyReadResult again = reader.feed(input);
    check(sameResult(whole, again));
    check(again.consumed == 0);
  }

  // Raising the maximum changes nothing unless the default one refused the size.
  const ProxyReadResult roomy = ot::readProxyHeader(input, ot::kProxyV2MaxSize);
  if (whole.error != ot::ProxyError::kTooLarge) {
    check(sameResult(whole, roomy));
    check(whole.consumed == roomy.consumed);
  }

  if (whole.status == ProxyStatus::kDone) {
    const ProxyHeader& h = whole.header;
    check(h.size == whole.consumed);
    if (h.version == 1) {
      check(h.size <= ot::kProxyV1MaxSize);
      check(data[h.size - 2] == '\r' && data[h.size - 1] == '\n');
    } else {
      check(h.version == 2);
      check(h.size >= ot::kProxyV2FixedSize && h.size <= ot::kProxyDefaultMaxHeaderSize);
    }
    checkReencodes(input.first(h.size), h);
  }
  return 0;
}
