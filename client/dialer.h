// Warm failover (issue 16, docs/pools-dialer.md): one origin's bridges over all its profiles.
// Each profile's host is resolved to every address (both families) and each address gets a
// BridgePool of the profile's links, all attaching under the one origin name with the profile's
// name and index. An address that cannot connect backs off on its own (its links' Backoff, up to
// 60 s) while the others carry the tunnel. First dials are staggered (dial_plan.h). The host is
// looked up again every few minutes, and every 30 s while an address has no link, so a changed
// DNS answer is followed: pools of addresses that went away are closed, new ones are dialed.
//
// A listening profile (NAME=listen:HOST:PORT, direct mode: docs/pools-direct.md) has no pools:
// its DirectListener accepts the relay's connections and runs the same bridges over them, under
// the same origin with the profile's name and index, and its links count with the others.
//
// Ownership: TunnelClient owns the Dialer; the Dialer owns the pools (a pool destroyed early
// finishes closing on its own: BridgePool's destructor). Loop thread only; never blocks.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/bridge_pool.h"
#include "client/dialer_status.h"
#include "client/direct_listener.h"
#include "client/origin_profile.h"

namespace ot::client {

class Dialer {
 public:
  using OnStatus = std::function<void(const PoolStatus&)>;

  // `base` is the pool configuration every address starts from (tunnel, token or credential,
  // origin, routes, certificate); the relay host, port, domain (SNI), profile and links come from
  // each profile.
  Dialer(uv_loop_t* loop, BridgeConfig base, std::vector<ProfileSpec> profiles, int defaultLinks,
         OnStatus onStatus);
  ~Dialer();
  Dialer(const Dialer&) = delete;
  Dialer& operator=(const Dialer&) = delete;

  void start();
  // Closes every pool and timer; `done` runs on the loop once all are closed.
  void stop(std::function<void()> done);
  void updateCertificate(const std::string& certificateChainPem, const std::string& privateKeyPem);

  // Everything summed up, for the status line and the fatal check.
  [[nodiscard]] PoolStatus status() const;
  // Per profile and address, for the status file.
  [[nodiscard]] DialerStatus detailedStatus() const;
  // A control message on every attached link of every profile (status_report.h); how many.
  size_t sendToAttached(const std::string& text, TextTiming timing = TextTiming::kNow);

 private:
  struct Profile;
  void resolve(Profile& profile);
  void onResolved(Profile& profile, int status, std::vector<std::string> addresses);
  void addPool(Profile& profile, const std::string& address);
  void startListener(Profile& profile);
  void armResolveTimer(Profile& profile, uint64_t delayMs);
  static void onResolveTimer(uv_timer_t* timer);
  static void onTimerClosed(uv_handle_t* handle);
  void onPoolStatus();
  void oneClosed();

  uv_loop_t* loop_;
  BridgeConfig base_;
  int defaultLinks_;
  OnStatus onStatus_;
  std::vector<std::unique_ptr<Profile>> profiles_;
  uint64_t nextDialAtMs_ = 0;  // uv_now time before which no new first dial starts
  bool stopping_ = false;
  size_t closing_ = 0;
  std::function<void()> done_;
};

}  // namespace ot::client
