#include "controld/mesh/mesh_node.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <future>

#include "common/clock.h"
#include "controld/mesh/link_admission.h"
#include "controld/mesh/snapshot_split.h"

namespace ot::mesh {
namespace {

sockaddr_storage sourceAddress(const HostPort& internal) {
  // An IP literal (checked with the settings), port 0: the kernel picks the port.
  return resolveWithoutDns(internal.host, 0).value_or(sockaddr_storage{});
}

}  // namespace

MeshNode::MeshNode(MeshSettings settings, metrics::Metrics& metrics)
    : settings_(std::move(settings)),
      selfAddress_(settings_.internalAddress.toString()),
      metrics_(metrics),
      epoch_(std::random_device{}() * (uint64_t{1} << 32) + std::random_device{}()),
      startedAtMs_(unixNowMs()),
      random_(epoch_),
      directory_(selfAddress_, settings_,
                 [this] { return std::uniform_real_distribution<double>(0, 1)(random_); }),
      local_(settings_.machineId),
      table_(settings_.machineId),
      routeCheckCounters_(routeCheckCounters(metrics)) {}

MeshNode::~MeshNode() {
  stop();
}

Status MeshNode::start() {
  if (const int rc = uv_loop_init(&loop_); rc != 0) {
    return Error{ErrorKind::kInternal, std::string("uv_loop_init: ") + uv_strerror(rc)};
  }
  handoffs_ = std::make_unique<HandoffListener>(
      &loop_, [this](ReceivedHandoff received) { acceptHandoff(std::move(received)); },
      [this] { metrics_.handoff("invalid"); });
  if (auto listening = handoffs_->listen(settings_.handoffSocket); !listening.ok()) {
    handoffs_->close();
    handoffs_.reset();
    uv_run(&loop_, UV_RUN_NOWAIT);
    uv_loop_close(&loop_);
    return listening;
  }
  uv_async_init(&loop_, &wake_,
                [](uv_async_t* async) { static_cast<MeshNode*>(async->data)->runTasks(); });
  wake_.data = this;
  routeFeed_.start(&loop_);
  routeFeed_.holdSnapshots(true);  // until the links are settled (updateSettled)
  uv_timer_init(&loop_, &tickTimer_);
  tickTimer_.data = this;
  const auto tickMs = static_cast<uint64_t>(
      std::clamp<int64_t>(std::min(settings_.pingMs, settings_.deadMs) / 4, 5, 250));
  uv_timer_start(
      &tickTimer_, [](uv_timer_t* timer) { static_cast<MeshNode*>(timer->data)->tick(); }, 0,
      tickMs);
  if (!settings_.dnsName.empty()) {
    discovery_ = std::make_unique<MeshDiscovery>(
        &loop_, settings_.dnsName, settings_.dnsPort,
        settings_.internalAddress.host.find(':') != std::string::npos, settings_.discoveryMs,
        [this](const std::vector<std::string>& addresses) {
          directory_.sawInDns(addresses, static_cast<int64_t>(uv_now(&loop_)));
        });
    discovery_->start();
  }
  const auto now = static_cast<int64_t>(uv_now(&loop_));
  for (const auto& peer : settings_.peers) directory_.addConfigured(peer.toString(), now);
  gate_.emplace(now, settings_.relayWaitMs);
  alive_ = std::make_unique<AliveAsker>(
      &loop_, metrics_, log_,
      AliveAskerSetup{settings_.token, settings_.machineId,
                      sourceAddress(settings_.internalAddress),
                      LivenessTimes{settings_.pingMs, settings_.deadMs, settings_.holdMs}},
      [this](const std::string& machine, std::string_view reason) { dropPeer(machine, reason); });
  {
    std::lock_guard lock(tasksMutex_);
    accepting_ = true;
  }
  started_ = true;
  thread_ = std::thread([this] { uv_run(&loop_, UV_RUN_DEFAULT); });
  log_.info("mesh node started",
            {{"address", selfAddress_},
             {"epoch", std::to_string(epoch_)},
             {"peers", settings_.peers.size()},
             {"dns", settings_.dnsName.empty() ? std::string("off") : settings_.dnsName},
             {"handoff_socket", settings_.handoffSocket}});
  return Ok{};
}

void MeshNode::stop() {
  if (!started_) return;
  started_ = false;
  {
    std::lock_guard lock(tasksMutex_);
    accepting_ = false;
    tasks_.emplace_back([this] { shutdownOnLoop(); });
    uv_async_send(&wake_);
  }
  thread_.join();
  uv_loop_close(&loop_);
  log_.info("mesh node stopped");
}

void MeshNode::post(std::function<void()> task) {
  {
    std::lock_guard lock(tasksMutex_);
    if (!accepting_) return;
    tasks_.push_back(std::move(task));
    uv_async_send(&wake_);  // under the lock: once accepting_ is false the handle may be closed
  }
}

void MeshNode::runTasks() {
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard lock(tasksMutex_);
    tasks.swap(tasks_);
  }
  for (auto& task : tasks) task();
}

void MeshNode::shutdownOnLoop() {
  stopping_ = true;
  routeFeed_.close();
  handoffs_->close();
  alive_->close();
  for (auto& received : gate_->takeDeferred()) ::close(received.connectionFd);
  for (auto& [id, query] : dialQueries_) query->cancel();
  dialQueries_.clear();
  if (discovery_) discovery_->close();
  std::vector<MeshLink*> open;
  for (auto& [pointer, link] : links_) open.push_back(pointer);
  for (MeshLink* link : open) link->close("shutdown");
  if (exchanges_) exchanges_->closeAll();
  uv_close(reinterpret_cast<uv_handle_t*>(&tickTimer_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&wake_), nullptr);
}

MeshNodeStatus MeshNode::status() {
  auto promise = std::make_shared<std::promise<MeshNodeStatus>>();
  auto future = promise->get_future();
  {
    std::lock_guard lock(tasksMutex_);
    if (!accepting_) return {};
    tasks_.emplace_back([this, promise] {
      MeshNodeStatus status;
      status.peers = directory_.view();
      for (auto& peer : status.peers)
        peer.held = !peer.machine.empty() && alive_->held(peer.machine);
      for (const auto& [machine, link] : active_) status.linkedMachines.push_back(machine);
      status.heldMachines = alive_->heldMachines();
      status.linking = gate_->open();
      status.openLinks = links_.size();
      status.machines = table_.machines();
      for (const auto& machine : status.machines) {
        status.bridges[machine.life.machineId] = table_.bridgesOf(machine.life.machineId);
      }
      status.sequence = local_.sequence();
      status.localBridges = local_.size();
      promise->set_value(std::move(status));
    });
    uv_async_send(&wake_);
  }
  return future.get();
}

// --- the registry's changes ------------------------------------------------------------------

void MeshNode::relayReplaced(const std::string& relayKey,
                             const std::vector<controld::BridgeEntry>& bridges) {
  post([this, change = LocalChange{LocalChange::Kind::kReplaced, relayKey, bridges, {}}] {
    applyLocal(change);
  });
}

void MeshNode::bridgeAttached(const std::string& relayKey, const controld::BridgeEntry& bridge) {
  post([this, change = LocalChange{LocalChange::Kind::kAttached, relayKey, {bridge}, {}}] {
    applyLocal(change);
  });
}

void MeshNode::bridgeDetached(const std::string& relayKey, const std::string& bridgeId) {
  post([this, change = LocalChange{LocalChange::Kind::kDetached, relayKey, {}, bridgeId}] {
    applyLocal(change);
  });
}

void MeshNode::relayDropped(const std::string& relayKey) {
  post([this, change = LocalChange{LocalChange::Kind::kDropped, relayKey, {}, {}}] {
    applyLocal(change);
  });
}

void MeshNode::bridgeAuthorized(const std::string& relayKey, const controld::BridgeEntry& bridge) {
  post([this, change = LocalChange{LocalChange::Kind::kAuthorized, relayKey, {bridge}, {}}] {
    applyLocal(change);
  });
}

void MeshNode::applyLocal(const LocalChange& change) {
  announce(local_.apply(change, static_cast<int64_t>(uv_now(&loop_))));
  // The first session snapshot of this life: peers' first snapshot from it will carry its bridges.
  if (change.kind == LocalChange::Kind::kReplaced) updateGate(true);
}

// Each delta is encoded once and goes to every proven link (each got its snapshot before).
void MeshNode::announce(std::vector<FrameBody> bodies) {
  for (auto& body : bodies) {
    const Frame frame{unixNowMs(), std::move(body)};
    const std::string encoded = encodeFrame(frame);
    const auto type = frameTypeName(frame.body);
    for (auto& [pointer, link] : links_) {
      if (link->proven()) link->sendEncoded(encoded, type);
    }
  }
  metrics_.localBridges(local_.size());
}

void MeshNode::updateGate(bool relaySnapshot) {
  const auto opened = gate_->update(static_cast<int64_t>(uv_now(&loop_)), relaySnapshot);
  if (!opened) return;
  log_.info("mesh node linking", {{"after", *opened}, {"deferred_links", gate_->deferred()}});
  gateOpenedAtMs_ = static_cast<int64_t>(uv_now(&loop_));
  for (auto& received : gate_->takeDeferred()) acceptHandoff(std::move(received));
  tick();
}

// --- links ------------------------------------------------------------------------------------

void MeshNode::acceptHandoff(ReceivedHandoff received) {
  if (received.handoff.kind == HandoffKind::kInternalHttp) {
    metrics_.handoff("internal_http");
    return answerRouteCheck(std::move(received));
  }
  size_t unproven = 0;
  for (const auto& [pointer, link] : links_) {
    if (!link->proven() && !link->outbound()) ++unproven;
  }
  if (!stopping_ && gate_->defer(received)) {
    // Before this life's first relayd snapshot: kept (the dialer waits up to its handshake
    // limit) rather than closed, so the peer need not back off and redial.
    return metrics_.linkDeferred();
  }
  if (stopping_ || !gate_->open() || unproven >= kMaxPreAuthConnections) {
    metrics_.handoff("refused");
    ::close(received.connectionFd);
    return;
  }
  metrics_.handoff("mesh_link");
  LinkSetup setup{settings_.token, settings_.machineId, false, {}, received.handoff.peerAddress};
  auto link = std::make_unique<MeshLink>(&loop_, *this, metrics_, std::move(setup));
  MeshLink* raw = link.get();
  links_.emplace(raw, std::move(link));
  raw->adopt(received.connectionFd, received.handoff.prefix);
}

void MeshNode::startDial(const std::string& address) {
  const auto target = parseHostPort(address);
  if (!target) return directory_.dialEnded(address, false, static_cast<int64_t>(uv_now(&loop_)));
  const uint64_t id = nextQueryId_++;
  DnsQuery* query = DnsQuery::resolve(
      &loop_, target->host, target->port,
      [this, address, id](int status, const sockaddr_storage& resolved) {
        dialQueries_.erase(id);
        if (status != 0) {
          metrics_.linkError("resolve_error");
          return directory_.dialEnded(address, false, static_cast<int64_t>(uv_now(&loop_)));
        }
        dialResolved(address, resolved);
      });
  if (query != nullptr) dialQueries_.emplace(id, query);
}

void MeshNode::dialResolved(const std::string& address, const sockaddr_storage& target) {
  if (stopping_) return;
  // The canonical address dialed: a name in MESH_PEERS is compared by what it resolved to.
  const std::string dialed = canonicalAddress(formatAddress(target)).value_or(address);
  LinkSetup setup{settings_.token, settings_.machineId, true, dialed, {}};
  auto link = std::make_unique<MeshLink>(&loop_, *this, metrics_, std::move(setup));
  MeshLink* raw = link.get();
  links_.emplace(raw, std::move(link));
  dialing_.emplace(raw, address);
  raw->dial(sourceAddress(settings_.internalAddress), target);
}

void MeshNode::linkProven(MeshLink& link) {
  sendHelloAndSnapshot(link);
}

// The hello, then the snapshot taken at this machine's current sequence: every delta after it
// goes to this link too (applyLocal), so the peer can apply them in order.
void MeshNode::sendHelloAndSnapshot(MeshLink& link) {
  const int64_t now = unixNowMs();
  link.send(Frame{now, Hello{kLinkFormatVersion, settings_.machineId, settings_.region,
                             selfAddress_, epoch_, startedAtMs_, leaving_}});
  const auto bridges = local_.snapshot();
  bool first = true;
  for (auto& part : encodeSnapshot(bridges, local_.sequence(), now)) {
    link.sendEncoded(std::move(part), first ? "snapshot" : "snapshot_part");
    first = false;
  }
}

std::string MeshNode::peerKey(const MeshLink& link) const {
  if (auto found = dialing_.find(const_cast<MeshLink*>(&link)); found != dialing_.end()) {
    return found->second;
  }
  const auto& hello = link.hello();
  return hello ? canonicalAddress(hello->address).value_or(hello->address) : std::string();
}

void MeshNode::refuse(MeshLink& link, std::string_view reason) {
  metrics_.linkError(reason);
  log_.warn("mesh link refused",
            {{"peer", link.peerMachine()},
             {"address", link.outbound() ? link.dialTarget() : link.remoteAddress()},
             {"reason", reason}});
  link.close(reason);
}

void MeshNode::linkFrame(MeshLink& link, Frame frame) {
  if (const auto* hello = std::get_if<Hello>(&frame.body)) return onHello(link, *hello);
  auto active = active_.find(link.peerMachine());
  if (active == active_.end() || active->second != &link) return;  // a link on its way out
  applyTable(link, frame);
}

void MeshNode::onHello(MeshLink& link, const Hello& hello) {
  auto existing = active_.find(hello.machine);
  std::optional<LinkFacts> existingFacts;
  if (existing != active_.end()) {
    existingFacts = LinkFacts{*existing->second->hello(), existing->second->outbound(),
                              existing->second->dialTarget(), existing->second->remoteAddress()};
  }
  const LinkFacts candidate{hello, link.outbound(), link.dialTarget(), link.remoteAddress()};
  const Admission admission = admitLink(candidate, existingFacts ? &*existingFacts : nullptr,
                                        selfAddress_, settings_.verifyAddress);
  switch (admission) {
    case Admission::kAccept:
      break;
    case Admission::kReplaceExisting: {
      MeshLink* old = existing->second;
      active_.erase(existing);  // its close drops nothing: this link's snapshot replaces
      old->close("replaced");
      break;
    }
    case Admission::kDuplicate:
      return link.close("duplicate");  // the pair's other link stays: not an error
    case Admission::kBadAddress:
    case Admission::kWrongAddress:
    case Admission::kAlreadyLinked:
    case Admission::kStaleLife:
      return refuse(link, admissionName(admission));
  }
  active_[hello.machine] = &link;
  routeFeed_.linked(hello.machine, true);
  updateSettled();
  link.markUp();
  directory_.linkUp(peerKey(link), hello.machine);
  metrics_.linkUp();
  log_.info("mesh link up", {{"peer", hello.machine},
                             {"peer_region", hello.region},
                             {"address", hello.address},
                             {"direction", link.outbound() ? "dialed" : "accepted"},
                             {"draining", hello.draining}});
  updateGauges();
  // What the peer sent while it was not linked is lost (docs/mesh.md "Events"). The peer sends
  // its events on this link from before its hello, so only what came before needs the check.
  if (linkUp_) linkUp_(hello.machine, local_.tunnelIds());
}

void MeshNode::applyTable(MeshLink& link, Frame& frame) {
  const Hello& hello = *link.hello();
  const double delay = static_cast<double>(unixNowMs() - frame.sentAtMs) / 1000.0;
  TableUpdate update = TableUpdate::kApplied;
  if (auto* snapshot = std::get_if<SnapshotPart>(&frame.body)) {
    const MachineLife life{hello.machine, hello.epoch,  hello.startedAtMs,
                           hello.address, hello.region, hello.draining};
    const size_t size = snapshot->bridges.size();
    update = table_.applySnapshot(life, snapshot->sequence, std::move(snapshot->bridges));
    metrics_.snapshot(size, delay);
    if (update == TableUpdate::kApplied) {
      alive_->release(hello.machine);  // replaced the held
      updateSettled();                 // the snapshot a settled table waits for
    }
  } else if (const auto* attached = std::get_if<Attached>(&frame.body)) {
    update = table_.applyAttached(hello.machine, hello.epoch, attached->sequence, attached->bridge);
    metrics_.propagation("attached", delay);
  } else if (const auto* detached = std::get_if<Detached>(&frame.body)) {
    update =
        table_.applyDetached(hello.machine, hello.epoch, detached->sequence, detached->bridgeId);
    metrics_.propagation("detached", delay);
  } else if (std::holds_alternative<Ping>(frame.body)) {
    return;
  } else {
    // Events: leaving marks the machine draining; the others go to the peer-event handler
    // (mesh_events.h: the record read again and pushed to this machine's relays).
    if (std::holds_alternative<Leaving>(frame.body)) {
      log_.info("mesh peer leaving", {{"peer", hello.machine}});
      update = table_.setDraining(hello.machine, hello.epoch, true);
    } else if (peerEvents_) {
      peerEvents_(frame.body);
    }
    metrics_.propagation("event", delay);
  }
  if (update != TableUpdate::kApplied) return refuse(link, tableUpdateName(update));
  metrics_.tableEntries(table_.bridgeCount());
}

void MeshNode::linkClosed(MeshLink& link) {
  const auto now = static_cast<int64_t>(uv_now(&loop_));
  auto active = active_.find(link.peerMachine());
  if (active != active_.end() && active->second == &link) {
    active_.erase(active);
    metrics_.linkDown();
    log_.info("mesh link down", {{"peer", link.peerMachine()},
                                 {"address", link.hello() ? link.hello()->address : std::string()},
                                 {"reason", link.closeReason()}});
    directory_.linkDown(peerKey(link), now);
    peerLinkEnded(link, now);
    // A held machine's forwards are still believed by this machine's relayd: its own relayd
    // answers the signed liveness question at its linked address (docs/mesh.md "A controld
    // restart drops no tunnel"). Dropped, it stops being a peer altogether.
    if (!alive_->held(link.peerMachine())) routeFeed_.linked(link.peerMachine(), false);
  } else if (link.outbound() && !link.wasUp()) {
    log_.debug("mesh dial ended", {{"address", link.dialTarget()}, {"reason", link.closeReason()}});
  }
  if (auto dialed = dialing_.find(&link); dialed != dialing_.end()) {
    directory_.dialEnded(dialed->second, link.wasUp() || link.closeReason() == "duplicate", now);
    dialing_.erase(dialed);
  }
  links_.erase(&link);  // destroys the link
  updateGauges();
}

void MeshNode::peerLinkEnded(const MeshLink& link, int64_t nowMs) {
  const std::string& machine = link.peerMachine();
  const std::string& reason = link.closeReason();
  const auto machines = table_.machines();
  const auto known = std::find_if(machines.begin(), machines.end(), [&](const auto& summary) {
    return summary.life.machineId == machine;
  });
  if (stopping_ || known == machines.end()) return dropPeer(machine, {});
  if (known->life.draining) return dropPeer(machine, "leaving");
  if (!lostLink(reason)) return dropPeer(machine, "link_error");  // entries not to be trusted
  // A link closed for silence was last heard from MESH_DEAD_MS ago.
  alive_->hold(machine, link.hello()->address, reason == "dead" ? nowMs - settings_.deadMs : nowMs);
}

void MeshNode::dropPeer(const std::string& machine, std::string_view reason) {
  if (!active_.contains(machine)) routeFeed_.linked(machine, false);
  table_.dropMachine(machine);
  if (!reason.empty()) metrics_.machineDropped(reason);
  metrics_.tableEntries(table_.bridgeCount());
}

// --- timers -----------------------------------------------------------------------------------

void MeshNode::tick() {
  if (stopping_) return;
  const auto now = static_cast<int64_t>(uv_now(&loop_));
  for (auto& [pointer, link] : links_) {
    link->tick(now, settings_.pingMs, settings_.deadMs, settings_.handshakeTimeoutMs);
  }
  alive_->tick();
  announce(local_.expirePending(now));  // authorized attaches relayd never confirmed
  if (!gate_->open()) {
    updateGate(false);
    if (gate_->open()) return;  // updateGate ticked
  }
  directory_.expire(now);
  if (!gate_->open()) return updateGauges();
  updateSettled();
  for (const auto& address : directory_.dueDials(now)) startDial(address);
  updateGauges();
}

// relayd's table snapshots wait until this life's links are settled: the gate is open, every
// peer address is linked and every linked machine's snapshot is in the table, or kSettleMs passed
// since the gate opened. A relayd that kept its copy through a controld restart goes on believing
// its peers meanwhile, instead of being handed a table that lacks a peer whose link or snapshot is
// a moment away (and refusing its forwards until the next update). A peer between two dials (its
// dial refused as a duplicate in the restart's crossing dials, say) counts as not linked yet.
void MeshNode::updateSettled() {
  if (settled_ || !gate_->open()) return;
  const auto now = static_cast<int64_t>(uv_now(&loop_));
  const size_t notLinked =
      directory_.count(PeerState::kConnecting) + directory_.count(PeerState::kUnreachable);
  const size_t withoutSnapshot =
      static_cast<size_t>(std::count_if(active_.begin(), active_.end(), [&](const auto& item) {
        return !table_.knowsMachine(item.first);
      }));
  if (notLinked + withoutSnapshot > 0 && now - gateOpenedAtMs_ < kSettleMs) return;
  settled_ = true;
  log_.info("mesh links settled: relayd's table follows", {{"linked", active_.size()},
                                                           {"not_linked", notLinked},
                                                           {"without_snapshot", withoutSnapshot}});
  routeFeed_.holdSnapshots(false);
}

void MeshNode::updateGauges() {
  metrics_.peers(directory_.count(PeerState::kUp), directory_.count(PeerState::kConnecting),
                 directory_.count(PeerState::kUnreachable));
  auto byMachine = table_.bridgesByMachine();  // counts only: no pass over the entries
  byMachine.insert(byMachine.begin(), {settings_.machineId, local_.size()});
  metrics_.tableBridges(byMachine);
}

}  // namespace ot::mesh
