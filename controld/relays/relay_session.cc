#include "controld/relays/relay_session.h"

#include <set>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "controld/relays/record_convert.h"

namespace ot::controld {
namespace {

const log::Logger& relaySessionLogger() {
  static const log::Logger instance("controld.session");
  return instance;
}

grpc::Status invalid(std::string message) {
  return {grpc::StatusCode::INVALID_ARGUMENT, std::move(message)};
}

}  // namespace

RelaySession::RelaySession(grpc::ServerContext& context, Stream& stream, TunnelStore& store,
                           RelayHub& hub, RelaySessionOptions options)
    : context_(context), stream_(stream), store_(store), hub_(hub), options_(std::move(options)) {}

RelaySession::~RelaySession() {
  finish();
}

int64_t RelaySession::nowMs() const {
  if (options_.nowMs) return options_.nowMs();
  return unixNowMs();
}

grpc::Status RelaySession::run() {
  cv1::RelayMessage message;
  if (!stream_.Read(&message)) return grpc::Status::OK;  // gone before saying hello
  if (message.kind_case() != cv1::RelayMessage::kHello) {
    return invalid("the first message of a session must be hello");
  }
  const cv1::Hello& hello = message.hello();
  if (hello.machine_id().empty()) return invalid("hello without a machine_id");

  session_ = hub_.open(
      hello, [context = &context_] { context->TryCancel(); }, options_.authorize != nullptr);
  if (session_ == nullptr) return {grpc::StatusCode::UNAVAILABLE, "controld is stopping"};
  relaySessionLogger().info("relay session accepted", {{"relay", session_->relayKey()},
                                                       {"version", hello.version()},
                                                       {"draining", hello.draining()}});
  writer_ = std::thread([this] { writeLoop(); });

  grpc::Status status = grpc::Status::OK;
  while (stream_.Read(&message)) {
    status = apply(message);
    if (!status.ok()) {
      relaySessionLogger().warn(
          "relay session broke the contract",
          {{"relay", session_->relayKey()}, {"error", status.error_message()}});
      break;
    }
  }
  finish();
  return status;
}

grpc::Status RelaySession::apply(const cv1::RelayMessage& message) {
  switch (message.kind_case()) {
    case cv1::RelayMessage::kHello:
      return invalid("hello sent twice on one session");
    case cv1::RelayMessage::kSnapshot:
      return snapshotPart(message.snapshot());
    case cv1::RelayMessage::kAttached: {
      BridgeEntry bridge = bridgeEntryFromProto(message.attached().bridge());
      if (snapshotComplete_) {
        hub_.bridgeAttached(session_, std::move(bridge));
      } else {
        auto id = bridge.bridgeId;
        pending_.insert_or_assign(std::move(id), std::move(bridge));
      }
      return grpc::Status::OK;
    }
    case cv1::RelayMessage::kDetached:
      if (snapshotComplete_) {
        hub_.bridgeDetached(session_, message.detached());
      } else {
        pending_.erase(message.detached().bridge_id());
      }
      return grpc::Status::OK;
    case cv1::RelayMessage::kCounters:
      hub_.counters(session_, message.counters());
      return grpc::Status::OK;
    case cv1::RelayMessage::kDraining:
      relaySessionLogger().info("relay is draining",
                                {{"relay", session_->relayKey()},
                                 {"deadline_ms", message.draining().deadline_unix_ms()}});
      hub_.markDraining(session_);
      return grpc::Status::OK;
    case cv1::RelayMessage::kAck:
      hub_.ack(session_, message.ack());
      return grpc::Status::OK;
    case cv1::RelayMessage::kTunnelStatus:
      hub_.tunnelStatus(session_, message.tunnel_status());
      return grpc::Status::OK;
    case cv1::RelayMessage::kAuthorize:
      // Never offered, never sent: a relayd that sends it anyway gets no answer and decides from
      // its cache at its deadline, as with a controld that does not answer.
      if (options_.authorize) options_.authorize(session_, message.authorize());
      return grpc::Status::OK;
    case cv1::RelayMessage::kMeshSnapshotRequest:
      relaySessionLogger().info("relay asked for a mesh table snapshot",
                                {{"relay", session_->relayKey()},
                                 {"have_version", message.mesh_snapshot_request().have_version()},
                                 {"got_version", message.mesh_snapshot_request().got_version()}});
      hub_.meshSnapshotWanted(session_);
      return grpc::Status::OK;
    case cv1::RelayMessage::kBatch:
      // Offered in SessionAccepted.accepts_batches: the messages apply in order, as if sent one by
      // one; one that may only come on its own (Hello, a snapshot part, a batch) breaks the
      // contract.
      for (const cv1::RelayMessage& inner : message.batch().messages()) {
        const auto kind = inner.kind_case();
        if (kind == cv1::RelayMessage::kHello || kind == cv1::RelayMessage::kSnapshot ||
            kind == cv1::RelayMessage::kBatch) {
          return invalid("a batch may not hold hello, a snapshot part or another batch");
        }
        grpc::Status status = apply(inner);
        if (!status.ok()) return status;
      }
      return grpc::Status::OK;
    case cv1::RelayMessage::KIND_NOT_SET:
      break;  // a kind this controld does not know yet (a newer relayd): ignored
  }
  return grpc::Status::OK;
}

grpc::Status RelaySession::snapshotPart(const cv1::BridgeSnapshot& part) {
  if (snapshotComplete_) return invalid("a second snapshot on one session");
  for (const auto& bridge : part.bridges()) {
    BridgeEntry entry = bridgeEntryFromProto(bridge);
    auto id = entry.bridgeId;
    pending_.insert_or_assign(std::move(id), std::move(entry));
  }
  if (!part.last()) return grpc::Status::OK;

  std::vector<BridgeEntry> bridges;
  std::set<std::string> tunnels;
  bridges.reserve(pending_.size());
  for (auto& [id, bridge] : pending_) {
    tunnels.insert(bridge.tunnelId);
    bridges.push_back(std::move(bridge));
  }
  pending_.clear();
  snapshotComplete_ = true;
  relaySessionLogger().info(
      "relay snapshot received",
      {{"relay", session_->relayKey()}, {"bridges", bridges.size()}, {"tunnels", tunnels.size()}});
  // The view first: it is what the API answers from, and the records may wait on the database.
  hub_.snapshotComplete(session_, std::move(bridges));
  pushRecords(tunnels);
  pushDirectRecords(tunnels);
  return grpc::Status::OK;
}

void RelaySession::pushDirectRecords(const std::set<std::string>& alreadyPushed) {
  // A relay dials direct origins (docs/pools-direct.md) whether or not it holds any bridge of
  // their tunnel, so it needs those records from the start, not at their next change.
  std::string after;
  size_t pushed = 0;
  for (;;) {
    if (context_.IsCancelled()) return;
    auto page = store_.directTunnels(after, kDirectRecordsPage);
    if (!page.ok()) {
      relaySessionLogger().warn("direct-mode records not pushed after the snapshot",
                                {{"relay", session_->relayKey()}, {"error", page.error().message}});
      return;
    }
    for (const StoredTunnel& tunnel : *page) {
      after = tunnel.record.id;
      if (alreadyPushed.contains(tunnel.record.id) || !hasDirectOrigin(tunnel.record)) continue;
      cv1::ControlMessage message;
      *message.mutable_tunnel() = toProtoRecord(tunnel, nowMs());
      if (!hub_.send(session_, std::move(message))) return;  // the session is ending
      ++pushed;
    }
    if (page->size() < static_cast<size_t>(kDirectRecordsPage)) break;
  }
  if (pushed > 0) {
    relaySessionLogger().info("direct-mode records pushed",
                              {{"relay", session_->relayKey()}, {"tunnels", pushed}});
  }
}

void RelaySession::pushRecords(const std::set<std::string>& tunnels) {
  for (const auto& id : tunnels) {
    if (context_.IsCancelled()) return;
    auto loaded = store_.getTunnel(id);
    if (!loaded.ok()) {
      // relayd keeps serving from its cache and fetches on demand; one failure is enough to stop
      // asking a database that is down (each try could wait for the store's timeouts).
      relaySessionLogger().warn(
          "records not pushed after the snapshot",
          {{"relay", session_->relayKey()}, {"error", loaded.error().message}});
      return;
    }
    if (!loaded->has_value()) {
      relaySessionLogger().warn("relay holds bridges of an unknown tunnel",
                                {{"relay", session_->relayKey()}, {"tunnel", id}});
      continue;
    }
    const StoredTunnel& tunnel = **loaded;
    cv1::ControlMessage message;
    if (tunnel.record.deleted()) {
      message.mutable_tunnel_deleted()->set_tunnel_id(tunnel.record.id);
      message.mutable_tunnel_deleted()->set_revision(
          tunnel.revision > 0 ? static_cast<uint64_t>(tunnel.revision) : 0);
    } else {
      *message.mutable_tunnel() = toProtoRecord(tunnel, nowMs());
    }
    if (!hub_.send(session_, std::move(message))) return;  // the session is ending
  }
}

void RelaySession::writeLoop() {
  SessionOutbox& outbox = session_->outbox();
  bool broken = false;
  for (;;) {
    std::deque<cv1::ControlMessage> messages = outbox.popAll();
    if (messages.empty()) break;  // closed
    if (!writeAll(std::move(messages))) {
      broken = true;
      break;
    }
  }
  if (outbox.overflowed()) {
    relaySessionLogger().warn("relay session ended: its outbox overflowed (relayd will resync)",
                              {{"relay", session_->relayKey()}});
    context_.TryCancel();
  } else if (broken) {
    context_.TryCancel();  // the call is gone: make sure the reader stops too
  }
  writerDone_.set_value();
}

bool RelaySession::writeAll(std::deque<cv1::ControlMessage> messages) {
  // Answers to attach authorizations that came ready while the previous write was in flight go
  // out as one AuthorizeAnswers message.
  std::vector<cv1::ControlMessage> merged;
  merged.reserve(messages.size());
  for (auto& message : messages) {
    if (message.kind_case() == cv1::ControlMessage::kAuthorized && !merged.empty() &&
        merged.back().kind_case() == cv1::ControlMessage::kAuthorized) {
      auto* into = merged.back().mutable_authorized()->mutable_answers();
      for (auto& answer : *message.mutable_authorized()->mutable_answers()) {
        *into->Add() = std::move(answer);
      }
      continue;
    }
    merged.push_back(std::move(message));
  }
  // No buffer_hint: on the synchronous API a hinted Write does not return until a later write
  // flushes it (a session that then goes quiet would hold the message back).
  for (const auto& message : merged) {
    if (!stream_.Write(message)) return false;
  }
  return true;
}

void RelaySession::finish() {
  if (finished_) return;
  finished_ = true;
  if (session_ == nullptr) return;
  const bool dropped = hub_.close(session_);  // also closes the outbox: the writer stops
  if (writer_.joinable()) {
    if (writerDone_.get_future().wait_for(options_.writerLinger) != std::future_status::ready) {
      context_.TryCancel();  // a write is stuck on a relay that stopped reading
    }
    writer_.join();
  }
  relaySessionLogger().info("relay session ended",
                            {{"relay", session_->relayKey()}, {"bridges_dropped", dropped}});
}

}  // namespace ot::controld
