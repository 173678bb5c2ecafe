#include "relayd/io_ring.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <utility>

#include "common/log.h"
#include "common/log_throttle.h"
#include "common/prefetch.h"
#include "common/tcp_stream.h"
#include "relayd/relay_metrics.h"

namespace ot::relayd {
namespace {

// Idle bridges read pongs and status refreshes (tens to hundreds of bytes); 2,048 buffers cover
// the pongs of a wheel slot at 100,000 bridges (~1,700) between two completion rounds. A receive
// that finds none ends (ENOBUFS, counted) and is armed again once buffers are back.
constexpr unsigned kBufferCount = 2048;
constexpr size_t kBufferSize = 2048;
constexpr uint16_t kBufferGroup = 1;
constexpr unsigned kSubmissionEntries = 1024;
constexpr unsigned kCompletionEntries = 16384;

// The low two bits of a completion's user data say what it is; the rest is a TcpStream pointer
// (receives) or the send's index in the batch (sends). Cancels carry 0 and are not looked at.
constexpr uint64_t kTagMask = 3;
constexpr uint64_t kReceiveTag = 1;
constexpr uint64_t kSendTag = 2;

const log::Logger kIoRingLog("relayd.io_ring");
constexpr uint64_t kSubmitFailureLogIntervalMs = 10'000;

}  // namespace

std::unique_ptr<IoRing> IoRing::create(uv_loop_t* loop, RelayMetrics& metrics, std::string& error) {
  std::unique_ptr<IoRing> ring(new (std::nothrow) IoRing(loop, metrics));
  if (ring == nullptr) {
    error = "out of memory";
    return nullptr;
  }
  if (!ring->setUp(error)) return nullptr;
  return ring;
}

IoRing::IoRing(uv_loop_t* loop, RelayMetrics& metrics) : loop_(loop), metrics_(metrics) {}

bool IoRing::setUp(std::string& error) {
  io_uring_params params{};
  // DEFER_TASKRUN: the kernel finishes a receive (copies the pong, posts its completion) only when
  // this thread asks, so a burst of pongs costs one wake-up and no interrupt: 13.2-17.5 us per
  // heartbeat exchange against 19.3-22.5 us through libuv (docs/capacity.md). The eventfd says such
  // work is pending, TASKRUN_FLAG says so in shared memory. The work waits until asked, also while
  // the loop is busy with other descriptors: a choice that depends on a bridge being alive first
  // asks (catchUp), so an EOF that came before a visitor is seen before that visitor is routed.
  params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                 IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_CQSIZE;
  params.cq_entries = kCompletionEntries;
  if (const int rc = io_uring_queue_init_params(kSubmissionEntries, &ring_, &params); rc < 0) {
    error = std::string("io_uring_queue_init: ") + std::strerror(-rc);
    return false;
  }
  ringReady_ = true;

  const size_t descriptors = kBufferCount * sizeof(io_uring_buf);
  void* ringMemory =
      mmap(nullptr, descriptors, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* bytes = mmap(nullptr, kBufferCount * kBufferSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ringMemory == MAP_FAILED || bytes == MAP_FAILED) {
    if (ringMemory != MAP_FAILED) munmap(ringMemory, descriptors);
    if (bytes != MAP_FAILED) munmap(bytes, kBufferCount * kBufferSize);
    error = "cannot map the receive buffers";
    return false;
  }
  bufferRing_ = static_cast<io_uring_buf_ring*>(ringMemory);  // zeroed: its tail starts at 0
  bufferBytes_ = static_cast<uint8_t*>(bytes);
  io_uring_buf_reg registration{};
  registration.ring_addr = reinterpret_cast<uintptr_t>(ringMemory);
  registration.ring_entries = kBufferCount;
  registration.bgid = kBufferGroup;
  if (const int rc = io_uring_register_buf_ring(&ring_, &registration, 0); rc < 0) {
    error = std::string("io_uring_register_buf_ring: ") + std::strerror(-rc);
    return false;
  }
  for (unsigned id = 0; id < kBufferCount; ++id) {
    io_uring_buf_ring_add(bufferRing_, bufferBytes_ + id * kBufferSize, kBufferSize,
                          static_cast<unsigned short>(id), io_uring_buf_ring_mask(kBufferCount),
                          static_cast<int>(id));
  }
  io_uring_buf_ring_advance(bufferRing_, static_cast<int>(kBufferCount));

  eventFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (eventFd_ < 0) {
    error = std::string("eventfd: ") + std::strerror(errno);
    return false;
  }
  if (const int rc = io_uring_register_eventfd(&ring_, eventFd_); rc < 0) {
    error = std::string("io_uring_register_eventfd: ") + std::strerror(-rc);
    return false;
  }
  if (uv_poll_init(loop_, &poll_, eventFd_) != 0) {
    error = "cannot poll the ring's eventfd";
    return false;
  }
  poll_.data = this;
  uv_prepare_init(loop_, &prepare_);
  prepare_.data = this;
  handlesOpen_ = true;
  uv_poll_start(&poll_, UV_READABLE, onEventFd);
  uv_prepare_start(&prepare_, onPrepare);
  // Neither keeps the loop alive: the streams they serve do.
  uv_unref(reinterpret_cast<uv_handle_t*>(&poll_));
  uv_unref(reinterpret_cast<uv_handle_t*>(&prepare_));
  return true;
}

IoRing::~IoRing() {
  if (ringReady_) io_uring_queue_exit(&ring_);
  if (eventFd_ >= 0) ::close(eventFd_);
  if (bufferRing_ != nullptr) munmap(bufferRing_, kBufferCount * sizeof(io_uring_buf));
  if (bufferBytes_ != nullptr) munmap(bufferBytes_, kBufferCount * kBufferSize);
}

void IoRing::closeHandles() {
  if (!handlesOpen_) return;
  settle();
  handlesOpen_ = false;
  uv_close(reinterpret_cast<uv_handle_t*>(&poll_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&prepare_), nullptr);
}

void IoRing::submit() {
  const int rc = io_uring_submit(&ring_);
  if (rc >= 0) return;
  // Not expected on a ring this thread set up; receives not handed over would never complete.
  static LogThrottle throttle(kSubmitFailureLogIntervalMs);
  if (uint64_t suppressed = 0; throttle.allow(uv_now(loop_), suppressed)) {
    kIoRingLog.error("io_uring submission failed",
                     {{"error", std::strerror(-rc)}, {"suppressed", std::to_string(suppressed)}});
  }
}

io_uring_sqe* IoRing::nextSqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    submit();  // the queue is full: hand it over and take the next entry
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

bool IoRing::armReceive(int fd, TcpStream* stream) {
  if (fd < 0) return false;
  io_uring_sqe* sqe = nextSqe();
  if (sqe == nullptr) return false;
  io_uring_prep_recv_multishot(sqe, fd, nullptr, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = kBufferGroup;
  io_uring_sqe_set_data64(sqe, reinterpret_cast<uintptr_t>(stream) | kReceiveTag);
  // An armed receive is a pending read: it keeps the loop alive as libuv's own reads do.
  if (armed_++ == 0 && handlesOpen_) uv_ref(reinterpret_cast<uv_handle_t*>(&poll_));
  metrics_.ringArmed.Set(static_cast<double>(armed_));
  return true;  // submitted before the loop next waits (onPrepare)
}

void IoRing::cancelReceive(TcpStream* stream) {
  io_uring_sqe* sqe = nextSqe();
  for (int attempt = 0; sqe == nullptr && attempt < 3; ++attempt) {
    submit();  // a full queue was handed over; a failing ring is logged there
    sqe = io_uring_get_sqe(&ring_);
  }
  if (sqe == nullptr) return;
  io_uring_prep_cancel64(sqe, reinterpret_cast<uintptr_t>(stream) | kReceiveTag, 0);
  io_uring_sqe_set_data64(sqe, 0);
}

bool IoRing::sendBatched(int fd, TcpStream* stream, std::vector<uint8_t>& bytes) {
  if (!batching_ || fd < 0) return false;
  io_uring_sqe* sqe = nextSqe();
  if (sqe == nullptr) return false;
  const size_t index = sends_.size();
  sends_.push_back(Send{stream, std::move(bytes)});
  const std::vector<uint8_t>& queued = sends_.back().bytes;
  // MSG_DONTWAIT: a socket without room answers EAGAIN inside the submission instead of parking
  // the send in the kernel; the stream then queues the bytes through libuv as usual.
  io_uring_prep_send(sqe, fd, queued.data(), queued.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  io_uring_sqe_set_data64(sqe, (static_cast<uint64_t>(index) << 2) | kSendTag);
  ++sendsOutstanding_;
  return true;
}

void IoRing::flushSends() {
  int emptyRounds = 0;
  while (sendsOutstanding_ > 0) {
    if (io_uring_sq_ready(&ring_) > 0) submit();
    io_uring_cqe* cqe = nullptr;
    if (io_uring_peek_cqe(&ring_, &cqe) != 0 || cqe == nullptr) {
      // Sends that cannot wait complete inside the submission; this only collects a completion
      // the kernel posts late, and never waits on the network.
      if (++emptyRounds < 3) {
        (void)io_uring_get_events(&ring_);
        continue;
      }
      if (io_uring_wait_cqe(&ring_, &cqe) != 0 || cqe == nullptr) break;
    }
    const Completion completion{cqe->user_data, cqe->res, cqe->flags};
    io_uring_cqe_seen(&ring_, cqe);
    if ((completion.userData & kTagMask) == kSendTag) {
      dispatch(completion);
    } else {
      putAside_.push_back(completion);  // a receive: its stream may be inside a call now
    }
  }
  if (sendsOutstanding_ == 0) sends_.clear();
}

void IoRing::endSendBatch() {
  batching_ = false;
  flushSends();
  if (!putAside_.empty()) processAll();
}

void IoRing::deliverHeldSoon(TcpStream* stream) {
  // The prepare handle delivers them; it keeps the loop turning until it has.
  if (heldDue_.empty() && handlesOpen_) uv_ref(reinterpret_cast<uv_handle_t*>(&prepare_));
  heldDue_.push_back(stream);
}

void IoRing::forget(TcpStream* stream) {
  std::erase(heldDue_, stream);
  if (heldDue_.empty() && handlesOpen_) uv_unref(reinterpret_cast<uv_handle_t*>(&prepare_));
}

void IoRing::deliverHeld() {
  std::vector<TcpStream*> due;
  due.swap(heldDue_);
  if (handlesOpen_) uv_unref(reinterpret_cast<uv_handle_t*>(&prepare_));
  for (TcpStream* stream : due) stream->onRingHeldDue();
}

bool IoRing::workPending() const {
  return (IO_URING_READ_ONCE(*ring_.sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) != 0;
}

void IoRing::catchUp() {
  if (!ringReady_) return;
  if (workPending() || io_uring_cq_ready(&ring_) > 0 || !putAside_.empty()) processAll();
}

void IoRing::processAll() {
  if (dispatching_) return;
  dispatching_ = true;
  // Completions the kernel has not posted yet (its work pending for this thread, or an
  // overflowed queue): fetched in one call, only when the ring says so.
  if (workPending()) (void)io_uring_get_events(&ring_);
  size_t asideNext = 0;
  size_t prefetchedAhead = 0;  // completions in the queue whose streams were prefetched
  for (;;) {
    Completion completion{};
    // Put aside earlier (by a flush inside a dispatch, too): older than anything in the queue.
    if (asideNext < putAside_.size()) {
      completion = putAside_[asideNext++];
    } else {
      putAside_.clear();
      asideNext = 0;
      if (prefetchedAhead == 0) prefetchedAhead = prefetchReceivers();
      if (prefetchedAhead > 0) --prefetchedAhead;
      io_uring_cqe* cqe = nullptr;
      if (io_uring_peek_cqe(&ring_, &cqe) != 0 || cqe == nullptr) break;
      completion = {cqe->user_data, cqe->res, cqe->flags};
      io_uring_cqe_seen(&ring_, cqe);
    }
    dispatch(completion);
  }
  dispatching_ = false;
}

size_t IoRing::prefetchReceivers() {
  // Up to a batch of the completions waiting, not taken: every stream they name is alive until
  // its receive's last completion is dispatched, and none of these is yet.
  std::array<io_uring_cqe*, kPrefetchBatch> cqes{};
  const unsigned count =
      io_uring_peek_batch_cqe(&ring_, cqes.data(), static_cast<unsigned>(cqes.size()));
  std::array<const TcpStream*, kPrefetchBatch> streams{};
  size_t receivers = 0;
  for (unsigned i = 0; i < count; ++i) {
    if ((cqes[i]->user_data & kTagMask) == kReceiveTag && cqes[i]->res > 0) {
      streams[receivers++] = reinterpret_cast<const TcpStream*>(cqes[i]->user_data & ~kTagMask);
    }
  }
  if (receivers > 1) {  // one stream's misses have nothing to overlap with
    for (unsigned stage = 0; stage < kPrefetchStages; ++stage) {
      for (size_t i = 0; i < receivers; ++i) streams[i]->prefetch(stage);
    }
  }
  return count;
}

void IoRing::dispatch(const Completion& completion) {
  const uint64_t tag = completion.userData & kTagMask;
  if (tag == kReceiveTag) {
    auto* stream = reinterpret_cast<TcpStream*>(completion.userData & ~kTagMask);
    if ((completion.flags & IORING_CQE_F_BUFFER) != 0) {
      const auto id = static_cast<uint16_t>(completion.flags >> IORING_CQE_BUFFER_SHIFT);
      if (completion.result > 0) {
        metrics_.ringReceives.Increment();
        stream->onRingData(std::span<const uint8_t>(bufferBytes_ + size_t{id} * kBufferSize,
                                                    static_cast<size_t>(completion.result)));
      }
      returnBuffer(id);
    }
    if ((completion.flags & IORING_CQE_F_MORE) == 0) {
      if (--armed_ == 0 && handlesOpen_) uv_unref(reinterpret_cast<uv_handle_t*>(&poll_));
      metrics_.ringArmed.Set(static_cast<double>(armed_));
      if (completion.result == -ENOBUFS) metrics_.ringOutOfBuffers.Increment();
      stream->onRingReceiveEnded(completion.result > 0 ? 1 : completion.result);
    }
    return;
  }
  if (tag == kSendTag) {
    const size_t index = completion.userData >> 2;
    if (index >= sends_.size() || sends_[index].stream == nullptr) return;
    TcpStream* stream = sends_[index].stream;
    std::vector<uint8_t> bytes = std::move(sends_[index].bytes);
    sends_[index].stream = nullptr;
    --sendsOutstanding_;
    metrics_.ringSends.Increment();
    stream->onRingSent(std::move(bytes), completion.result);
  }
}

void IoRing::returnBuffer(uint16_t id) {
  io_uring_buf_ring_add(bufferRing_, bufferBytes_ + size_t{id} * kBufferSize, kBufferSize, id,
                        io_uring_buf_ring_mask(kBufferCount), 0);
  io_uring_buf_ring_advance(bufferRing_, 1);
}

void IoRing::settle() {
  for (int round = 0; round < 200 && (armed_ > 0 || !putAside_.empty()); ++round) {
    submit();
    processAll();
    if (armed_ == 0) break;
    // Cancelled receives end through the kernel's task work, which the next round runs.
    __kernel_timespec wait{0, 5'000'000};
    io_uring_cqe* cqe = nullptr;
    (void)io_uring_wait_cqe_timeout(&ring_, &cqe, &wait);
  }
}

void IoRing::onEventFd(uv_poll_t* handle, int status, int) {
  auto* self = static_cast<IoRing*>(handle->data);
  if (status < 0) return;
  uint64_t count = 0;
  (void)::read(self->eventFd_, &count, sizeof(count));
  self->processAll();
}

void IoRing::onPrepare(uv_prepare_t* handle) {
  auto* self = static_cast<IoRing*>(handle->data);
  if (!self->heldDue_.empty()) self->deliverHeld();
  if (!self->putAside_.empty()) self->processAll();
  // Receives armed or cancelled since the last wait go to the kernel before the loop waits.
  if (io_uring_sq_ready(&self->ring_) > 0) self->submit();
}

}  // namespace ot::relayd
