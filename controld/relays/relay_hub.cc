#include "controld/relays/relay_hub.h"

#include <utility>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/log.h"
#include "controld/analytics/controld_events.h"
#include "controld/relays/record_convert.h"

namespace ot::controld {
namespace {

const log::Logger& relayHubLogger() {
  static const log::Logger instance("controld.relays");
  return instance;
}

std::string randomInstanceId() {
  if (auto bytes = crypto::randomBytes(8)) return crypto::toHex(*bytes);
  // Not a secret, only "different from the last process": the clock is good enough then.
  return "t" + std::to_string(unixNowMs());
}

}  // namespace

void RelayHub::Session::cancelStream() {
  const std::lock_guard lock(cancelMutex_);
  if (!streamClosed_ && cancel_) cancel_();
}

RelayHub::RelayHub(BridgeRegistry& registry, RelayHubOptions options)
    : registry_(registry),
      queueLimit_(options.queueLimit == 0 ? 1 : options.queueLimit),
      instanceId_(options.instanceId.empty() ? randomInstanceId() : std::move(options.instanceId)),
      nowMs_(std::move(options.nowMs)),
      events_(std::move(options.events)) {}

std::string RelayHub::relayKey(std::string_view machineId, uint64_t epoch) {
  std::string key(machineId);
  key += '/';
  key += std::to_string(epoch);
  return key;
}

int64_t RelayHub::nowMs() const {
  return nowMs_ ? nowMs_() : unixNowMs();
}

void RelayHub::fanOutLocked(const cv1::ControlMessage& message) {
  // A full outbox closes itself and its writer ends that session; the others go on.
  for (auto& [key, session] : sessions_) (void)session->outbox_.push(message);
}

void RelayHub::publishRecord(const StoredTunnel& tunnel) {
  if (tunnel.record.deleted()) {
    publishDeleted(tunnel.record.id,
                   tunnel.revision > 0 ? static_cast<uint64_t>(tunnel.revision) : 0);
    return;
  }
  cv1::ControlMessage message;
  *message.mutable_tunnel() = toProtoRecord(tunnel, nowMs());
  const std::lock_guard lock(mutex_);
  fanOutLocked(message);
}

void RelayHub::publishDeleted(const std::string& tunnelId) {
  publishDeleted(tunnelId, 0);
}

void RelayHub::publishDeleted(const std::string& tunnelId, uint64_t revision) {
  cv1::ControlMessage message;
  message.mutable_tunnel_deleted()->set_tunnel_id(tunnelId);
  message.mutable_tunnel_deleted()->set_revision(revision);
  const std::lock_guard lock(mutex_);
  fanOutLocked(message);
}

void RelayHub::recheckRecords(const std::string& peerMachine) {
  cv1::ControlMessage message;
  message.mutable_recheck_records()->set_peer_machine_id(peerMachine);
  const std::lock_guard lock(mutex_);
  fanOutLocked(message);
}

void RelayHub::publishApiCertificate(const ApiCertificatePem& certificate) {
  auto converted = toProtoCertificate(certificate);
  if (!converted.ok()) {
    relayHubLogger().error("API certificate not pushed to relays",
                           {{"error", converted.error().message}});
    return;
  }
  auto message = std::make_unique<cv1::ControlMessage>();
  *message->mutable_api_certificate() = std::move(converted).value();
  const std::lock_guard lock(mutex_);
  apiCertificate_ = std::move(message);
  fanOutLocked(*apiCertificate_);
}

RelayHub::CommandSent RelayHub::sendCommand(const std::string& relayKey, cv1::Command command) {
  CommandSent sent;
  const std::lock_guard lock(mutex_);
  sent.id = ++nextCommandId_;
  command.set_id(sent.id);
  cv1::ControlMessage message;
  *message.mutable_command() = std::move(command);
  for (auto& [key, session] : sessions_) {
    if (!relayKey.empty() && key != relayKey) continue;
    if (session->outbox_.push(message)) ++sent.relays;
  }
  return sent;
}

void RelayHub::setAckHandler(AckHandler handler) {
  const std::lock_guard lock(mutex_);
  ackHandler_ = std::move(handler);
}

void RelayHub::setCountersHandler(CountersHandler handler) {
  const std::lock_guard lock(mutex_);
  countersHandler_ = std::move(handler);
}

void RelayHub::setAttachedHandler(AttachedHandler handler) {
  const std::lock_guard lock(mutex_);
  attachedHandler_ = std::move(handler);
}

void RelayHub::setTunnelStatusHandler(TunnelStatusHandler handler) {
  const std::lock_guard lock(mutex_);
  tunnelStatusHandler_ = std::move(handler);
}

void RelayHub::tunnelStatus(const SessionPtr& session, const cv1::TunnelStatusReply& reply) {
  TunnelStatusHandler handler;
  {
    const std::lock_guard lock(mutex_);
    handler = tunnelStatusHandler_;
  }
  if (handler) handler(session->relayKey_, reply);
}

void RelayHub::setMeshSnapshotHandler(std::function<void(const std::string& relayKey)> handler) {
  const std::lock_guard lock(mutex_);
  meshSnapshotHandler_ = std::move(handler);
}

void RelayHub::meshSnapshotWanted(const SessionPtr& session) {
  std::function<void(const std::string&)> handler;
  {
    const std::lock_guard lock(mutex_);
    if (!session->live_) return;
    handler = meshSnapshotHandler_;
  }
  if (handler) handler(session->relayKey_);
}

void RelayHub::meshSnapshot(const std::string& relayKey, std::vector<cv1::ControlMessage> parts) {
  const std::lock_guard lock(mutex_);
  auto found = sessions_.find(relayKey);
  if (found == sessions_.end()) return;  // gone meanwhile; a new session asks again
  Session& session = *found->second;
  session.meshFed_ = true;
  for (auto& part : parts) {
    if (!session.outbox_.push(std::move(part))) return;  // overflowed: the session ends
  }
}

void RelayHub::meshDelta(const cv1::ControlMessage& message) {
  const std::lock_guard lock(mutex_);
  for (auto& [key, session] : sessions_) {
    if (session->meshFed_) (void)session->outbox_.push(message);
  }
}

std::vector<RelayInfo> RelayHub::relays() const {
  const std::lock_guard lock(mutex_);
  std::vector<RelayInfo> out;
  out.reserve(sessions_.size());
  for (const auto& [key, session] : sessions_) {
    out.push_back(session->info_);
    out.back().queued = session->outbox_.size();
  }
  return out;
}

void RelayHub::shutdown() {
  std::vector<SessionPtr> ending;
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& [key, session] : sessions_) {
      session->live_ = false;
      ending.push_back(session);
    }
    sessions_.clear();
  }
  for (const auto& session : ending) session->cancelStream();
}

RelayHub::SessionPtr RelayHub::open(const cv1::Hello& hello, std::function<void()> cancel,
                                    bool authorizeOnSession) {
  auto key = relayKey(hello.machine_id(), hello.epoch());
  SessionPtr session(new Session(key, queueLimit_, std::move(cancel)));
  RelayInfo& info = session->info_;
  info.relayKey = key;
  info.machineId = hello.machine_id();
  info.epoch = hello.epoch();
  info.version = hello.version();
  info.forwardAddress = hello.forward_address();
  info.startedAtMs = hello.started_at_unix_ms();
  info.connectedAtMs = nowMs();
  info.draining = hello.draining();

  cv1::ControlMessage accepted;
  accepted.mutable_accepted()->set_instance_id(instanceId_);
  accepted.mutable_accepted()->set_server_time_unix_ms(info.connectedAtMs);
  accepted.mutable_accepted()->set_authorize_on_session(authorizeOnSession);
  accepted.mutable_accepted()->set_accepts_batches(true);  // relay_session.cc reads RelayBatch

  SessionPtr superseded;
  {
    const std::lock_guard lock(mutex_);
    if (stopping_) return nullptr;
    // Queued under the lock, so no publish can come between the answer and the certificate.
    (void)session->outbox_.push(std::move(accepted));
    if (apiCertificate_ != nullptr) (void)session->outbox_.push(*apiCertificate_);
    auto& slot = sessions_[key];
    if (slot != nullptr) {
      slot->live_ = false;
      superseded = std::move(slot);
    }
    slot = session;
  }
  if (superseded != nullptr) {
    relayHubLogger().info("relay reconnected; ending its previous session", {{"relay", key}});
    superseded->cancelStream();
  }
  meshSnapshotWanted(session);  // after SessionAccepted: the snapshot comes before any delta
  if (session->info_.draining) {
    markDraining(session);  // a relay that reconnects while draining
  } else {
    std::function<void(bool)> handler;
    {
      const std::lock_guard lock(mutex_);
      handler = drainingHandler_;
    }
    if (handler) handler(false);
  }
  return session;
}

void RelayHub::snapshotComplete(const SessionPtr& session, std::vector<BridgeEntry> bridges) {
  const std::lock_guard lock(mutex_);
  if (!session->live_) return;
  session->info_.snapshotComplete = true;
  registry_.replaceRelay(session->relayKey_, std::move(bridges));
}

void RelayHub::bridgeAttached(const SessionPtr& session, BridgeEntry bridge) {
  AttachedHandler handler;
  {
    const std::lock_guard lock(mutex_);
    if (!session->live_) return;
    handler = attachedHandler_;
    if (!handler && !events_) {
      registry_.attached(session->relayKey_, std::move(bridge));
      return;
    }
    registry_.attached(session->relayKey_, bridge);
  }
  if (events_) events_(bridgeAttachedEvent(bridge, nowMs()));
  if (handler) handler(bridge);
}

void RelayHub::bridgeDetached(const SessionPtr& session, const std::string& bridgeId) {
  const std::lock_guard lock(mutex_);
  if (!session->live_) return;
  registry_.detached(session->relayKey_, bridgeId);
}

void RelayHub::bridgeDetached(const SessionPtr& session, const cv1::BridgeDetached& detached) {
  {
    const std::lock_guard lock(mutex_);
    if (!session->live_) return;
    registry_.detached(session->relayKey_, detached.bridge_id());
  }
  if (events_) events_(bridgeDetachedEvent(detached, nowMs()));
}

void RelayHub::setDrainingHandler(std::function<void(bool)> handler) {
  const std::lock_guard lock(mutex_);
  drainingHandler_ = std::move(handler);
}

void RelayHub::markDraining(const SessionPtr& session) {
  std::function<void(bool)> handler;
  {
    const std::lock_guard lock(mutex_);
    session->info_.draining = true;
    handler = drainingHandler_;
  }
  if (handler) handler(true);
}

void RelayHub::counters(const SessionPtr& session, const cv1::Counters& counters) {
  CountersHandler handler;
  {
    const std::lock_guard lock(mutex_);
    if (counters.has_relay()) session->info_.figures = relayFiguresFromProto(counters.relay());
    handler = countersHandler_;
  }
  if (handler) handler(session->relayKey_, counters);
}

void RelayHub::ack(const SessionPtr& session, const cv1::Ack& ack) {
  AckHandler handler;
  {
    const std::lock_guard lock(mutex_);
    handler = ackHandler_;
  }
  if (handler) handler(session->relayKey_, ack);
}

bool RelayHub::send(const SessionPtr& session, cv1::ControlMessage message) {
  return session->outbox_.push(std::move(message));
}

bool RelayHub::close(const SessionPtr& session) {
  {
    const std::lock_guard lock(session->cancelMutex_);
    session->streamClosed_ = true;
  }
  session->outbox_.close();
  const std::lock_guard lock(mutex_);
  if (!session->live_) return false;
  session->live_ = false;
  auto it = sessions_.find(session->relayKey_);
  if (it == sessions_.end() || it->second != session) return false;
  sessions_.erase(it);
  registry_.dropRelay(session->relayKey_);
  return true;
}

}  // namespace ot::controld
