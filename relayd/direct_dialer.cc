#include "relayd/direct_dialer.h"

#include <netdb.h>

#include <cstring>
#include <new>
#include <random>
#include <utility>

#include "common/address_resolver.h"
#include "common/log.h"
#include "common/log_throttle.h"
#include "relayd/relay_metrics.h"

namespace ot::relayd {

namespace {

const log::Logger kDirectDialerLog("relayd.direct");
constexpr uint64_t kRefusedLogEveryMs = 10'000;

uint64_t uniform(uint64_t n) {
  static thread_local std::mt19937_64 generator{std::random_device{}()};
  return n == 0 ? 0 : std::uniform_int_distribution<uint64_t>(0, n)(generator);
}

}  // namespace

std::string_view dialFailureName(DialFailure failure) {
  switch (failure) {
    case DialFailure::kResolve:
      return "resolve";
    case DialFailure::kRefusedAddress:
      return "refused_address";
    case DialFailure::kConnect:
      return "connect";
    case DialFailure::kTimeout:
      return "timeout";
    case DialFailure::kClosed:
    case DialFailure::kCount:
      break;
  }
  return "closed";
}

// The socket's handler while it connects: reports to the dialer, then (connected) steps aside for
// the inbound path, or (failed, closed) frees itself when its socket is gone.
class DirectDialer::Connector final : public TcpStream::Handler {
 public:
  Connector(DirectDialer* dialer, std::shared_ptr<bool> alive, uint64_t dialId)
      : dialer_(dialer), alive_(std::move(alive)), dialId_(dialId) {}

  void onConnected() override {
    TcpStream* stream = stream_;
    if (*alive_) {
      dialer_->connected(dialId_, stream);  // the inbound path took the handler, or closed it
    } else {
      stream->close(true);
      return;  // onClosed frees us
    }
    delete this;
  }
  void onConnectFailed(const ConnectFailure& failure) override {
    if (*alive_) {
      dialer_->connectFailed(dialId_, failure.status);  // closes the stream
    } else {
      stream_->close(true);
    }
    // onClosed frees us.
  }
  void onRead(std::span<const uint8_t>) override {}
  void onEof() override {}
  void onStreamError(int) override {}
  void onWritten(size_t) override {}
  void onClosed() override { delete this; }

  TcpStream* stream_ = nullptr;

 private:
  DirectDialer* dialer_;
  std::shared_ptr<bool> alive_;
  uint64_t dialId_;
};

struct DirectDialer::Lookup {
  uv_getaddrinfo_t req{};
  DirectDialer* dialer = nullptr;
  std::shared_ptr<bool> alive;
  uint64_t dialId = 0;
};

DirectDialer::DirectDialer(RelayContext& context, Hooks hooks)
    : context_(context), hooks_(std::move(hooks)), alive_(std::make_shared<bool>(true)) {
  metrics::Metrics& registry = context.metrics.registry;
  startedMetric_ = &registry.counter("opentunnel_direct_dials_started_total",
                                     "Direct mode: dials this relay started to origins.");
  for (size_t i = 0; i < failedMetric_.size(); ++i) {
    failedMetric_[i] = &registry.counter(
        "opentunnel_direct_dials_failed_total", "Direct mode: dials that failed, by reason.",
        {{"reason", std::string(dialFailureName(static_cast<DialFailure>(i)))}});
  }
  upMetric_ = &registry.gauge("opentunnel_direct_bridges_up",
                              "Direct mode: bridges attached over this relay's own dials.");
}

DirectDialer::~DirectDialer() {
  *alive_ = false;
  stop();
}

void DirectDialer::start() {
  if (!context_.config.directMode || running_) return;
  if (!timerOpen_) {
    if (uv_timer_init(context_.loop, &timer_) != 0) return;
    timer_.data = this;
    timerOpen_ = true;
  }
  running_ = true;
  uv_timer_start(&timer_, onTick, kTickMs, kTickMs);
  pump();
}

void DirectDialer::close() {
  stop();
  if (timerOpen_) {
    timerOpen_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
  }
}

void DirectDialer::stop() {
  running_ = false;
  if (timerOpen_) uv_timer_stop(&timer_);
  // Dials still connecting are closed; those handed off finish on the inbound path (the drain
  // refuses their bridge), and attached bridges are the drain's.
  for (auto it = dials_.begin(); it != dials_.end();) {
    if (it->second.phase == Phase::kConnecting && it->second.stream != nullptr) {
      it->second.stream->abandonConnect();
      it->second.stream->close(true);
    }
    if (it->second.phase == Phase::kResolving || it->second.phase == Phase::kConnecting) {
      it = dials_.erase(it);
    } else {
      ++it;
    }
  }
}

void DirectDialer::onTick(uv_timer_t* timer) {
  static_cast<DirectDialer*>(timer->data)->pump();
}

void DirectDialer::onRecord(const v1::TunnelRecord& record) {
  if (!context_.config.directMode) return;
  std::vector<DirectTarget> targets = directTargetsOf(record);
  auto it = revision_.find(record.tunnel_id());
  if (it == revision_.end()) {
    // Most tunnels never had a direct origin: nothing is kept for them.
    if (targets.empty()) return;
    revision_.emplace(record.tunnel_id(), record.revision());
  } else {
    if (record.revision() < it->second) return;
    it->second = record.revision();
  }
  setTargets(record.tunnel_id(), std::move(targets));
}

void DirectDialer::onTunnelGone(const std::string& tunnelId) {
  setTargets(tunnelId, {});
  revision_.erase(tunnelId);
}

void DirectDialer::setTargets(const std::string& tunnelId, std::vector<DirectTarget> targets) {
  const std::string prefix = tunnelId + '\n';
  // Targets of the tunnel that the new list no longer holds, or holds changed.
  for (auto it = targets_.lower_bound(prefix);
       it != targets_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    const DirectTarget& old = it->second.target;
    const DirectTarget* now = nullptr;
    for (const auto& target : targets)
      if (target.origin == old.origin) now = &target;
    if (now != nullptr && *now == old) {
      ++it;
      continue;
    }
    kDirectDialerLog.info(
        now == nullptr ? "direct target removed: its links close"
                       : "direct target changed: its links are dialed anew",
        {{"tunnel", old.tunnelId}, {"origin", old.origin}, {"address", old.address}});
    dropDials(it->first, now == nullptr ? "removed" : "changed");
    it = targets_.erase(it);
  }
  for (auto& target : targets) {
    const std::string key = keyOf(target.tunnelId, target.origin);
    if (targets_.count(key) != 0) continue;
    kDirectDialerLog.info("direct target", {{"tunnel", target.tunnelId},
                                            {"origin", target.origin},
                                            {"address", target.address},
                                            {"links", target.links}});
    const uint32_t links = target.links;
    targets_.emplace(key, Target{std::move(target), DirectSchedule(links, uniform), nextEpoch_++});
  }
  pump();
}

void DirectDialer::dropDials(const std::string& targetKey, const char* why) {
  for (auto it = dials_.begin(); it != dials_.end();) {
    Dial& dial = it->second;
    if (dial.targetKey != targetKey) {
      ++it;
      continue;
    }
    if (dial.phase == Phase::kConnecting && dial.stream != nullptr) {
      dial.stream->abandonConnect();
      dial.stream->close(true);
    }
    if (dial.phase == Phase::kAttached) {
      --counters_.up;
      upMetric_->Decrement();
      kDirectDialerLog.debug("direct bridge closed",
                             {{"why", why}, {"bridge_key", dial.bridgeKey}});
      const uint64_t bridgeKey = dial.bridgeKey;
      it = dials_.erase(it);
      if (hooks_.closeBridge) hooks_.closeBridge(bridgeKey);
      continue;
    }
    // Resolving: the lookup's answer finds no dial. Handed off: its attach finds none and is
    // closed by the caller of dialAttached.
    it = dials_.erase(it);
  }
}

DirectDialer::Target* DirectDialer::targetOf(const Dial& dial) {
  auto it = targets_.find(dial.targetKey);
  if (it == targets_.end() || it->second.epoch != dial.epoch) return nullptr;
  return &it->second;
}

const DirectSchedule* DirectDialer::schedule(const std::string& tunnelId,
                                             const std::string& origin) const {
  auto it = targets_.find(keyOf(tunnelId, origin));
  return it == targets_.end() ? nullptr : &it->second.schedule;
}

void DirectDialer::pump() {
  if (!running_) return;
  const uint64_t now = context_.nowMs();
  // Dials past their deadline fail (connecting ones are closed; handed-off ones are no longer
  // counted, and their late attach is refused by dialAttached).
  std::vector<uint64_t> late;
  for (const auto& [id, dial] : dials_) {
    if (dial.phase != Phase::kAttached && now >= dial.deadlineMs) late.push_back(id);
  }
  for (uint64_t id : late) fail(id, DialFailure::kTimeout, "no attach within the deadline");
  for (auto& [key, target] : targets_) {
    for (uint32_t due = target.schedule.dialsDue(now); due > 0 && running_; --due)
      startDial(key, target);
  }
}

void DirectDialer::startDial(const std::string& key, Target& target) {
  const std::optional<DirectAddress> address = parseDirectAddress(target.target.address);
  if (!address) return;  // directTargetsOf keeps only addresses that parse
  const uint64_t id = nextDialId_++;
  Dial dial;
  dial.targetKey = key;
  dial.epoch = target.epoch;
  dial.deadlineMs = context_.nowMs() + kDialDeadlineMs;
  dial.port = address->port;
  dials_.emplace(id, std::move(dial));
  target.schedule.dialStarted();
  ++counters_.started;
  startedMetric_->Increment();
  auto* lookup = new (std::nothrow) Lookup;
  if (lookup == nullptr) {
    fail(id, DialFailure::kResolve, "out of memory");
    return;
  }
  lookup->req.data = lookup;
  lookup->dialer = this;
  lookup->alive = alive_;
  lookup->dialId = id;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string port = std::to_string(address->port);
  const int rc = uv_getaddrinfo(
      context_.loop, &lookup->req,
      [](uv_getaddrinfo_t* req, int status, addrinfo* result) {
        auto* done = static_cast<Lookup*>(req->data);
        if (*done->alive) done->dialer->resolved(done->dialId, status, result);
        uv_freeaddrinfo(result);
        delete done;
      },
      address->host.c_str(), port.c_str(), &hints);
  if (rc != 0) {
    delete lookup;
    fail(id, DialFailure::kResolve, uv_strerror(rc));
  }
}

void DirectDialer::resolved(uint64_t dialId, int status, const addrinfo* result) {
  auto it = dials_.find(dialId);
  if (it == dials_.end() || it->second.phase != Phase::kResolving) return;
  if (status != 0) {
    fail(dialId, DialFailure::kResolve, uv_strerror(status));
    return;
  }
  Dial& dial = it->second;
  std::string refusedWhy;
  std::string refusedAddress;
  for (const addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addr == nullptr || ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    sockaddr_storage address{};
    std::memcpy(&address, ai->ai_addr, ai->ai_addrlen);
    if (!context_.config.directAllowPrivate) {
      if (const auto reason = refusedAddressReason(address)) {
        refusedWhy = std::string(*reason);
        refusedAddress = formatAddress(address);
        continue;
      }
    }
    dial.addresses.push_back(address);
  }
  if (dial.addresses.empty()) {
    if (!refusedWhy.empty()) {
      fail(dialId, DialFailure::kRefusedAddress,
           refusedWhy + " address " + refusedAddress + " (DIRECT_ALLOW_PRIVATE is off)");
    } else {
      fail(dialId, DialFailure::kResolve, "no address");
    }
    return;
  }
  dial.phase = Phase::kConnecting;
  connectNext(dialId);
}

void DirectDialer::connectNext(uint64_t dialId) {
  auto it = dials_.find(dialId);
  if (it == dials_.end()) return;
  Dial& dial = it->second;
  if (dial.next >= dial.addresses.size()) {
    fail(dialId, DialFailure::kConnect, "no address took the connection");
    return;
  }
  const sockaddr_storage& address = dial.addresses[dial.next++];
  auto* connector = new (std::nothrow) Connector(this, alive_, dialId);
  if (connector == nullptr) {
    fail(dialId, DialFailure::kConnect, "out of memory");
    return;
  }
  TcpStream* stream = TcpStream::open(context_, connector);
  if (stream == nullptr) {
    delete connector;
    fail(dialId, DialFailure::kConnect, "no socket");
    return;
  }
  connector->stream_ = stream;
  dial.stream = stream;
  dial.peer = formatAddress(address);
  // An address literal: connect() resolves it without a lookup.
  std::string host = PeerEndpoint::fromSocket(address).address;
  stream->connect(host, dial.port);
}

void DirectDialer::connectFailed(uint64_t dialId, int status) {
  auto it = dials_.find(dialId);
  if (it == dials_.end()) return;
  Dial& dial = it->second;
  if (dial.stream != nullptr) {
    dial.stream->close(true);
    dial.stream = nullptr;
  }
  kDirectDialerLog.debug("direct dial: connect failed",
                         {{"address", dial.peer}, {"error", uv_strerror(status)}});
  if (dial.next < dial.addresses.size()) {
    connectNext(dialId);
    return;
  }
  fail(dialId, DialFailure::kConnect, dial.peer + ": " + uv_strerror(status));
}

void DirectDialer::connected(uint64_t dialId, TcpStream* stream) {
  auto it = dials_.find(dialId);
  if (it == dials_.end() || !running_) {
    stream->setHandler(nullptr);  // the Connector is freed by its caller
    stream->close(true);
    return;
  }
  Dial& dial = it->second;
  dial.stream = nullptr;
  dial.phase = Phase::kHandedOff;
  const sockaddr_storage& address = dial.addresses[dial.next - 1];
  stream->setPeer(PeerEndpoint::fromSocket(address));
  if (!hooks_.handOff) {
    stream->setHandler(nullptr);
    stream->close(true);
    fail(dialId, DialFailure::kClosed, "no inbound path");
    return;
  }
  hooks_.handOff(stream, dialId);  // may report dialEnded at once
}

bool DirectDialer::dialAttached(uint64_t dialId, uint64_t bridgeKey, const std::string& tunnelId,
                                const std::string& origin) {
  auto it = dials_.find(dialId);
  if (it == dials_.end() || it->second.phase != Phase::kHandedOff) return false;
  Target* target = targetOf(it->second);
  if (target == nullptr || target->target.tunnelId != tunnelId || target->target.origin != origin) {
    if (target != nullptr) {
      kDirectDialerLog.warn("direct dial answered as another tunnel or origin: refused",
                            {{"tunnel", target->target.tunnelId},
                             {"origin", target->target.origin},
                             {"address", target->target.address},
                             {"attached_tunnel", tunnelId},
                             {"attached_origin", origin}});
    }
    fail(dialId, DialFailure::kClosed, "attached as another tunnel or origin");
    return false;
  }
  it->second.phase = Phase::kAttached;
  it->second.bridgeKey = bridgeKey;
  target->schedule.dialAttached();
  ++counters_.attached;
  ++counters_.up;
  upMetric_->Increment();
  kDirectDialerLog.info("direct bridge attached", {{"tunnel", target->target.tunnelId},
                                                   {"origin", target->target.origin},
                                                   {"address", it->second.peer}});
  return true;
}

void DirectDialer::dialEnded(uint64_t dialId) {
  auto it = dials_.find(dialId);
  if (it == dials_.end()) return;
  if (it->second.phase == Phase::kAttached) {
    Target* target = targetOf(it->second);
    --counters_.up;
    upMetric_->Decrement();
    if (target != nullptr) {
      kDirectDialerLog.info("direct bridge ended: redialing", {{"tunnel", target->target.tunnelId},
                                                               {"origin", target->target.origin},
                                                               {"address", it->second.peer}});
      target->schedule.bridgeEnded(context_.nowMs());
    }
    dials_.erase(it);
    return;
  }
  fail(dialId, DialFailure::kClosed, "closed before attaching");
}

void DirectDialer::fail(uint64_t dialId, DialFailure reason, const std::string& detail) {
  auto it = dials_.find(dialId);
  if (it == dials_.end()) return;
  Dial& dial = it->second;
  if (dial.phase == Phase::kConnecting && dial.stream != nullptr) {
    dial.stream->abandonConnect();
    dial.stream->close(true);
    dial.stream = nullptr;
  }
  ++counters_.failed[static_cast<size_t>(reason)];
  failedMetric_[static_cast<size_t>(reason)]->Increment();
  if (Target* target = targetOf(dial)) {
    const uint64_t waitMs = target->schedule.dialFailed(context_.nowMs());
    static LogThrottle throttle(kRefusedLogEveryMs);
    if (uint64_t suppressed = 0; throttle.allow(context_.nowMs(), suppressed)) {
      kDirectDialerLog.warn("direct dial failed", {{"tunnel", target->target.tunnelId},
                                                   {"origin", target->target.origin},
                                                   {"address", target->target.address},
                                                   {"reason", dialFailureName(reason)},
                                                   {"detail", detail},
                                                   {"retry_in_ms", waitMs},
                                                   {"suppressed", suppressed}});
    }
  }
  dials_.erase(it);
}

}  // namespace ot::relayd
