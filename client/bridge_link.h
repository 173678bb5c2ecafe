// One of the pool's `links`: the reconnect loop of docs/protocol.md section 10 around
// BridgeClient. The first attempt starts at once; after an attached bridge ends the next waits
// 125-250 ms; after a "busy" attempt (the relay restarting or shedding) 0.25-3 s; after each
// "broken" one the wait doubles with equal jitter up to 60 s (Backoff, client/backoff.h);
// a `drain` starts a replacement after the short delay while the draining bridge finishes. A
// fatal answer (400/404/405/426, bad_token, invalid_route, too many routes) stops the loop.
//
// One uv_timer_t serves every timeout of the link: the retry wait, and its sessions' deadlines
// (attach, heartbeat, close handshake, visitors' connects), re-armed to the earliest. Finished
// sessions are deleted from that timer's callback, never on their own stacks.
//
// Ownership: BridgePool owns links. stop() closes everything; onLinkStopped() reports that the
// last handle is closed, after which the pool may delete the link (not on that call's stack).
// Loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/backoff.h"
#include "client/bridge_client.h"
#include "client/bridge_settings.h"
#include "common/log.h"

namespace ot::client {

inline constexpr uint64_t kLinkBackoffCapMs = 60'000;

class LinkHost {
 public:
  virtual ~LinkHost() = default;
  virtual void onLinkChanged() = 0;
  virtual void onLinkStopped() = 0;
};

struct LinkStatus {
  bool attached = false;
  bool fatal = false;
  int connections = 0;
  std::string lastError;
  uint64_t lastErrorAtMs = 0;
  uint64_t retryAtMs = 0;  // uv_now() time of the next retry; 0 when none waits (or first dial)
  uint32_t attempts = 0;   // attempts started so far
};

class BridgeLink final : private SessionHost {
 public:
  BridgeLink(uv_loop_t* loop, const BridgeSettings& settings, LinkHost& host, int index);
  ~BridgeLink() override;
  BridgeLink(const BridgeLink&) = delete;
  BridgeLink& operator=(const BridgeLink&) = delete;

  // The first attempt, at once or after `delayMs` (the pool staggers its first dials).
  void start(uint64_t delayMs = 0);
  // Closes every session (1001) and the timer; onLinkStopped follows once all are closed.
  void stop();

  [[nodiscard]] LinkStatus status() const;
  // A control message on the link's attached bridge; false when none is attached.
  bool sendText(const std::string& text, TextTiming timing = TextTiming::kNow);
  [[nodiscard]] bool stopped() const { return state_ == State::kStopped; }

 private:
  enum class State : uint8_t { kIdle, kActive, kWaiting, kFatal, kStopping, kStopped };

  // SessionHost
  void onSessionAttached(BridgeClient& session) override;
  void onSessionDrain(BridgeClient& session) override;
  void onSessionEnded(BridgeClient& session, const SessionEnd& end) override;
  void onSessionFinished(BridgeClient& session) override;
  void onSessionChanged() override;
  void rescheduleTimer() override;

  static void onTimerFired(uv_timer_t* timer);
  static void onTimerClosed(uv_handle_t* handle);
  void onTimer();
  void attempt();
  void scheduleRetry(const RetryHint& hint, bool afterAttached);
  void maybeStopped();
  void setError(std::string error);

  uv_loop_t* loop_;
  const BridgeSettings& settings_;
  LinkHost& host_;
  int index_;
  log::Logger log_{"client.link"};
  State state_ = State::kIdle;
  uv_timer_t timer_{};
  // Up to 60 s: one address of several may be unreachable for long while the others carry the
  // tunnel (warm failover, docs/pools-dialer.md); the busy handling is Backoff's own.
  Backoff backoff_{uniformRandom, 250, kLinkBackoffCapMs};
  std::vector<std::unique_ptr<BridgeClient>> sessions_;  // current, draining, closing
  std::vector<std::unique_ptr<BridgeClient>> finished_;  // deleted on the next timer visit
  BridgeClient* current_ = nullptr;                      // the attempt or attached bridge
  uint64_t retryAtMs_ = 0;
  std::string lastError_;
  uint64_t lastErrorAtMs_ = 0;
  uint32_t attempts_ = 0;
};

}  // namespace ot::client
