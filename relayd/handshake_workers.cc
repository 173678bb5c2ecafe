#include "relayd/handshake_workers.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <system_error>
#include <utility>

#include "relayd/relay_metrics.h"

namespace ot::relayd {

namespace {
constexpr size_t kMaxAutoWorkers = 8;
}  // namespace

size_t handshakeWorkerCount(int64_t configured, size_t cores) {
  if (configured >= 0) return static_cast<size_t>(configured);
  // One core for the loop and one for the rest of the machine: controld spends about as much
  // per attach as relayd's loop (docs/capacity.md), and the kernel's network work lands there too.
  return std::min(kMaxAutoWorkers, cores > 2 ? cores - 2 : 0);
}

size_t usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int count = CPU_COUNT(&set);
  return count > 0 ? static_cast<size_t>(count) : 1;
}

HandshakeWorkers::HandshakeWorkers(uv_loop_t* loop, RelayMetrics* metrics)
    : loop_(loop), metrics_(metrics) {}

std::unique_ptr<HandshakeWorkers> HandshakeWorkers::create(uv_loop_t* loop, size_t threads,
                                                           RelayMetrics* metrics,
                                                           std::string& error) {
  std::unique_ptr<HandshakeWorkers> workers(new HandshakeWorkers(loop, metrics));
  // The threads first: a failure then leaves no libuv handle to close.
  for (size_t i = 0; i < threads; ++i) {
    try {
      workers->threads_.emplace_back([w = workers.get(), i] {
        const std::string name = "ot-handshake-" + std::to_string(i);
        (void)pthread_setname_np(pthread_self(), name.c_str());
        w->work();
      });
    } catch (const std::system_error& e) {
      error = std::string("cannot start a handshake worker: ") + e.what();
      workers->stopThreads();
      return nullptr;
    }
  }
  if (const int rc = uv_async_init(loop, &workers->async_, onAsync); rc != 0) {
    error = std::string("cannot make the handshake workers' wake-up: ") + uv_strerror(rc);
    workers->stopThreads();
    return nullptr;
  }
  workers->async_.data = workers.get();
  uv_unref(reinterpret_cast<uv_handle_t*>(&workers->async_));  // ref'd while steps are out
  return workers;
}

void HandshakeWorkers::stopThreads() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

HandshakeWorkers::~HandshakeWorkers() {
  stopThreads();  // closeHandles() did already, unless the owner never ran its shutdown
}

void HandshakeWorkers::submit(std::unique_ptr<Job> job) {
  if (closed_) {  // shutdown: no workers left
    job->status = job->engine->handshake();
    tls::TlsStream::handshakeStepDone(std::move(job));
    return;
  }
  if (outstanding_++ == 0) uv_ref(reinterpret_cast<uv_handle_t*>(&async_));
  if (metrics_ != nullptr) metrics_->handshakeSteps.Increment();
  {
    const std::lock_guard lock(mutex_);
    queued_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void HandshakeWorkers::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
    if (stopping_) return;
    std::unique_ptr<Job> job = std::move(queued_.front());
    queued_.pop_front();
    lock.unlock();
    job->status = job->engine->handshake();
    lock.lock();
    const bool first = done_.empty();
    done_.push_back(std::move(job));
    // One wake-up per batch: the loop takes everything done when it runs.
    if (first) uv_async_send(&async_);
  }
}

void HandshakeWorkers::onAsync(uv_async_t* handle) {
  static_cast<HandshakeWorkers*>(handle->data)->deliver();
}

void HandshakeWorkers::deliver() {
  std::vector<std::unique_ptr<Job>> done;
  {
    const std::lock_guard lock(mutex_);
    done.swap(done_);
  }
  for (std::unique_ptr<Job>& job : done) {
    if (--outstanding_ == 0) uv_unref(reinterpret_cast<uv_handle_t*>(&async_));
    tls::TlsStream::handshakeStepDone(std::move(job));
  }
}

void HandshakeWorkers::closeHandles() {
  if (closed_) return;
  closed_ = true;
  stopThreads();
  // Every step is still owned here (queued, or done and not delivered): their streams are being
  // closed by the shutdown, so they are dropped, not delivered.
  std::deque<std::unique_ptr<Job>> queued;
  std::vector<std::unique_ptr<Job>> done;
  {
    const std::lock_guard lock(mutex_);
    queued.swap(queued_);
    done.swap(done_);
  }
  for (auto& job : queued) tls::TlsStream::handshakeStepDropped(std::move(job));
  for (auto& job : done) tls::TlsStream::handshakeStepDropped(std::move(job));
  outstanding_ = 0;
  uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);  // open since create() succeeded
}

}  // namespace ot::relayd
