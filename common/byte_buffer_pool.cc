#include "common/byte_buffer_pool.h"

#include <algorithm>
#include <utility>

namespace ot {

namespace {

struct ThreadPool {
  ThreadPool() { kept.reserve(kMaxPooledBuffers); }  // never grows: no allocation in give
  std::vector<std::vector<uint8_t>> kept;
};

ThreadPool& threadPool() {
  thread_local ThreadPool pool;
  return pool;
}

}  // namespace

std::vector<uint8_t> takePooledBuffer(size_t bytes) {
  std::vector<uint8_t> buffer;
  if (bytes <= kMaxPooledBufferBytes) {
    auto& kept = threadPool().kept;
    if (!kept.empty()) {
      buffer = std::move(kept.back());
      kept.pop_back();
      if (buffer.capacity() < bytes) buffer.reserve(bytes);
      return buffer;
    }
  }
  buffer.reserve(std::max(bytes, kPooledBufferBytes));
  return buffer;
}

void returnPooledBuffer(std::vector<uint8_t>& buffer) {
  const size_t capacity = buffer.capacity();
  if (capacity != 0 && capacity <= kMaxPooledBufferBytes) {
    auto& kept = threadPool().kept;
    if (kept.size() < kMaxPooledBuffers) {
      buffer.clear();
      kept.push_back(std::move(buffer));
      buffer = std::vector<uint8_t>();  // a moved-from vector is only valid; this one is empty
      return;
    }
  }
  std::vector<uint8_t>().swap(buffer);
}

size_t pooledBuffersKept() {
  return threadPool().kept.size();
}

}  // namespace ot
