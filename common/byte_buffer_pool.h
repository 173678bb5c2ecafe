// Small byte buffers kept by each thread for reuse.
//
// Why: relayd pings its idle bridges a wheel slot at a time, a few hundred in one tick, and each
// ping's TLS record is sealed into a buffer of its own that the tick's send batch holds until
// its one submission (relayd/io_ring.h). Made and released a few hundred at a time, those
// buffers sent libc's allocator to its slow path for nearly every one (it keeps only seven
// chunks of a size per thread at hand): ~0.3 us a ping in 40 s profiles at 19,000 bridges.
// Taken from here, a tick's buffers are the previous tick's.
//
// Bounded: at most kMaxPooledBuffers buffers, none larger than kMaxPooledBufferBytes, so a
// thread keeps at most ~1 MiB here (~256 KiB when the buffers are the records of pings).
// A buffer moved to another thread is returned to that thread's pool; both stay bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ot {

inline constexpr size_t kPooledBufferBytes = 256;  // the least capacity a pooled buffer has
inline constexpr size_t kMaxPooledBufferBytes = 1024;
inline constexpr size_t kMaxPooledBuffers = 1024;

// An empty buffer with room for `bytes`: one this thread kept when the size is small, a new one
// (of at least kPooledBufferBytes) otherwise.
[[nodiscard]] std::vector<uint8_t> takePooledBuffer(size_t bytes);
// A buffer whose bytes are done with: kept for takePooledBuffer when its capacity is within
// kMaxPooledBufferBytes and the pool has room, freed otherwise. `buffer` is left empty, with no
// capacity, either way.
void returnPooledBuffer(std::vector<uint8_t>& buffer);
// How many this thread keeps now (for tests).
[[nodiscard]] size_t pooledBuffersKept();

}  // namespace ot
