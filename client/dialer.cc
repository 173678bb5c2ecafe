#include "client/dialer.h"

#include <algorithm>
#include <map>
#include <utility>

#include "client/address_list.h"
#include "client/backoff.h"
#include "client/dial_plan.h"
#include "common/log.h"

namespace ot::client {

struct Dialer::Profile {
  Dialer* owner = nullptr;
  ProfileSpec spec;
  uint32_t index = 0;
  int links = 0;
  uv_timer_t timer{};
  AddressListQuery* query = nullptr;
  std::vector<std::string> order;  // the addresses as last resolved
  std::map<std::string, std::unique_ptr<BridgePool>> pools;
  std::unique_ptr<DirectListener> listener;  // a listening profile (direct mode)
  std::string resolveError;
  uint64_t resolvedAtMs = 0;
  uint64_t resolveAtMs = 0;
  bool timerClosed = false;  // its close callback ran
};

namespace {
log::Logger& dialerLog() {
  static log::Logger logger{"client.dialer"};
  return logger;
}

// One line of a profile's status: a dialed address's pool, or a listening profile (which never
// waits to redial: the relay dials).
AddressStatus addressStatusOf(std::string address, const PoolStatus& s) {
  AddressStatus a;
  a.address = std::move(address);
  a.wanted = s.links;
  a.attached = s.attached;
  a.streams = s.openConnections;
  a.nextTryMs = s.nextRetryMs;
  a.lastError = s.lastError;
  return a;
}
}  // namespace

Dialer::Dialer(uv_loop_t* loop, BridgeConfig base, std::vector<ProfileSpec> profiles,
               int defaultLinks, OnStatus onStatus)
    : loop_(loop),
      base_(std::move(base)),
      defaultLinks_(defaultLinks),
      onStatus_(std::move(onStatus)) {
  for (size_t i = 0; i < profiles.size(); ++i) {
    auto profile = std::make_unique<Profile>();
    profile->owner = this;
    profile->spec = std::move(profiles[i]);
    profile->index = static_cast<uint32_t>(i);
    // A listening profile wants what the owner set on the relay side (default 4), not --links.
    profile->links = profile->spec.listen
                         ? (profile->spec.links > 0 ? profile->spec.links : kDefaultLinksPerProfile)
                         : profileLinks(profile->spec, defaultLinks_);
    (void)uv_timer_init(loop_, &profile->timer);
    profile->timer.data = profile.get();
    profiles_.push_back(std::move(profile));
  }
}

Dialer::~Dialer() {
  // Pools close on their own (BridgePool's destructor); a pending lookup must not call back; a
  // timer not yet closed takes its profile with it when it is (destroyed without a finished
  // stop: the loop may still hold the handle).
  for (auto& profile : profiles_) {
    if (profile->query != nullptr) profile->query->cancel();
    profile->query = nullptr;
    profile->pools.clear();
    profile->listener.reset();  // closes on its own
    if (profile->timerClosed) continue;
    Profile* orphan = profile.release();
    const bool closing = uv_is_closing(reinterpret_cast<uv_handle_t*>(&orphan->timer)) != 0;
    orphan->owner = nullptr;
    if (!closing) uv_close(reinterpret_cast<uv_handle_t*>(&orphan->timer), &onTimerClosed);
  }
}

void Dialer::onTimerClosed(uv_handle_t* handle) {
  auto* profile = static_cast<Profile*>(handle->data);
  profile->timerClosed = true;
  if (profile->owner == nullptr) {
    delete profile;
    return;
  }
  profile->owner->oneClosed();
}

void Dialer::start() {
  for (auto& profile : profiles_) {
    if (profile->spec.listen) {
      startListener(*profile);
    } else {
      resolve(*profile);
    }
  }
}

void Dialer::startListener(Profile& profile) {
  BridgeConfig config = base_;
  config.relayHost = profile.spec.host;  // for logs: the bridge never dials
  config.relayPort = profile.spec.port;
  if (!profile.spec.sni.empty()) config.domain = profile.spec.sni;
  config.profile = profile.spec.name;
  config.profileIndex = profile.index;
  config.links = profile.links;
  DirectListenerOptions options;
  options.host = profile.spec.host;
  options.port = profile.spec.port;
  profile.listener = std::make_unique<DirectListener>(loop_, std::move(config), std::move(options),
                                                      [this] { onPoolStatus(); });
  profile.listener->start();
}

void Dialer::resolve(Profile& profile) {
  if (stopping_ || profile.query != nullptr) return;
  Profile* target = &profile;
  profile.query = AddressListQuery::resolve(
      loop_, profile.spec.host, [this, target](int status, std::vector<std::string> addresses) {
        target->query = nullptr;
        onResolved(*target, status, std::move(addresses));
      });
}

void Dialer::onResolved(Profile& profile, int status, std::vector<std::string> addresses) {
  if (stopping_) return;
  profile.resolvedAtMs = uv_now(loop_);
  if (status != 0) {
    // Keep dialing what the last answer gave; a failed lookup is not a changed answer.
    profile.resolveError = "cannot resolve " + profile.spec.host + ": " + uv_strerror(status);
    dialerLog().warn("relay name lookup failed",
                     {{"profile", profile.spec.name}, {"error", profile.resolveError}});
    armResolveTimer(profile, nextResolveInMs(true));
    onPoolStatus();
    return;
  }
  profile.resolveError.clear();
  for (auto it = profile.pools.begin(); it != profile.pools.end();) {
    if (std::find(addresses.begin(), addresses.end(), it->first) == addresses.end()) {
      dialerLog().info("relay address gone from DNS; closing its links",
                       {{"profile", profile.spec.name}, {"address", it->first}});
      it = profile.pools.erase(it);  // the pool closes its bridges on its own
    } else {
      ++it;
    }
  }
  for (const std::string& address : addresses) {
    if (!profile.pools.contains(address)) addPool(profile, address);
  }
  profile.order = std::move(addresses);
  armResolveTimer(profile, kResolveWhileFailingMs);
  onPoolStatus();
}

void Dialer::addPool(Profile& profile, const std::string& address) {
  BridgeConfig config = base_;
  config.relayHost = address;
  config.relayPort = profile.spec.port;
  if (!profile.spec.sni.empty()) config.domain = profile.spec.sni;
  config.profile = profile.spec.name;
  config.profileIndex = profile.index;
  config.links = profile.links;
  const uint64_t now = uv_now(loop_);
  const uint64_t first = nextDialAtMs_ > now ? nextDialAtMs_ - now : 0;
  config.startDelaysMs = staggerDelaysMs(static_cast<size_t>(profile.links), first, uniformRandom);
  nextDialAtMs_ = now + config.startDelaysMs.back() + kStaggerMinMs;
  auto pool = std::make_unique<BridgePool>(loop_, std::move(config),
                                           [this](const PoolStatus&) { onPoolStatus(); });
  BridgePool* started = pool.get();
  profile.pools.emplace(address, std::move(pool));
  started->start();
}

void Dialer::armResolveTimer(Profile& profile, uint64_t delayMs) {
  if (stopping_) return;
  profile.resolveAtMs = uv_now(loop_) + delayMs;
  (void)uv_timer_start(&profile.timer, &Dialer::onResolveTimer, delayMs, 0);
}

// Every 30 s: look the name up again when one of its addresses has no link attached, or when
// the last lookup is a few minutes old.
void Dialer::onResolveTimer(uv_timer_t* timer) {
  auto* profile = static_cast<Profile*>(timer->data);
  Dialer* self = profile->owner;
  bool someDown = !profile->resolveError.empty() || profile->pools.empty();
  for (const auto& [address, pool] : profile->pools) {
    const PoolStatus status = pool->status();
    if (status.attached == 0 && !status.lastError.empty()) someDown = true;
  }
  const uint64_t now = uv_now(self->loop_);
  if (now - profile->resolvedAtMs >= nextResolveInMs(someDown)) {
    self->resolve(*profile);
  } else {
    self->armResolveTimer(*profile, kResolveWhileFailingMs);
  }
}

void Dialer::onPoolStatus() {
  if (stopping_ || !onStatus_) return;
  onStatus_(status());
}

void Dialer::stop(std::function<void()> done) {
  if (stopping_) {
    if (done) done_ = std::move(done);
    return;
  }
  stopping_ = true;
  done_ = std::move(done);
  closing_ = 1;  // released below, once everything is asked to close
  for (auto& profile : profiles_) {
    if (profile->query != nullptr) {
      profile->query->cancel();
      profile->query = nullptr;
    }
    ++closing_;
    uv_close(reinterpret_cast<uv_handle_t*>(&profile->timer), &onTimerClosed);
    if (profile->listener) {
      ++closing_;
      profile->listener->stop([this] { oneClosed(); });
    }
    for (auto& [address, pool] : profile->pools) {
      ++closing_;
      pool->stop([this] { oneClosed(); });
    }
  }
  oneClosed();
}

void Dialer::oneClosed() {
  if (closing_ == 0 || --closing_ != 0) return;
  std::function<void()> done = std::move(done_);
  if (done) done();
}

void Dialer::updateCertificate(const std::string& certificateChainPem,
                               const std::string& privateKeyPem) {
  base_.certificateChainPem = certificateChainPem;
  base_.privateKeyPem = privateKeyPem;
  for (auto& profile : profiles_) {
    for (auto& [address, pool] : profile->pools)
      pool->updateCertificate(certificateChainPem, privateKeyPem);
    if (profile->listener) profile->listener->updateCertificate(certificateChainPem, privateKeyPem);
  }
}

PoolStatus Dialer::status() const {
  PoolStatus out;
  uint64_t soonest = UINT64_MAX;
  const uint64_t now = uv_now(loop_);
  for (const auto& profile : profiles_) {
    if (profile->listener) {
      const PoolStatus s = profile->listener->status();
      out.links += s.links;
      out.attached += s.attached;
      out.openConnections += s.openConnections;
      out.fatal = out.fatal || s.fatal;
      if (!s.lastError.empty() && (out.lastError.empty() || s.fatal)) out.lastError = s.lastError;
      continue;
    }
    if (profile->pools.empty()) {
      out.links += profile->links;
      if (!profile->resolveError.empty()) out.lastError = profile->resolveError;
      if (profile->resolveAtMs > now) soonest = std::min(soonest, profile->resolveAtMs - now);
      continue;
    }
    for (const auto& [address, pool] : profile->pools) {
      const PoolStatus s = pool->status();
      out.links += s.links;
      out.attached += s.attached;
      out.openConnections += s.openConnections;
      out.fatal = out.fatal || s.fatal;
      if (!s.lastError.empty() && (out.lastError.empty() || s.fatal)) out.lastError = s.lastError;
      if (s.nextRetryMs != 0) soonest = std::min(soonest, s.nextRetryMs);
    }
  }
  if (out.attached < out.links && soonest != UINT64_MAX) out.nextRetryMs = soonest;
  return out;
}

size_t Dialer::sendToAttached(const std::string& text, TextTiming timing) {
  if (stopping_) return 0;
  size_t sent = 0;
  for (auto& profile : profiles_) {
    for (auto& [address, pool] : profile->pools) sent += pool->sendToAttached(text, timing);
    if (profile->listener) sent += profile->listener->sendToAttached(text, timing);
  }
  return sent;
}

DialerStatus Dialer::detailedStatus() const {
  DialerStatus out;
  out.tunnelId = base_.tunnelId;
  out.origin = base_.origin;
  out.credential = !base_.credential.empty();
  for (const auto& profile : profiles_) {
    ProfileStatus p;
    p.name = profile->spec.name;
    p.index = profile->index;
    p.host = profile->spec.host;
    p.port = profile->spec.port;
    p.sni = profile->spec.sni.empty() ? base_.domain : profile->spec.sni;
    p.resolveError = profile->resolveError;
    if (profile->listener) {
      // One line: where the relay connects, the links it holds and why none may be there.
      const PoolStatus s = profile->listener->status();
      p.listen = true;
      p.refused = profile->listener->refused();
      p.addresses.push_back(addressStatusOf("listen " + profile->spec.host, s));
      out.profiles.push_back(std::move(p));
      continue;
    }
    for (const std::string& address : profile->order) {
      const auto it = profile->pools.find(address);
      if (it == profile->pools.end()) continue;
      const PoolStatus s = it->second->status();
      p.addresses.push_back(addressStatusOf(address, s));
    }
    out.profiles.push_back(std::move(p));
  }
  return out;
}

}  // namespace ot::client
