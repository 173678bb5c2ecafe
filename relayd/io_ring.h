// relayd's StreamRing (common/stream_ring.h) on io_uring: idle bridges read through armed
// multishot receives that land in one shared ring of provided buffers, and the pings one wheel
// tick sends go out in one submission. What it saves is a system call per small read or write:
// with 50,000 idle bridges that is two calls per heartbeat exchange, about a quarter of what an
// exchange costs relayd (docs/capacity.md, "io_uring for the heartbeat").
//
// A receive's data is copied into a buffer on relayd's thread (the kernel wakes it from epoll_wait
// for that), and the completion then signals an eventfd that libuv polls like any other
// descriptor. Completions are handled at the top of the loop's callbacks (the eventfd's, the
// prepare handle's, the end of a send batch), never inside an owner's call: completions met while
// a send batch is flushed from inside a call wait for the next of those.
//
// create() answers null where io_uring cannot be set up (a kernel without it, a seccomp filter
// that refuses it): relayd then reads and writes through libuv alone. Loop thread only.
#pragma once

#include <liburing.h>
#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/stream_ring.h"

namespace ot::relayd {

class RelayMetrics;

class IoRing final : public StreamRing {
 public:
  // Null with `error` set when io_uring is unavailable here.
  [[nodiscard]] static std::unique_ptr<IoRing> create(uv_loop_t* loop, RelayMetrics& metrics,
                                                      std::string& error);
  ~IoRing();
  IoRing(const IoRing&) = delete;
  IoRing& operator=(const IoRing&) = delete;

  // Closes the libuv handles; before the loop's last run. Receives still armed are settled first.
  void closeHandles();
  // Around the wheel's tick: the writes streams make with writeNow in between go out in one
  // submission at endSendBatch.
  void beginSendBatch() { batching_ = true; }
  void endSendBatch();
  // Shutdown: handles completions until no receive is armed (every stream closed meanwhile has
  // then really closed). Cancels complete at once, so this waits for nothing but the kernel.
  void settle();
  [[nodiscard]] size_t armedReceives() const { return armed_; }
  // Before a choice that depends on which bridges are alive (a visitor's bridge): finishes the
  // receives the kernel holds for this thread, so an EOF that came before the visitor is seen.
  // One read of the ring's flags when nothing is pending.
  void catchUp();

  // StreamRing
  [[nodiscard]] bool armReceive(int fd, TcpStream* stream) override;
  void cancelReceive(TcpStream* stream) override;
  [[nodiscard]] bool batchingSends() const override { return batching_; }
  [[nodiscard]] bool sendBatched(int fd, TcpStream* stream, std::vector<uint8_t>& bytes) override;
  void flushSends() override;
  void deliverHeldSoon(TcpStream* stream) override;
  void forget(TcpStream* stream) override;

 private:
  struct Completion {
    uint64_t userData;
    int32_t result;
    uint32_t flags;
  };
  struct Send {
    TcpStream* stream;
    std::vector<uint8_t> bytes;
  };

  IoRing(uv_loop_t* loop, RelayMetrics& metrics);
  [[nodiscard]] bool setUp(std::string& error);
  [[nodiscard]] io_uring_sqe* nextSqe();
  void submit();  // what is queued goes to the kernel; a failure is logged
  // Every completion there is (those put aside first), dispatched.
  void processAll();
  // The kernel holds work for this thread (DEFER_TASKRUN) or completions that overflowed.
  [[nodiscard]] bool workPending() const;
  void dispatch(const Completion& completion);
  // Before a run of completions is dispatched: the streams of the next batch's receives, and what
  // delivering their data reads, asked for a stage at a time (TcpStream::prefetch), so the cache
  // misses of bridges idle for a heartbeat overlap. Answers how many completions it looked at.
  [[nodiscard]] size_t prefetchReceivers();
  void returnBuffer(uint16_t id);
  void deliverHeld();
  static void onEventFd(uv_poll_t* handle, int status, int events);
  static void onPrepare(uv_prepare_t* handle);

  uv_loop_t* loop_;
  RelayMetrics& metrics_;
  io_uring ring_{};
  bool ringReady_ = false;
  int eventFd_ = -1;
  uv_poll_t poll_{};
  uv_prepare_t prepare_{};
  bool handlesOpen_ = false;
  // The provided buffers: a ring of descriptors the kernel takes from, and the bytes they name.
  io_uring_buf_ring* bufferRing_ = nullptr;
  uint8_t* bufferBytes_ = nullptr;
  size_t armed_ = 0;
  bool batching_ = false;
  bool dispatching_ = false;
  std::vector<Send> sends_;  // the open batch; index in the completion's user data
  size_t sendsOutstanding_ = 0;
  std::vector<Completion> putAside_;  // receives met while flushing sends inside a call
  std::vector<TcpStream*> heldDue_;
};

}  // namespace ot::relayd
