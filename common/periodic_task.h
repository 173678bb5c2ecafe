// A function run over and over on a thread of its own, with a wait between rounds that wake()
// cuts short and stop() ends promptly: controld's background refreshers (job gauges, usage
// flushes, the domain certificate check, the DNS challenge sweep) are each one of these.
//
// Each round returns how long to wait before the next, so a task may wait less while it is
// waiting for something (ServerCertificates) or always the same interval. Rounds never overlap
// and run only on the task's thread. start() is a no-op while running or once stopped: a task
// runs once in its owner's life. stop() may be called from any thread, also from inside a round
// (it then does not wait for itself), and more than once. The owner must call stop() (or destroy
// the task) before anything the round uses goes away.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace ot {

struct PeriodicTaskOptions {
  std::chrono::milliseconds initialDelay{0};  // before the first round
  // One more round after stop() (a flush of what is still pending), unless stop() came before
  // start().
  bool finalRoundOnStop = false;
  // Told each wait the task is about to start (tests check the interval without sleeping it).
  std::function<void(std::chrono::milliseconds)> beforeWait;
};

class PeriodicTask {
 public:
  // One round; returns the wait before the next.
  using Round = std::function<std::chrono::milliseconds()>;

  explicit PeriodicTask(Round round, PeriodicTaskOptions options = {});
  ~PeriodicTask();  // stop()
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

  void start();
  void stop();
  // Ends the current wait now, so the next round starts at once (a round already running is not
  // repeated for each call: wakes during a round collapse into one early round after it).
  void wake();

  // Waits up to `wait` unless stop() is called; true when stopping. For a round that paces itself
  // (gaps between deletes) or checks for a stop; usable before start() too.
  bool waitStopping(std::chrono::milliseconds wait);
  [[nodiscard]] bool stopping() const;

 private:
  void run();
  // Waits for the wait, a wake or a stop; true when stopping.
  bool waitForNextRound(std::chrono::milliseconds wait);

  const Round round_;
  const PeriodicTaskOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool wakeRequested_ = false;
  std::thread thread_;
};

}  // namespace ot
