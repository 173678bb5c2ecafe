// What otunnel's TCP streams (common/tcp_stream.h) get from their owner: the loop and a read
// buffer, and no write backlog rule (kNoWriteBacklog) nor buffered-bytes accounting. otunnel
// bounds its queues itself: the relay connection by its congestion marks, which stop the
// producers (relay_transport.h), and each local connection by the receive window it grants.
// One per owner (RelayTransport, LocalStream), so each keeps its own read buffer. Loop thread only.
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/tcp_stream.h"
#include "common/write_backlog.h"

namespace ot::client {

class StreamContext final : public TcpStreamContext {
 public:
  // `readBuffer` must outlive every stream of this context.
  StreamContext(uv_loop_t* loop, std::span<uint8_t> readBuffer)
      : loop_(loop), readBuffer_(readBuffer) {}

  [[nodiscard]] uv_loop_t* streamLoop() const override { return loop_; }
  [[nodiscard]] std::span<uint8_t> streamReadBuffer() override { return readBuffer_; }
  [[nodiscard]] WriteBacklogMarks writeBacklogMarks() const override { return kNoWriteBacklog; }
  void addBuffered(int64_t) override {}
  void onStreamOpened(TcpStream&) override {}
  void onStreamClosed(TcpStream&) override {}
  void onWriteBacklogPaused() override {}
  void onWriteBacklogOverflow(const TcpStream&, size_t) override {}

 private:
  uv_loop_t* loop_;
  std::span<uint8_t> readBuffer_;
};

}  // namespace ot::client
