// The database sessions of one SqlStore: a fixed number of slots, each lent to one caller at a
// time, holding a session that is open or closed. acquire() lends an open session when one is
// free (the one given back last, so the others go idle and the upkeep can close them), else a
// closed slot for the caller to open. The upkeep (SqlStore::maintainPool) borrows free slots one
// at a time with tryAcquire() to close what is dead, too old or idle beyond the minimum, and to
// open sessions up to it.
//
// Thread-safe. A lent slot's session and times belong to its borrower until release().
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace soci {
class session;
}

namespace ot::controld {

using PoolTime = std::chrono::steady_clock::time_point;

struct PoolSlotTimes {
  PoolTime openedAt{};   // when the session was opened (valid while open)
  PoolTime idleSince{};  // when it was last given back
};

class SessionPool {
 public:
  explicit SessionPool(std::size_t size);
  ~SessionPool();
  SessionPool(const SessionPool&) = delete;
  SessionPool& operator=(const SessionPool&) = delete;

  // Waits up to `wait` for a free slot. nullopt: none came free in time.
  [[nodiscard]] std::optional<std::size_t> acquire(std::chrono::milliseconds wait);
  // Lends slot `index` if it is free; never waits.
  [[nodiscard]] bool tryAcquire(std::size_t index);
  // Gives a lent slot back; `now` starts its idle time.
  void release(std::size_t index, PoolTime now);
  // Gives a slot back without touching its times: the upkeep looking at an idle session does
  // not make it any less idle.
  void releaseUntouched(std::size_t index);

  // Of a lent slot.
  [[nodiscard]] soci::session& session(std::size_t index);
  [[nodiscard]] PoolSlotTimes& times(std::size_t index);
  [[nodiscard]] std::size_t size() const { return slots_.size(); }

 private:
  struct Slot {
    std::unique_ptr<soci::session> session;
    PoolSlotTimes times;
    bool lent = false;
    bool open = false;  // as of its last release
  };

  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<Slot> slots_;
};

// What the upkeep does with an idle open session. Pure.
enum class IdleVerdict { kKeep, kRecycle, kCloseIdle };
struct PoolLimits {
  std::size_t minIdle = 8;
  std::chrono::milliseconds idleTimeout{60'000};
  std::chrono::milliseconds maxLifetime{30 * 60'000};
};
// kRecycle once the session is max_lifetime old; kCloseIdle once it sat idle for idle_timeout
// while more than min_idle sessions are open; kKeep otherwise.
[[nodiscard]] IdleVerdict idleVerdict(const PoolSlotTimes& times, PoolTime now,
                                      std::size_t openSessions, const PoolLimits& limits);

}  // namespace ot::controld
