#include "relayd/mesh_forwarder.h"

#include <netinet/in.h>
#include <uv.h>

#include <charconv>
#include <cstring>
#include <utility>

#include "common/clock.h"
#include "common/forward_header.h"
#include "common/log.h"
#include "relayd/forward_splice.h"
#include "relayd/timer_wheel.h"
#include "relayd/visitor_analytics.h"

namespace ot::relayd {

namespace {
const log::Logger kMeshForwarderLog("relayd.forward");

uint16_t portOf(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}
}  // namespace

std::optional<sockaddr_storage> parseSocketAddress(std::string_view address,
                                                   std::optional<uint16_t> port) {
  const std::string host(hostOfAddress(address));
  if (host.empty()) return std::nullopt;
  const std::string_view portText = address.substr(address.rfind(':') + 1);
  uint16_t parsedPort = 0;
  const auto [end, error] =
      std::from_chars(portText.data(), portText.data() + portText.size(), parsedPort);
  if (error != std::errc{} || end != portText.data() + portText.size()) return std::nullopt;
  sockaddr_storage storage{};
  const int usePort = port ? *port : parsedPort;
  if (uv_ip4_addr(host.c_str(), usePort, reinterpret_cast<sockaddr_in*>(&storage)) == 0)
    return storage;
  if (uv_ip6_addr(host.c_str(), usePort, reinterpret_cast<sockaddr_in6*>(&storage)) == 0)
    return storage;
  return std::nullopt;
}

// One visitor's forward, across its tries. Handler of the holder's socket while it waits for
// the answer, and of the visitor's (which is not read meanwhile) to hear that it went away.
class MeshForwarder::Attempt final : public TcpStream::Handler, public Deferrable {
 public:
  Attempt(MeshForwarder& owner, TcpStream* visitor, std::string tunnelId, std::string route,
          std::vector<uint8_t> hello, SourceSlot slot, VisitorOutcome outcome,
          std::string_view visitorKey)
      : owner_(&owner),
        visitor_(visitor),
        tunnelId_(std::move(tunnelId)),
        route_(std::move(route)),
        visitorKey_(visitorKey),
        hello_(std::move(hello)),
        sourceSlot_(std::move(slot)),
        outcome_(outcome),
        visitorSide_(*this),
        timer_(&Attempt::onTimer, this) {
    visitor_->setHandler(&visitorSide_);
  }

  // No holder yet: wait for the table (MeshForwarder::tableChanged) or the timer.
  void waitForHolder() {
    waiting_ = true;
    ++owner_->waiting_;
    RelayContext& context = owner_->context_;
    context.wheel.schedule(timer_, context.nowMs(), owner_->options_.missWaitMs);
  }
  [[nodiscard]] bool waiting() const { return waiting_; }
  [[nodiscard]] const std::string& tunnelId() const { return tunnelId_; }
  [[nodiscard]] const std::string& route() const { return route_; }
  [[nodiscard]] const std::string& visitorKey() const { return visitorKey_; }

  // The table names a holder now.
  void holderAppeared(const MeshForwardTarget& target) {
    stopWaiting();
    timer_.cancel();
    owner_->context_.metrics.meshLookupHit.Increment();
    kMeshForwarderLog.debug("visitor waited for the table", {{"tunnel", tunnelId_}});
    tryHolder(target);
  }

  void tryHolder(const MeshForwardTarget& target) {
    ++tries_;
    machine_ = target.machineId;
    origin_ = target.origin;
    RelayContext& context = owner_->context_;
    const auto address = parseSocketAddress(target.internalAddress);
    holder_ = address ? TcpStream::open(context, this) : nullptr;
    if (holder_ == nullptr) {
      failed(ForwardFailure::kConnect, "bad internal address or no socket");
      return;
    }
    context.wheel.schedule(timer_, context.nowMs(), owner_->options_.answerTimeoutMs);
    if (const int rc = holder_->bindSource(*owner_->source_); rc != 0) {
      failed(ForwardFailure::kConnect, uv_strerror(rc));
      return;
    }
    holder_->setNoDelay(true);
    holder_->connect(std::string(hostOfAddress(target.internalAddress)), portOf(*address));
  }

  // The forwarder is going away: reset everything this try holds.
  void abandon() {
    owner_ = nullptr;
    timer_.cancel();
    dropHolder();
    if (visitor_ != nullptr) {
      visitor_->setHandler(nullptr);
      visitor_->close(true);
      visitor_ = nullptr;
    }
    delete this;
  }

  // TcpStream::Handler, for the holder's socket.
  void onConnected() override {
    mesh::ForwardHeader header;
    header.envelope.sender = owner_->options_.machineId;
    header.envelope.receiver = machine_;
    header.envelope.timeMs = unixNowMs();
    const std::optional<mesh::Nonce> nonce = mesh::randomNonce();
    header.tunnelId = tunnelId_;
    header.route = route_;
    header.visitorAddress = visitor_->peer().toString();
    header.origin = origin_;
    std::optional<std::string> line;
    if (nonce) {
      header.envelope.nonce = *nonce;
      line = mesh::buildForwardHeader(owner_->options_.secret, header);
    }
    if (!line) {
      failed(ForwardFailure::kIo, "cannot build the forward header");
      return;
    }
    std::vector<uint8_t> bytes(line->begin(), line->end());
    bytes.insert(bytes.end(), hello_.begin(), hello_.end());
    holder_->write(std::move(bytes));
    (void)holder_->startReading();
  }
  void onConnectFailed(const ConnectFailure& failure) override {
    failed(ForwardFailure::kConnect, uv_strerror(failure.status));
  }
  void onRead(std::span<const uint8_t> bytes) override {
    answer_.insert(answer_.end(), bytes.begin(), bytes.end());
    if (answer_.size() < 2) return;
    if (answer_[0] == '1' && answer_[1] == '\n') {
      succeed();
    } else if (answer_[0] == '0' && answer_[1] == '\n') {
      failed(ForwardFailure::kRefused, "no bridge there");
    } else {
      failed(ForwardFailure::kIo, "unexpected answer");
    }
  }
  void onEof() override { failed(ForwardFailure::kIo, "closed before answering"); }
  void onStreamError(int status) override { failed(ForwardFailure::kIo, uv_strerror(status)); }
  void onWritten(size_t) override {}
  // Closed by someone else (shutdown resets every stream): the socket is gone; a try it was.
  void onClosed() override {
    holder_ = nullptr;
    failed(ForwardFailure::kIo, "closed");
  }

  // The visitor's socket closed under us (shutdown resets every stream).
  void visitorClosed() {
    visitor_ = nullptr;
    finish();
  }

 private:
  struct VisitorSide final : TcpStream::Handler {
    explicit VisitorSide(Attempt& attemptIn) : attempt(attemptIn) {}
    void onRead(std::span<const uint8_t>) override {}
    void onEof() override {}
    void onStreamError(int) override {}
    void onWritten(size_t) override {}
    void onClosed() override { attempt.visitorClosed(); }
    Attempt& attempt;
  };

  static void onTimer(TimerEntry*, void* self) {
    auto* attempt = static_cast<Attempt*>(self);
    if (attempt->waiting_) {
      attempt->stopWaiting();
      attempt->owner_->context_.metrics.meshLookupMiss.Increment();
      attempt->giveUp();
      return;
    }
    attempt->failed(ForwardFailure::kTimeout, "no answer in time");
  }

  void stopWaiting() {
    if (!waiting_) return;
    waiting_ = false;
    if (owner_ != nullptr) --owner_->waiting_;
  }

  // No one (else) holds the route: the visitor is rejected as it would have been without the mesh.
  void giveUp() {
    if (visitor_ != nullptr) {
      TcpStream* visitor = std::exchange(visitor_, nullptr);
      visitor->setHandler(nullptr);
      sourceSlot_.release();
      owner_->giveUp_(visitor, outcome_, tunnelId_);
    }
    finish();
  }

  void succeed() {
    timer_.cancel();
    RelayContext& context = owner_->context_;
    context.metrics.visitor(VisitorOutcome::kForwardedOut);
    emitVisitorOutcome(context, tunnelId_, VisitorOutcome::kForwardedOut);
    const std::span<const uint8_t> rest = std::span(answer_).subspan(2);
    ForwardSplice* splice = ForwardSplice::start(context, visitor_, holder_, rest);
    splice->holdSourceSlot(std::move(sourceSlot_));
    splice->countsOpenConnection();
    kMeshForwarderLog.debug("visitor forwarded", {{"tunnel", tunnelId_}, {"machine", machine_}});
    visitor_ = nullptr;
    holder_ = nullptr;
    finish();
  }

  void failed(ForwardFailure failure, const char* why) {
    if (owner_ == nullptr) return;
    owner_->context_.metrics.forwardFailed(failure);
    kMeshForwarderLog.info("forward failed", {{"tunnel", tunnelId_},
                                              {"machine", machine_},
                                              {"reason", std::string(forwardFailureName(failure))},
                                              {"error", why}});
    timer_.cancel();
    dropHolder();
    answer_.clear();
    if (tries_ < kForwardTries && visitor_ != nullptr) {
      // Another holder of the same origin first; else whatever the choice gives without the
      // machine that failed.
      auto next = owner_->table_.pickOrigin(tunnelId_, route_, origin_, machine_);
      if (!next) next = owner_->target(tunnelId_, route_, visitorKey_, std::nullopt, machine_);
      if (next) {
        tryHolder(*next);
        return;
      }
    }
    giveUp();
  }

  void dropHolder() {
    if (holder_ == nullptr) return;
    TcpStream* holder = std::exchange(holder_, nullptr);
    holder->abandonConnect();
    holder->setHandler(nullptr);
    holder->close(true);
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    stopWaiting();
    timer_.cancel();
    dropHolder();
    if (owner_ != nullptr) {
      owner_->attempts_.erase(this);
      owner_->context_.deferDelete(this);
    } else {
      delete this;
    }
  }

  MeshForwarder* owner_;
  TcpStream* visitor_;
  TcpStream* holder_ = nullptr;
  std::string tunnelId_;
  std::string route_;
  std::string visitorKey_;  // the origin choice's key
  std::vector<uint8_t> hello_;
  SourceSlot sourceSlot_;
  VisitorOutcome outcome_;
  VisitorSide visitorSide_;
  TimerEntry timer_;
  std::string machine_;  // the holder being tried
  std::string origin_;   // its origin, named in the header
  std::vector<uint8_t> answer_;
  int tries_ = 0;
  bool waiting_ = false;  // for a holder to appear in the table
  bool finished_ = false;
};

MeshForwarder::MeshForwarder(RelayContext& context, const MeshRouteTable& table,
                             MeshForwarderOptions options, GiveUp giveUp)
    : context_(context), table_(table), options_(std::move(options)), giveUp_(std::move(giveUp)) {
  if (!options_.internalAddress.empty()) source_ = parseSocketAddress(options_.internalAddress, 0);
}

MeshForwarder::~MeshForwarder() {
  const std::vector<Attempt*> left(attempts_.begin(), attempts_.end());
  attempts_.clear();
  for (Attempt* attempt : left) attempt->abandon();
}

bool MeshForwarder::forward(TcpStream* visitor, const std::string& tunnelId,
                            const std::string& route, std::vector<uint8_t>&& hello,
                            SourceSlot&& sourceSlot, VisitorOutcome outcome,
                            std::string_view visitorKey, std::optional<std::string_view> origin) {
  if (!source_) return false;
  std::optional<MeshForwardTarget> holder = target(tunnelId, route, visitorKey, origin);
  if (!holder) {
    // A holder may be on its way (attached elsewhere a moment ago): wait for the table, while
    // any peer is linked and the waiting room has space.
    if (options_.missWaitMs == 0 || waiting_ >= kMaxMissWaiting || !anyPeerLinked()) {
      context_.metrics.meshLookupMiss.Increment();
      return false;
    }
    auto* attempt = new Attempt(*this, visitor, tunnelId, route, std::move(hello),
                                std::move(sourceSlot), outcome, visitorKey);
    attempts_.insert(attempt);
    attempt->waitForHolder();
    return true;
  }
  context_.metrics.meshLookupHit.Increment();
  auto* attempt = new Attempt(*this, visitor, tunnelId, route, std::move(hello),
                              std::move(sourceSlot), outcome, visitorKey);
  attempts_.insert(attempt);
  attempt->tryHolder(*holder);
  return true;
}

std::optional<MeshForwardTarget> MeshForwarder::target(std::string_view tunnelId,
                                                       std::string_view route,
                                                       std::string_view visitorKey,
                                                       std::optional<std::string_view> origin,
                                                       std::string_view skipMachine) const {
  if (origin) {
    if (auto holder = table_.pickOrigin(tunnelId, route, *origin, skipMachine)) return holder;
  }
  // The same choice a local pick makes (relayd/origin_choice.h), over the origins the mesh holds
  // the route with; unheld, since the hold is per machine (docs/pools-mesh.md).
  origins_.clear();
  table_.originsOf(tunnelId, route, origins_);
  candidates_.clear();
  for (const std::string_view name : origins_) {
    // Origins whose only holder is the skipped machine are not candidates.
    if (!skipMachine.empty() && !table_.pickOrigin(tunnelId, route, name, skipMachine)) continue;
    candidates_.push_back({name, 1.0, false});
  }
  const size_t chosen = chooseOrigin(visitorKey, candidates_);
  if (chosen == candidates_.size()) return std::nullopt;
  return table_.pickOrigin(tunnelId, route, candidates_[chosen].name, skipMachine);
}

void MeshForwarder::tableChanged() {
  if (waiting_ == 0) return;
  std::vector<Attempt*> ready;
  for (Attempt* attempt : attempts_) {
    if (attempt->waiting() && table_.pick(attempt->tunnelId(), attempt->route())) {
      ready.push_back(attempt);
    }
  }
  // Trying a holder can end attempts (a bad address fails at once), so not while iterating.
  for (Attempt* attempt : ready) {
    if (!attempts_.contains(attempt) || !attempt->waiting()) continue;
    if (auto holder =
            target(attempt->tunnelId(), attempt->route(), attempt->visitorKey(), std::nullopt)) {
      attempt->holderAppeared(*holder);
    }
  }
}

bool MeshForwarder::anyPeerLinked() const {
  for (const MeshPeer& peer : table_.peers()) {
    if (peer.linked) return true;
  }
  return false;
}

}  // namespace ot::relayd
