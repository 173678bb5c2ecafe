// Keeps <state dir>/<tunnel id>.status.json current for `otunnel status` (dialer_status.h): a
// one-second tick writes the dialer's status when it changed (so at most once a second) and at
// least every kStatusRefreshMs, which is how a reader tells a running otunnel from a stale file.
// The write (temp file, rename) runs on libuv's thread pool, never on the loop; a tick while one
// is in flight skips. Loop thread only.
#pragma once

#include <uv.h>

#include <functional>
#include <string>

#include "client/dialer_status.h"

namespace ot::client {

class StatusWriter {
 public:
  using Source = std::function<DialerStatus()>;

  StatusWriter(uv_loop_t* loop, std::string path, Source source);
  ~StatusWriter() = default;
  StatusWriter(const StatusWriter&) = delete;
  StatusWriter& operator=(const StatusWriter&) = delete;

  void start();
  // Closes the timer; a write in flight finishes (the loop waits for it). Then remove() may run.
  void close();
  // Deletes the file (blocking: call after the loop ended).
  void remove() const;

 private:
  static void onTick(uv_timer_t* timer);
  void tick();

  uv_loop_t* loop_;
  std::string path_;
  Source source_;
  uv_timer_t timer_{};
  bool writing_ = false;
  bool closed_ = false;
  DialerStatus last_;
  uint64_t lastWriteMs_ = 0;
  bool written_ = false;
};

}  // namespace ot::client
