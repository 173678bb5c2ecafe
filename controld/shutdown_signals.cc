#include "controld/shutdown_signals.h"

#include <pthread.h>

#include <ctime>

namespace ot::controld {

ShutdownSignals ShutdownSignals::block() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return ShutdownSignals(set);
}

bool ShutdownSignals::wait(int64_t ms) const {
  timespec timeout{};
  timeout.tv_sec = ms / 1000;
  timeout.tv_nsec = (ms % 1000) * 1'000'000;
  return sigtimedwait(&set_, nullptr, &timeout) > 0;
}

}  // namespace ot::controld
