// The set of live relay sessions, keyed by relay (machine id + "/" + epoch), and everything that
// crosses between them and the rest of controld: record, deletion and certificate pushes (the hub
// is the RecordPublisher), commands and their acks, usage counters. It also applies each
// session's bridge reports to the BridgeRegistry, so that a stale session (superseded by a
// reconnect of the same relay, or ended because controld stops) never changes the view.
// Thread-safe: gRPC session threads, API workers and the admin service call it at once. Sending
// never blocks: every session has its own bounded outbox (see session_outbox.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/analytics/analytics_event.h"
#include "common/clock.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/record_publisher.h"
#include "controld/relays/relay_figures.h"
#include "controld/relays/session_outbox.h"
#include "opentunnel/control/v1/control.pb.h"

namespace ot::controld {

namespace cv1 = ::opentunnel::control::v1;

// One live relay session, for logs and the admin view.
struct RelayInfo {
  std::string relayKey;
  std::string machineId;
  uint64_t epoch = 0;
  std::string version;
  std::string forwardAddress;
  int64_t startedAtMs = 0;    // relayd's start
  int64_t connectedAtMs = 0;  // when controld accepted the session
  bool snapshotComplete = false;
  bool draining = false;
  size_t queued = 0;  // messages waiting in the session's outbox
  // relayd's machine-wide figures from its newest Counters that had them (relay_figures.h);
  // nullopt until then (an older relayd never sends them).
  std::optional<RelayFigures> figures;
};

struct RelayHubOptions {
  size_t queueLimit = 10000;  // per session; overflow ends that session
  std::string instanceId;     // SessionAccepted.instance_id; empty: random
  Clock nowMs;                // empty: the system clock
  // Told of bridge.attached and bridge.detached from live sessions (not snapshots: a bridge a
  // relay reports again after a reconnect was announced when it attached); may be empty.
  analytics::EventSink events{};
};

class RelayHub final : public RecordPublisher {
 public:
  // One stream's side of the hub. Created by open(); shared by the stream's handler and, while it
  // is live, the hub.
  class Session {
   public:
    [[nodiscard]] const std::string& relayKey() const { return relayKey_; }
    [[nodiscard]] SessionOutbox& outbox() { return outbox_; }

   private:
    friend class RelayHub;
    Session(std::string relayKey, size_t queueLimit, std::function<void()> cancel)
        : relayKey_(std::move(relayKey)), outbox_(queueLimit), cancel_(std::move(cancel)) {}
    // Cancels the stream unless close() ran: the handler (and its ServerContext) may be gone by
    // the time shutdown() or a superseding open() gets to it.
    void cancelStream();

    const std::string relayKey_;
    SessionOutbox outbox_;
    const std::function<void()> cancel_;
    std::mutex cancelMutex_;
    bool streamClosed_ = false;  // guarded by cancel_mutex_
    // Guarded by the hub's mutex.
    RelayInfo info_;
    bool live_ = true;      // false once superseded, closed, or the hub shut down
    bool meshFed_ = false;  // had a mesh table snapshot: gets the deltas
  };
  using SessionPtr = std::shared_ptr<Session>;

  using AckHandler = std::function<void(const std::string& relayKey, const cv1::Ack& ack)>;
  using CountersHandler =
      std::function<void(const std::string& relayKey, const cv1::Counters& counters)>;
  using AttachedHandler = std::function<void(const BridgeEntry& bridge)>;
  using TunnelStatusHandler =
      std::function<void(const std::string& relayKey, const cv1::TunnelStatusReply& reply)>;

  struct CommandSent {
    uint64_t id = 0;    // Command.id, echoed by each relay's Ack
    size_t relays = 0;  // sessions it was queued to
  };

  explicit RelayHub(BridgeRegistry& registry, RelayHubOptions options = {});

  [[nodiscard]] static std::string relayKey(std::string_view machineId, uint64_t epoch);
  [[nodiscard]] const std::string& instanceId() const { return instanceId_; }

  // RecordPublisher: queued to every live session. A record that is deleted goes out as
  // TunnelDeleted with its revision; publishDeleted(id) without one sends revision 0.
  void publishRecord(const StoredTunnel& tunnel) override;
  void publishDeleted(const std::string& tunnelId) override;
  void publishDeleted(const std::string& tunnelId, uint64_t revision);
  void recheckRecords(const std::string& peerMachine) override;  // RecheckRecords to every relay
  // Remembered and sent to every live session and to each new one after SessionAccepted. A chain
  // without a certificate is logged and ignored (the previous certificate stays).
  void publishApiCertificate(const ApiCertificatePem& certificate) override;

  // Queues a command to one relay (relay_key) or to all ("") with a fresh id.
  CommandSent sendCommand(const std::string& relayKey, cv1::Command command);
  // Handlers run on the session's reader thread: they must not block (hand work off instead).
  void setAckHandler(AckHandler handler);
  void setCountersHandler(CountersHandler handler);
  // Each bridge a live session reports as newly attached (not the snapshot's), after the registry
  // has it (the attach bookkeeping, attach_bookkeeper.h).
  void setAttachedHandler(AttachedHandler handler);
  // Each TunnelStatusReply (tunnel_status_source.h); runs on the session's reader thread.
  void setTunnelStatusHandler(TunnelStatusHandler handler);

  // The mesh table feed (docs/mesh.md "The control-session feed"). `handler` is asked for a
  // snapshot for a relay (its key) when its session opens and when relayd asks after a gap; it
  // must not block (the mesh node queues the request to its loop). Unset: the mesh is off and
  // nothing of it is sent.
  void setMeshSnapshotHandler(std::function<void(const std::string& relayKey)> handler);
  // Called (outside the hub's lock) with true when a relay says it is draining (its Draining
  // message, or a hello with draining set) and with false when a relay's session opens serving:
  // the mesh node leaves the mesh, or rejoins it.
  void setDrainingHandler(std::function<void(bool draining)> handler);
  // From the mesh loop: snapshot parts for the relay's live session, which from now on also gets
  // every meshDelta; and a delta for every live session that had a snapshot. Both only queue.
  void meshSnapshot(const std::string& relayKey, std::vector<cv1::ControlMessage> parts);
  void meshDelta(const cv1::ControlMessage& message);

  [[nodiscard]] std::vector<RelayInfo> relays() const;
  // Ends every session and refuses new ones. The registry keeps the bridges: they are still live
  // in relayd, and this controld is going away.
  void shutdown();

  // ---- Used by the session handler (relay_session.h). ----

  // Registers a session after its Hello and queues SessionAccepted (and the API certificate);
  // `authorizeOnSession` is what SessionAccepted offers (the session answers AuthorizeBatch).
  // A live session of the same relay is superseded: it is cancelled and its end drops nothing.
  // nullptr after shutdown().
  [[nodiscard]] SessionPtr open(const cv1::Hello& hello, std::function<void()> cancel,
                                bool authorizeOnSession = false);
  // Registry changes; ignored once the session is no longer live.
  void snapshotComplete(const SessionPtr& session, std::vector<BridgeEntry> bridges);
  void bridgeAttached(const SessionPtr& session, BridgeEntry bridge);
  void bridgeDetached(const SessionPtr& session, const std::string& bridgeId);
  // The same, with the event for analytics (tunnel, reason, time).
  void bridgeDetached(const SessionPtr& session, const cv1::BridgeDetached& detached);
  void markDraining(const SessionPtr& session);
  // relayd asked for a new mesh table snapshot (MeshSnapshotRequest).
  void meshSnapshotWanted(const SessionPtr& session);
  // Forwarded to the handlers even from a superseded session: the usage happened all the same.
  // The relay's figures (Counters.relay) are kept in its RelayInfo.
  void counters(const SessionPtr& session, const cv1::Counters& counters);
  void ack(const SessionPtr& session, const cv1::Ack& ack);
  void tunnelStatus(const SessionPtr& session, const cv1::TunnelStatusReply& reply);
  [[nodiscard]] bool send(const SessionPtr& session, cv1::ControlMessage message);
  // The stream ended. Returns true when this dropped the relay's bridges from the registry: only
  // when the session was still the relay's live one (not superseded, controld not stopping).
  bool close(const SessionPtr& session);

 private:
  [[nodiscard]] int64_t nowMs() const;
  void fanOutLocked(const cv1::ControlMessage& message);

  BridgeRegistry& registry_;
  const size_t queueLimit_;
  const std::string instanceId_;
  const Clock nowMs_;
  const analytics::EventSink events_;

  mutable std::mutex mutex_;
  std::map<std::string, SessionPtr> sessions_;  // the live session of each relay
  bool stopping_ = false;
  uint64_t nextCommandId_ = 0;
  std::unique_ptr<cv1::ControlMessage> apiCertificate_;
  AckHandler ackHandler_;
  CountersHandler countersHandler_;
  AttachedHandler attachedHandler_;
  TunnelStatusHandler tunnelStatusHandler_;
  std::function<void(bool)> drainingHandler_;
  std::function<void(const std::string& relayKey)> meshSnapshotHandler_;
};

}  // namespace ot::controld
