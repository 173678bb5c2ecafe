// otunnel's `status` reports to the relay (docs/pools-status.md, docs/protocol.md 4.5): per
// profile the links wanted and up, the wait until the next dial and the last error, so the API
// (GET /api/tunnel/{id}/status) can tell why a profile has no link, which the relay cannot see.
//
// The report covers the whole origin and goes out on every attached link: the links of one origin
// may end on different relay machines, each of which answers for its own bridges, and a report
// that rode on one link only would vanish with it. A one-second tick sends it when it changed
// (the wait's countdown aside) and otherwise once a minute (kReportRefreshMs); that refresh waits
// on each link for our answer to the relay's next ping and rides in its TLS record, so an idle
// relay reads it without a wakeup of its own (docs/capacity.md, "Idle"). A relay older than
// the `status` message ignores it (protocol.md 4.5: text after attach is ignored), so nothing is
// gated on the relay's version. Loop thread only.
#pragma once

#include <uv.h>

#include <cstddef>
#include <functional>
#include <string>

#include "client/dialer_status.h"
#include "client/text_timing.h"
#include "common/bridge_control.h"

namespace ot::client {

inline constexpr uint64_t kReportTickMs = 1'000;
// A safety net only: every change goes out at once, and the relay ages a stored report itself.
// Each report is a TLS record on every link; at 5 s, 50,000 bridges would cost relayd three times
// its heartbeat traffic (15 s), which the idle budget of docs/capacity.md cannot take.
inline constexpr uint64_t kReportRefreshMs = 60'000;

// One report line per profile: addresses summed, the soonest wait of an address not fully up,
// the profile's lookup error or else the newest error of an address that is not fully up.
[[nodiscard]] bridge::StatusReport statusReportOf(const DialerStatus& status);

// How far a wait may stray from the sent one's countdown before it counts as a new wait: the
// tick's own jitter, not a wait the relay would show wrongly for long.
inline constexpr uint64_t kWaitSlackMs = 1'000;

// Whether `next` must go out before the refresh, `last` having gone out elapsedMs ago: anything
// but a wait counting down as `last` said it would.
[[nodiscard]] bool reportChanged(const bridge::StatusReport& last, const bridge::StatusReport& next,
                                 uint64_t elapsedMs);

class StatusReporter {
 public:
  using Source = std::function<DialerStatus()>;
  // Sends the text on every attached link (a refresh: with each link's next pong); returns how
  // many took it.
  using Broadcast = std::function<size_t(const std::string& text, TextTiming timing)>;

  StatusReporter(uv_loop_t* loop, Source source, Broadcast broadcast);
  StatusReporter(const StatusReporter&) = delete;
  StatusReporter& operator=(const StatusReporter&) = delete;

  void start();
  void close();
  // A link attached: it may lead to a relay that holds no report of this origin (a new machine,
  // or one that dropped the report with the origin's last link there, as a reset does), so the
  // next tick sends the report again even when nothing in it changed.
  void linkAttached() { sent_ = false; }

 private:
  static void onTick(uv_timer_t* timer);
  void tick();

  uv_loop_t* loop_;
  Source source_;
  Broadcast broadcast_;
  uv_timer_t timer_{};
  bool closed_ = false;
  bool sent_ = false;
  bridge::StatusReport last_;
  uint64_t lastSentMs_ = 0;
};

}  // namespace ot::client
