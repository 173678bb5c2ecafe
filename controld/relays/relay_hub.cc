#include "controld/relays/relay_hub.h"

#include <utility>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/log.h"
#include "controld/relays/record_convert.h"

namespace ot::controld {
namespace {

const log::Logger& logger() {
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
  const std::lock_guard lock(cancel_mutex_);
  if (!stream_closed_ && cancel_) cancel_();
}

RelayHub::RelayHub(BridgeRegistry& registry, RelayHubOptions options)
    : registry_(registry),
      queue_limit_(options.queue_limit == 0 ? 1 : options.queue_limit),
      instance_id_(options.instance_id.empty() ? randomInstanceId()
                                               : std::move(options.instance_id)),
      now_ms_(std::move(options.now_ms)) {}

std::string RelayHub::relayKey(std::string_view machine_id, uint64_t epoch) {
  std::string key(machine_id);
  key += '/';
  key += std::to_string(epoch);
  return key;
}

int64_t RelayHub::nowMs() const {
  return now_ms_ ? now_ms_() : unixNowMs();
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

void RelayHub::publishDeleted(const std::string& tunnel_id) {
  publishDeleted(tunnel_id, 0);
}

void RelayHub::publishDeleted(const std::string& tunnel_id, uint64_t revision) {
  cv1::ControlMessage message;
  message.mutable_tunnel_deleted()->set_tunnel_id(tunnel_id);
  message.mutable_tunnel_deleted()->set_revision(revision);
  const std::lock_guard lock(mutex_);
  fanOutLocked(message);
}

void RelayHub::publishApiCertificate(const ApiCertificatePem& certificate) {
  auto converted = toProtoCertificate(certificate);
  if (!converted.ok()) {
    logger().error("API certificate not pushed to relays", {{"error", converted.error().message}});
    return;
  }
  auto message = std::make_unique<cv1::ControlMessage>();
  *message->mutable_api_certificate() = std::move(converted).value();
  const std::lock_guard lock(mutex_);
  api_certificate_ = std::move(message);
  fanOutLocked(*api_certificate_);
}

RelayHub::CommandSent RelayHub::sendCommand(const std::string& relay_key, cv1::Command command) {
  CommandSent sent;
  const std::lock_guard lock(mutex_);
  sent.id = ++next_command_id_;
  command.set_id(sent.id);
  cv1::ControlMessage message;
  *message.mutable_command() = std::move(command);
  for (auto& [key, session] : sessions_) {
    if (!relay_key.empty() && key != relay_key) continue;
    if (session->outbox_.push(message)) ++sent.relays;
  }
  return sent;
}

void RelayHub::setAckHandler(AckHandler handler) {
  const std::lock_guard lock(mutex_);
  ack_handler_ = std::move(handler);
}

void RelayHub::setCountersHandler(CountersHandler handler) {
  const std::lock_guard lock(mutex_);
  counters_handler_ = std::move(handler);
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

RelayHub::SessionPtr RelayHub::open(const cv1::Hello& hello, std::function<void()> cancel) {
  auto key = relayKey(hello.machine_id(), hello.epoch());
  SessionPtr session(new Session(key, queue_limit_, std::move(cancel)));
  RelayInfo& info = session->info_;
  info.relay_key = key;
  info.machine_id = hello.machine_id();
  info.epoch = hello.epoch();
  info.version = hello.version();
  info.forward_address = hello.forward_address();
  info.started_at_ms = hello.started_at_unix_ms();
  info.connected_at_ms = nowMs();
  info.draining = hello.draining();

  cv1::ControlMessage accepted;
  accepted.mutable_accepted()->set_instance_id(instance_id_);
  accepted.mutable_accepted()->set_server_time_unix_ms(info.connected_at_ms);

  SessionPtr superseded;
  {
    const std::lock_guard lock(mutex_);
    if (stopping_) return nullptr;
    // Queued under the lock, so no publish can come between the answer and the certificate.
    (void)session->outbox_.push(std::move(accepted));
    if (api_certificate_ != nullptr) (void)session->outbox_.push(*api_certificate_);
    auto& slot = sessions_[key];
    if (slot != nullptr) {
      slot->live_ = false;
      superseded = std::move(slot);
    }
    slot = session;
  }
  if (superseded != nullptr) {
    logger().info("relay reconnected; ending its previous session", {{"relay", key}});
    superseded->cancelStream();
  }
  return session;
}

void RelayHub::snapshotComplete(const SessionPtr& session, std::vector<BridgeEntry> bridges) {
  const std::lock_guard lock(mutex_);
  if (!session->live_) return;
  session->info_.snapshot_complete = true;
  registry_.replaceRelay(session->relay_key_, std::move(bridges));
}

void RelayHub::bridgeAttached(const SessionPtr& session, BridgeEntry bridge) {
  const std::lock_guard lock(mutex_);
  if (!session->live_) return;
  registry_.attached(session->relay_key_, std::move(bridge));
}

void RelayHub::bridgeDetached(const SessionPtr& session, const std::string& bridge_id) {
  const std::lock_guard lock(mutex_);
  if (!session->live_) return;
  registry_.detached(session->relay_key_, bridge_id);
}

void RelayHub::markDraining(const SessionPtr& session) {
  const std::lock_guard lock(mutex_);
  session->info_.draining = true;
}

void RelayHub::counters(const SessionPtr& session, const cv1::Counters& counters) {
  CountersHandler handler;
  {
    const std::lock_guard lock(mutex_);
    handler = counters_handler_;
  }
  if (handler) handler(session->relay_key_, counters);
}

void RelayHub::ack(const SessionPtr& session, const cv1::Ack& ack) {
  AckHandler handler;
  {
    const std::lock_guard lock(mutex_);
    handler = ack_handler_;
  }
  if (handler) handler(session->relay_key_, ack);
}

bool RelayHub::send(const SessionPtr& session, cv1::ControlMessage message) {
  return session->outbox_.push(std::move(message));
}

bool RelayHub::close(const SessionPtr& session) {
  {
    const std::lock_guard lock(session->cancel_mutex_);
    session->stream_closed_ = true;
  }
  session->outbox_.close();
  const std::lock_guard lock(mutex_);
  if (!session->live_) return false;
  session->live_ = false;
  auto it = sessions_.find(session->relay_key_);
  if (it == sessions_.end() || it->second != session) return false;
  sessions_.erase(it);
  registry_.dropRelay(session->relay_key_);
  return true;
}

}  // namespace ot::controld
