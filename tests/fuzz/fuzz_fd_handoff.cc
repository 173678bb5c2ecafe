// Fuzzes the handoff message relayd sends controld with an accepted connection (decodeHandoff).
// Whatever decodes must have one spelling: encoded again it is the same bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/fd_handoff.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  const auto decoded = ot::mesh::decodeHandoff(input);
  if (!decoded) return 0;
  check(decoded->prefix.size() <= ot::mesh::kMaxHandoffPrefix);
  const auto encoded = ot::mesh::encodeHandoff(decoded.value());
  check(encoded.ok());
  check(encoded->size() == size);
  check(std::equal(encoded->begin(), encoded->end(), input.begin()));
  return 0;
}
