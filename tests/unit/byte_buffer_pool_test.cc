// The per-thread pool of small byte buffers (common/byte_buffer_pool.h): what is returned is
// taken again, large buffers are not kept, the pool is bounded, and each thread has its own.
#include "common/byte_buffer_pool.h"

#include <doctest/doctest.h>

#include <thread>
#include <vector>

using ot::kMaxPooledBufferBytes;
using ot::kMaxPooledBuffers;
using ot::kPooledBufferBytes;
using ot::pooledBuffersKept;
using ot::returnPooledBuffer;
using ot::takePooledBuffer;

namespace {

void emptyThePool() {
  std::vector<std::vector<uint8_t>> held;
  while (pooledBuffersKept() > 0) held.push_back(takePooledBuffer(1));
}

}  // namespace

TEST_CASE("byte buffer pool: a returned buffer is the next one taken, empty") {
  emptyThePool();
  std::vector<uint8_t> first = takePooledBuffer(40);
  CHECK(first.empty());
  CHECK(first.capacity() >= kPooledBufferBytes);
  first.assign(40, 7);
  const uint8_t* memory = first.data();
  returnPooledBuffer(first);
  CHECK(first.capacity() == 0);
  CHECK(pooledBuffersKept() == 1);
  std::vector<uint8_t> again = takePooledBuffer(100);
  CHECK(again.data() == memory);
  CHECK(again.empty());
  CHECK(pooledBuffersKept() == 0);
  // A kept buffer smaller than asked for grows to the size.
  returnPooledBuffer(again);
  std::vector<uint8_t> larger = takePooledBuffer(kMaxPooledBufferBytes);
  CHECK(larger.capacity() >= kMaxPooledBufferBytes);
  returnPooledBuffer(larger);
  CHECK(pooledBuffersKept() == 1);
  emptyThePool();
}

TEST_CASE("byte buffer pool: large buffers are freed, not kept, and not taken from it") {
  emptyThePool();
  std::vector<uint8_t> large(kMaxPooledBufferBytes + 1);
  returnPooledBuffer(large);
  CHECK(large.capacity() == 0);
  CHECK(pooledBuffersKept() == 0);
  std::vector<uint8_t> small = takePooledBuffer(8);
  returnPooledBuffer(small);
  REQUIRE(pooledBuffersKept() == 1);
  std::vector<uint8_t> big = takePooledBuffer(kMaxPooledBufferBytes + 1);
  CHECK(big.capacity() >= kMaxPooledBufferBytes + 1);
  CHECK(pooledBuffersKept() == 1);  // the small one stays for a small write
  // A buffer with no capacity is nothing to keep.
  std::vector<uint8_t> none;
  returnPooledBuffer(none);
  CHECK(pooledBuffersKept() == 1);
  emptyThePool();
}

TEST_CASE("byte buffer pool: bounded, and each thread keeps its own") {
  emptyThePool();
  std::vector<std::vector<uint8_t>> many;
  for (size_t i = 0; i < kMaxPooledBuffers + 10; ++i) many.push_back(takePooledBuffer(16));
  for (auto& buffer : many) returnPooledBuffer(buffer);
  CHECK(pooledBuffersKept() == kMaxPooledBuffers);
  for (const auto& buffer : many) CHECK(buffer.capacity() == 0);  // kept or freed, all given up
  size_t otherThread = 1;
  std::thread([&] { otherThread = pooledBuffersKept(); }).join();
  CHECK(otherThread == 0);
  emptyThePool();
  CHECK(pooledBuffersKept() == 0);
}
