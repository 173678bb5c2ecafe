// SIGTERM and SIGINT, taken synchronously. block() must run on the main thread before any other
// thread starts: every thread inherits the mask, so no handler ever runs on a gRPC or libuv
// thread and the main thread alone learns of a shutdown, from wait(). SIGPIPE is ignored (a
// peer that goes away costs an EPIPE, not the process).
#pragma once

#include <signal.h>

#include <cstdint>

namespace ot::controld {

class ShutdownSignals {
 public:
  // Blocks SIGTERM and SIGINT in the calling thread (and so in every thread it starts later).
  [[nodiscard]] static ShutdownSignals block();

  // Waits up to `ms` for SIGTERM/SIGINT; true when one arrived.
  [[nodiscard]] bool wait(int64_t ms) const;

 private:
  explicit ShutdownSignals(const sigset_t& set) : set_(set) {}

  sigset_t set_;
};

}  // namespace ot::controld
