// One write whose bytes libuv holds until it is done: the load tool's sockets (bridges, visitors,
// the bare-handshake yardstick) all send buffers they hand over, and none waits for the result.
#pragma once

#include <uv.h>

#include <cstdint>
#include <vector>

namespace ot::load {

// Starts writing `bytes` on `stream`; they are freed when the write completes or fails. False if
// the write could not start (the stream is closing): the caller ends the connection.
inline bool writeOwned(uv_stream_t* stream, std::vector<uint8_t> bytes) {
  struct Write {
    uv_write_t req{};
    std::vector<uint8_t> bytes;
  };
  auto* write = new Write;
  write->bytes = std::move(bytes);
  write->req.data = write;
  uv_buf_t buf = uv_buf_init(reinterpret_cast<char*>(write->bytes.data()),
                             static_cast<unsigned>(write->bytes.size()));
  if (uv_write(&write->req, stream, &buf, 1,
               [](uv_write_t* req, int) { delete static_cast<Write*>(req->data); }) != 0) {
    delete write;
    return false;
  }
  return true;
}

}  // namespace ot::load
