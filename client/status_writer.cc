#include "client/status_writer.h"

#include <unistd.h>

#include <memory>
#include <utility>

#include "client/tunnel_state.h"
#include "common/clock.h"

namespace ot::client {
namespace {

struct WriteJob {
  uv_work_t req{};
  bool* writing = nullptr;
  std::string path;
  std::string content;
};

}  // namespace

StatusWriter::StatusWriter(uv_loop_t* loop, std::string path, Source source)
    : loop_(loop), path_(std::move(path)), source_(std::move(source)) {
  (void)uv_timer_init(loop_, &timer_);
  timer_.data = this;
}

void StatusWriter::start() {
  (void)uv_timer_start(&timer_, &StatusWriter::onTick, 0, kStatusMinIntervalMs);
}

void StatusWriter::close() {
  if (closed_) return;
  closed_ = true;
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

void StatusWriter::remove() const {
  (void)::unlink(path_.c_str());
}

void StatusWriter::onTick(uv_timer_t* timer) {
  static_cast<StatusWriter*>(timer->data)->tick();
}

void StatusWriter::tick() {
  if (closed_ || writing_) return;
  DialerStatus current = source_();
  const uint64_t now = uv_now(loop_);
  if (written_ && current == last_ && now - lastWriteMs_ < kStatusRefreshMs) return;
  auto job = std::make_unique<WriteJob>();
  job->req.data = job.get();
  job->writing = &writing_;
  job->path = path_;
  job->content = statusToJson(current, static_cast<uint64_t>(unixNowMs()), ::getpid());
  const int rc = uv_queue_work(
      loop_, &job->req,
      [](uv_work_t* req) {
        auto* work = static_cast<WriteJob*>(req->data);
        // A failed write (a full disk, a removed directory) only costs `otunnel status`.
        (void)writePrivateFile(work->path, work->content);
      },
      [](uv_work_t* req, int) {
        std::unique_ptr<WriteJob> work(static_cast<WriteJob*>(req->data));
        *work->writing = false;
      });
  if (rc != 0) return;
  (void)job.release();
  writing_ = true;
  last_ = std::move(current);
  lastWriteMs_ = now;
  written_ = true;
}

}  // namespace ot::client
