#include "relayd/connection_cap.h"

#include <doctest/doctest.h>

#include <cstdint>

using ot::relayd::ConnectionCap;
using ot::relayd::ConnectionCapInputs;
using ot::relayd::deriveConnectionCap;

namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;

ConnectionCapInputs inputs(uint64_t memory, uint64_t nofile) {
  ConnectionCapInputs in;
  in.memoryBytes = memory;
  in.openFileLimit = nofile;
  in.bufferedBytesLimit = 256 * kMiB;
  return in;
}

}  // namespace

TEST_CASE("connection cap: 100,000 connections where memory and descriptors allow them") {
  // 8 GiB and 200,000 descriptors: memory gives (6 GiB - 256 MiB) / 48 KiB = 125,610.
  const ConnectionCap cap = deriveConnectionCap(inputs(8 * kGiB, 200'000));
  CHECK(cap.byMemory == (6 * kGiB - 256 * kMiB) / (48 * 1024));
  CHECK(cap.byDescriptors == 200'000 - 64 - 1024);
  CHECK(cap.limit == cap.byMemory);
  CHECK(cap.limit >= 100'000);
  CHECK(cap.boundBy == "memory");
}

TEST_CASE("connection cap: the descriptor limit bounds it, less relayd's own reserve") {
  // This box: 23 GiB, 20,000 descriptors.
  const ConnectionCap box = deriveConnectionCap(inputs(23 * kGiB, 20'000));
  CHECK(box.reservedDescriptors == 64 + 200);
  CHECK(box.limit == 20'000 - 264);
  CHECK(box.boundBy == "descriptors");
  // A large limit: the API proxy's share stops at 1,024.
  const ConnectionCap large = deriveConnectionCap(inputs(256 * kGiB, 1'048'576));
  CHECK(large.reservedDescriptors == 64 + 1024);
  CHECK(large.limit == 1'048'576 - 1088);
  // The default 1,024 of a shell: 64 + 10 kept back.
  const ConnectionCap shell = deriveConnectionCap(inputs(23 * kGiB, 1024));
  CHECK(shell.limit == 1024 - 64 - 10);
  // A tiny limit keeps back an eighth, not 64 of 96.
  const ConnectionCap tiny = deriveConnectionCap(inputs(23 * kGiB, 96));
  CHECK(tiny.reservedDescriptors == 12);
  CHECK(tiny.limit == 84);
}

TEST_CASE("connection cap: a small machine is bounded by memory, never below one connection") {
  const ConnectionCap twoGiB = deriveConnectionCap(inputs(2 * kGiB, 200'000));
  CHECK(twoGiB.limit == (1536 * kMiB - 256 * kMiB) / (48 * 1024));
  CHECK(twoGiB.boundBy == "memory");
  // Less memory than BUFFERED_BYTES_LIMIT takes: one connection, not zero or a wrapped count.
  const ConnectionCap tiny = deriveConnectionCap(inputs(256 * kMiB, 200'000));
  CHECK(tiny.byMemory == 0);
  CHECK(tiny.limit == 1);
  // The per-connection figure is an input.
  ConnectionCapInputs lean = inputs(8 * kGiB, 1'000'000);
  lean.bytesPerConnection = 16 * 1024;
  CHECK(deriveConnectionCap(lean).limit == (6 * kGiB - 256 * kMiB) / (16 * 1024));
}

TEST_CASE("connection cap: an unknown input does not bound it") {
  CHECK(deriveConnectionCap(inputs(0, 20'000)).limit == 20'000 - 264);
  CHECK(deriveConnectionCap(inputs(8 * kGiB, 0)).boundBy == "memory");
  const ConnectionCap none = deriveConnectionCap(inputs(0, 0));
  CHECK(none.limit == ot::relayd::kFallbackConnectionCap);
  CHECK(none.boundBy == "fallback");
}
