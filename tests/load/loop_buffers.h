// The load tool's loop-wide buffers: one socket read buffer and one TLS plaintext buffer for
// every connection (bridges, visitors, the bare-handshake yardstick). The tool runs one loop on
// one thread, and each buffer is consumed inside the callback that filled it (TlsStream keeps
// whatever a read leaves unread), so one of each serves them all, as relayd's loop does.
#pragma once

#include <uv.h>

#include <array>
#include <cstdint>
#include <span>

namespace ot::load {

inline std::span<uint8_t> loopPlaintextBuffer() {
  static std::array<uint8_t, 16 * 1024> buffer;
  return buffer;
}

// Starts reading `stream` into the loop-wide read buffer; libuv's status.
inline int startReading(uv_stream_t* stream, uv_read_cb onRead) {
  static std::array<uint8_t, 64 * 1024> buffer;
  return uv_read_start(
      stream,
      [](uv_handle_t*, size_t, uv_buf_t* buf) {
        buf->base = reinterpret_cast<char*>(buffer.data());
        buf->len = buffer.size();
      },
      onRead);
}

}  // namespace ot::load
