// Relay's side of controld's pushes and commands: tunnel records into the table, deletions and
// resets closing their bridges, the API certificate swapped in, drain / reset / close commands
// acknowledged; and the conversions between controld's messages and relayd's types.
#include <algorithm>
#include <string>

#include "common/bridge_control.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/websocket_frame.h"
#include "relayd/bridge_session.h"
#include "relayd/relay.h"

namespace ot::relayd {

namespace {

const log::Logger kRelayControlLog("relayd.relay");

Sha256 toSha256(const std::string& bytes) {
  Sha256 out{};
  if (bytes.size() == out.size()) std::copy(bytes.begin(), bytes.end(), out.begin());
  return out;
}

}  // namespace

CachedRecord toCachedRecord(const v1::TunnelRecord& record) {
  CachedRecord cached;
  cached.revision = record.revision();
  cached.tokenSha256 = toSha256(record.token_sha256());
  cached.certReady = record.cert_ready();
  cached.certNotAfterMs = record.cert_not_after_unix_ms();
  cached.deleted = record.deleted();
  cached.maxConnsPerBridge = record.max_conns_per_bridge();
  cached.maxConnsPerTunnel = record.max_conns_per_tunnel();
  cached.maxRoutes = record.max_routes();
  for (const auto& origin : record.origins()) {
    cached.origins.emplace_back(origin.name(), toSha256(origin.credential_sha256()));
  }
  cached.balancing =
      record.balancing() == v1::BALANCING_PRIORITY ? Balancing::kPriority : Balancing::kSpread;
  cached.stickyHoldMs =
      record.sticky_hold_ms() == 0 ? kDefaultStickyHoldMs : record.sticky_hold_ms();
  cached.credentialGeneration = record.credential_generation();
  return cached;
}

v1::DetachReason detachReasonToProto(DetachOutcome reason) {
  switch (reason) {
    case DetachOutcome::kClientClose:
      return v1::DETACH_REASON_CLIENT_CLOSE;
    case DetachOutcome::kDrop:
      return v1::DETACH_REASON_DROP;
    case DetachOutcome::kIdleRetire:
      return v1::DETACH_REASON_IDLE_RETIRE;
    case DetachOutcome::kDrain:
      return v1::DETACH_REASON_DRAIN;
    case DetachOutcome::kDelete:
      return v1::DETACH_REASON_DELETE;
    case DetachOutcome::kServerClose:
      return v1::DETACH_REASON_SERVER_CLOSE;
    case DetachOutcome::kReset:
      return v1::DETACH_REASON_RESET;
    case DetachOutcome::kRevoked:
      return v1::DETACH_REASON_REVOKED;
    case DetachOutcome::kCount:
      break;
  }
  return v1::DETACH_REASON_SERVER_CLOSE;
}

DetachOutcome detachOutcomeFromProto(v1::DetachReason reason) {
  switch (reason) {
    case v1::DETACH_REASON_DELETE:
      return DetachOutcome::kDelete;
    case v1::DETACH_REASON_DRAIN:
      return DetachOutcome::kDrain;
    case v1::DETACH_REASON_RESET:
      return DetachOutcome::kReset;
    case v1::DETACH_REASON_IDLE_RETIRE:
      return DetachOutcome::kIdleRetire;
    case v1::DETACH_REASON_REVOKED:
      return DetachOutcome::kRevoked;
    default:
      return DetachOutcome::kServerClose;
  }
}

void Relay::onTunnel(const v1::TunnelRecord& record) {
  if (record.deleted()) {
    onTunnelDeleted(record.tunnel_id());
    return;
  }
  storeRecord(record);
}

void Relay::storeRecord(const v1::TunnelRecord& record) {
  if (!table_.upsertRecord(record.tunnel_id(), toCachedRecord(record))) return;
  // A newer record: bridges whose derived credential it no longer lists (origin removed,
  // generation rotated) stop at once. Token bridges and every other bridge stay.
  for (uint64_t key : table_.revokedBridges(record.tunnel_id())) {
    auto it = bridges_.find(key);
    if (it == bridges_.end()) continue;
    kRelayControlLog.info("bridge closed: its origin credential was revoked",
                          {{"bridge", it->second->bridgeId()}, {"tunnel", record.tunnel_id()}});
    it->second->close(ws::kClosePolicyViolation, DetachOutcome::kRevoked, "credential revoked");
  }
  // Direct mode: the origins to dial, and those no longer (after the revocation, so a rotated
  // credential's links close as revoked).
  direct_->onRecord(record);
}

void Relay::onTunnelDeleted(const std::string& tunnelId) {
  // A deletion is final whatever revision it carries.
  table_.markDeleted(tunnelId);
  direct_->onTunnelGone(tunnelId);
  closeTunnelBridges(tunnelId, ws::kCloseNormal, DetachOutcome::kDelete);
}

void Relay::closeTunnelBridges(const std::string& tunnelId, uint16_t code, DetachOutcome reason,
                               const std::string& text) {
  for (uint64_t key : table_.bridgesOf(tunnelId)) {
    auto it = bridges_.find(key);
    if (it != bridges_.end()) it->second->close(code, reason, text);
  }
}

size_t Relay::resetTunnel(const std::string& tunnelId) {
  const size_t bridges = table_.bridgesOf(tunnelId).size();
  // 4000 "reset": the client redials at once, without its backoff (docs/protocol.md section 9).
  closeTunnelBridges(tunnelId, bridge::kCloseReset, DetachOutcome::kReset,
                     std::string(bridge::kCloseResetReason));
  table_.dropRecord(tunnelId);
  if (bridges > 0)
    kRelayControlLog.info("tunnel reset", {{"tunnel", tunnelId}, {"bridges", bridges}});
  return bridges;
}

void Relay::onApiCertificate(const v1::ApiCertificate& certificate) {
  if (!certificate.fingerprint_sha256().empty() &&
      certificate.fingerprint_sha256() == apiFingerprint_)
    return;
  auto ctx = tls::makeServerContext(certificate.certificate_chain_pem(),
                                    certificate.private_key_pem(), {"h2", "http/1.1"});
  if (!ctx.ok()) {
    kRelayControlLog.error("the API certificate from controld is unusable",
                           {{"error", ctx.error().message}});
    return;
  }
  if (context_.ticketKeys) useTicketKeys(ctx.value().get(), context_.ticketKeys);
  apiContext_ = std::move(ctx).value();
  apiFingerprint_ = certificate.fingerprint_sha256();
  kRelayControlLog.info("API certificate installed",
                        {{"fingerprint", apiFingerprint_.substr(0, 16)}});
}

void Relay::onCommand(const v1::Command& command) {
  v1::Ack ack;
  ack.set_command_id(command.id());
  ack.set_status(v1::ACK_STATUS_OK);
  uint32_t affected = 0;
  switch (command.action_case()) {
    case v1::Command::kDrainTunnel:
      for (uint64_t key : table_.bridgesOf(command.drain_tunnel().tunnel_id())) {
        auto it = bridges_.find(key);
        if (it == bridges_.end()) continue;
        it->second->drain();
        ++affected;
      }
      break;
    case v1::Command::kResetTunnel:
      affected = static_cast<uint32_t>(resetTunnel(command.reset_tunnel().tunnel_id()));
      break;
    case v1::Command::kCloseBridge: {
      ack.set_status(v1::ACK_STATUS_NOT_FOUND);
      for (auto& [key, bridge] : bridges_) {
        if (bridge->bridgeId() != command.close_bridge().bridge_id() || !bridge->attached())
          continue;
        bridge->close(ws::kCloseNormal, detachOutcomeFromProto(command.close_bridge().reason()));
        ack.set_status(v1::ACK_STATUS_OK);
        affected = 1;
        break;
      }
      break;
    }
    case v1::Command::kDrainRelay:
      // As on SIGTERM, but relayd keeps running (relay_server.cc's shutdown timer is not armed).
      affected = static_cast<uint32_t>(bridges_.size());
      if (command.drain_relay().undo()) {
        stopDrain();
      } else {
        startDrain();
      }
      break;
    case v1::Command::kTunnelStatus: {
      const std::string& id = command.tunnel_status().tunnel_id();
      std::vector<StatusBridge> attached;
      for (uint64_t key : table_.bridgesOf(id)) {
        auto it = bridges_.find(key);
        if (it == bridges_.end() || !it->second->attached()) continue;
        const bridge::AttachRequest& attach = it->second->attachRequest();
        attached.push_back({attach.origin, attach.profile, attach.profileIndex,
                            static_cast<uint32_t>(it->second->streamCount())});
      }
      affected = static_cast<uint32_t>(attached.size());
      v1::TunnelStatusReply reply = statusStore_.reply(id, attached, context_.nowMs());
      reply.set_command_id(command.id());
      control_->tunnelStatus(std::move(reply));  // before the Ack: controld waits for either
      break;
    }
    default:
      ack.set_status(v1::ACK_STATUS_FAILED);
      ack.set_message("unknown command");
      break;
  }
  ack.set_bridges_affected(affected);
  control_->ack(ack);
}

void Relay::meshFeedEvents(ControlEvents& events) {
  events.onMeshSnapshot = [this](const v1::MeshTableSnapshot& part) { onMeshSnapshot(part); };
  events.onMeshDelta = [this](const v1::MeshTableDelta& delta) { onMeshDelta(delta); };
}

void Relay::onMeshSnapshot(const v1::MeshTableSnapshot& part) {
  if (meshFeed_.snapshotPart(part) != MeshFeedReceiver::Outcome::kSnapshotApplied) return;
  context_.metrics.meshTableSnapshots.Increment();
  context_.metrics.meshTableRoutes.Set(static_cast<double>(meshRoutes_.routeCount()));
  if (forwarder_ != nullptr) forwarder_->tableChanged();
  size_t linked = 0;
  for (const MeshPeer& peer : meshRoutes_.peers()) linked += peer.linked ? 1 : 0;
  kRelayControlLog.info("mesh table snapshot applied", {{"version", meshRoutes_.version()},
                                                        {"routes", meshRoutes_.routeCount()},
                                                        {"peers", meshRoutes_.peers().size()},
                                                        {"linked", linked}});
}

void Relay::onMeshDelta(const v1::MeshTableDelta& delta) {
  const uint64_t have = meshRoutes_.version();
  switch (meshFeed_.delta(delta)) {
    case MeshFeedReceiver::Outcome::kDeltaApplied:
      context_.metrics.meshTableDeltas.Increment();
      context_.metrics.meshTableRoutes.Set(static_cast<double>(meshRoutes_.routeCount()));
      if (forwarder_ != nullptr) forwarder_->tableChanged();
      break;
    case MeshFeedReceiver::Outcome::kGap:
      // Forwarding goes on by the copy as it is until the snapshot replaces it.
      context_.metrics.meshTableGaps.Increment();
      kRelayControlLog.warn("mesh table delta skipped a version; asking controld for a snapshot",
                            {{"have_version", have}, {"got_version", delta.version()}});
      control_->requestMeshSnapshot(have, delta.version());
      break;
    default:
      break;
  }
}

}  // namespace ot::relayd
