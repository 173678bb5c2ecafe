// Direct mode on the relay's loop (docs/pools-direct.md "The relay's dialer"): for every origin
// whose record carries a direct address, this machine keeps that origin's direct_links bridges by
// dialing it. A dial resolves the name (libuv's getaddrinfo), refuses loopback, private,
// link-local, multicast and unspecified addresses unless DIRECT_ALLOW_PRIVATE, tries each address
// in turn, and hands the connected socket to the normal inbound path (Hooks::handOff: an
// InboundConnection without a PROXY header, the peer being the dialed address) tagged with the
// dial's id. From there the origin speaks first (TLS ClientHello, upgrade, attach) as any bridge;
// the tag reaches Relay::bridgeAttached, which reports it here (dialAttached), so only bridges that
// came over this relay's own dials count as the target's links. A dial that has not attached
// within kDialDeadlineMs counts as failed. Failed dials back off per target (DirectSchedule).
//
// A record that drops or changes a target (address, credential) closes the target's bridges
// (Hooks::closeBridge) and stops its dials; stop() (the drain) stops dialing. Loop thread only;
// never blocks, never throws.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/tcp_stream.h"
#include "relayd/direct_targets.h"
#include "relayd/relay_context.h"

namespace prometheus {
class Counter;
class Gauge;
}  // namespace prometheus

namespace ot::relayd {

// Why a dial failed: opentunnel_direct_dials_failed_total{reason}.
enum class DialFailure : uint8_t {
  kResolve,         // the name did not resolve
  kRefusedAddress,  // every address it resolved to is one DIRECT_ALLOW_PRIVATE would allow
  kConnect,         // no address took the TCP connection
  kTimeout,         // connected, but no attach within the deadline
  kClosed,          // connected, but closed before an attach (TLS, upgrade or attach refused)
  kCount,
};
[[nodiscard]] std::string_view dialFailureName(DialFailure failure);

class DirectDialer {
 public:
  static constexpr uint64_t kDialDeadlineMs = 12'000;
  static constexpr uint64_t kTickMs = 250;

  struct Hooks {
    // The connected socket (its handler still the dialer's) goes to the inbound path, which
    // reports back through dialAttached / dialEnded with `dialId`.
    std::function<void(TcpStream* stream, uint64_t dialId)> handOff;
    // A bridge of a target that changed or went: close it.
    std::function<void(uint64_t bridgeKey)> closeBridge;
  };
  struct Counters {
    uint64_t started = 0;
    std::array<uint64_t, static_cast<size_t>(DialFailure::kCount)> failed{};
    uint64_t attached = 0;
    uint64_t up = 0;  // bridges of this relay's dials attached now
    [[nodiscard]] uint64_t failedBy(DialFailure reason) const {
      return failed[static_cast<size_t>(reason)];
    }
  };

  DirectDialer(RelayContext& context, Hooks hooks);
  ~DirectDialer();
  DirectDialer(const DirectDialer&) = delete;
  DirectDialer& operator=(const DirectDialer&) = delete;

  // Starts (or, after the end of an operator's drain, resumes) dialing; nothing with DIRECT_MODE
  // off.
  void start();
  // The drain: no more dials; dials still connecting are closed. Idempotent.
  void stop();
  // Shutdown: stop() and close the timer; the loop must run (its close) before the dialer is
  // destroyed.
  void close();
  // A tunnel record (pushed or fetched); an older revision than the one seen changes nothing.
  void onRecord(const v1::TunnelRecord& record);
  // The tunnel was deleted: its targets go.
  void onTunnelGone(const std::string& tunnelId);

  // The dialed connection `dialId` is about to attach as bridge `bridgeKey` of `tunnelId` under
  // `origin`. False: not one of a target's links (its target changed or went, it ran past its
  // deadline, or it attached as another tunnel or origin than dialed): the caller refuses it.
  [[nodiscard]] bool dialAttached(uint64_t dialId, uint64_t bridgeKey, const std::string& tunnelId,
                                  const std::string& origin);
  // The dialed connection `dialId` closed (before or after attaching). Unknown ids are ignored.
  void dialEnded(uint64_t dialId);

  // Starts the dials due and fails those past their deadline; the timer runs it every kTickMs
  // (tests call it after moving a manual clock).
  void pump();

  [[nodiscard]] const Counters& counters() const { return counters_; }
  // The schedule of one target (nullptr: not a target), for tests and logs.
  [[nodiscard]] const DirectSchedule* schedule(const std::string& tunnelId,
                                               const std::string& origin) const;
  [[nodiscard]] size_t targetCount() const { return targets_.size(); }

 private:
  struct Target {
    DirectTarget target;
    DirectSchedule schedule;
    uint64_t epoch = 0;  // dials of an older epoch belong to a replaced target
  };
  enum class Phase : uint8_t { kResolving, kConnecting, kHandedOff, kAttached };
  struct Dial {
    std::string targetKey;
    uint64_t epoch = 0;
    Phase phase = Phase::kResolving;
    uint64_t deadlineMs = 0;
    uint16_t port = 0;
    std::vector<sockaddr_storage> addresses;
    size_t next = 0;
    TcpStream* stream = nullptr;  // while connecting
    uint64_t bridgeKey = 0;       // once attached
    std::string peer;             // the address that took the connection, for logs
  };
  class Connector;
  struct Lookup;

  static std::string keyOf(const std::string& tunnelId, const std::string& origin) {
    return tunnelId + '\n' + origin;
  }
  void setTargets(const std::string& tunnelId, std::vector<DirectTarget> targets);
  // Closes and forgets every dial of the target (its bridges closed through the hook).
  void dropDials(const std::string& targetKey, const char* why);
  void startDial(const std::string& key, Target& target);
  void resolved(uint64_t dialId, int status, const addrinfo* result);
  void connectNext(uint64_t dialId);
  void connected(uint64_t dialId, TcpStream* stream);
  void connectFailed(uint64_t dialId, int status);
  void fail(uint64_t dialId, DialFailure reason, const std::string& detail);
  Target* targetOf(const Dial& dial);
  static void onTick(uv_timer_t* timer);

  RelayContext& context_;
  Hooks hooks_;
  std::map<std::string, Target> targets_;               // keyOf(tunnel, origin)
  std::unordered_map<std::string, uint64_t> revision_;  // tunnel -> last record revision
  std::unordered_map<uint64_t, Dial> dials_;
  uint64_t nextDialId_ = 1;
  uint64_t nextEpoch_ = 1;
  Counters counters_;
  bool running_ = false;
  uv_timer_t timer_{};
  bool timerOpen_ = false;
  std::shared_ptr<bool> alive_;  // false once destroyed: late libuv callbacks check it
  prometheus::Counter* startedMetric_ = nullptr;
  std::array<prometheus::Counter*, static_cast<size_t>(DialFailure::kCount)> failedMetric_{};
  prometheus::Gauge* upMetric_ = nullptr;
};

}  // namespace ot::relayd
