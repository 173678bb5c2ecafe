// relayd's side of the RelayControl contract (proto/opentunnel/control/v1/control.proto): the
// long-lived Session stream to controld over its unix socket, reconnected with backoff for as
// long as relayd runs, and the unary AuthorizeAttach / FetchTunnel calls.
//
// Threads: gRPC runs on the client's own threads (a session thread that connects, writes and
// reads; unary calls use grpc's async CompletionQueue on one more thread). Everything they learn is
// handed to the loop thread through a mutex-guarded queue and one uv_async_t, so every callback in
// ControlEvents and every `done` runs on the loop thread. Every public method is called on the loop
// thread and never blocks (it only queues).
//
// Bridges: the loop reports attaches and detaches here. The client keeps a mirror of the attached
// bridges so that on every (re)connect it sends Hello, then a snapshot of exactly the bridges
// attached at that moment (split into parts of at most 1,000 bridges to stay far below gRPC's
// 4 MB message limit), then the deltas that happen afterwards, in order. Deltas made while the
// stream is down are folded into the mirror, never queued without bound.
//
// The snapshot is made on the loop, never under a lock the loop could wait on: the mirror is the
// loop's alone. For each stream attempt the session thread posts a request through the loop
// inbox and waits; the loop copies the mirror and the draining flag, then (in the same loop step,
// holding the session mutex only to hand the copy over) opens the stream's outbox. Deltas
// reported before that step are in the snapshot, deltas after it are in the outbox: the cut is
// exact however long the copy takes (control_client.cc, takeSnapshot; control_session.cc).
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"
#include "opentunnel/control/v1/control.pb.h"

namespace ot::relayd {

namespace v1 = ::opentunnel::control::v1;

struct ControlEvents {
  // The session was accepted (true, after SessionAccepted) or lost (false). Not called again with
  // the same value twice in a row.
  std::function<void(bool connected)> onSessionState;
  std::function<void(const v1::TunnelRecord&)> onTunnel;
  std::function<void(const v1::TunnelDeleted&)> onTunnelDeleted;
  std::function<void(const v1::ApiCertificate&)> onApiCertificate;
  std::function<void(const v1::Command&)> onCommand;  // answer with ControlClient::ack
  // The mesh table feed (docs/mesh.md "The control-session feed"); a gap is answered with
  // ControlClient::requestMeshSnapshot.
  std::function<void(const v1::MeshTableSnapshot&)> onMeshSnapshot;
  std::function<void(const v1::MeshTableDelta&)> onMeshDelta;
  // A mesh link came up: read the cached negative answers again (docs/mesh.md "Events").
  std::function<void(const v1::RecheckRecords&)> onRecheckRecords{};
};

struct ControlClientOptions {
  std::string socketPath;  // controld's gRPC socket (CONTROL_SOCKET)
  std::string machineId;
  uint64_t epoch = 0;  // random per relayd process
  int64_t startedAtUnixMs = 0;
  std::string version;
  uint64_t reconnectInitialMs = 100;  // backoff between session attempts: doubles with jitter
  uint64_t reconnectMaxMs = 2'000;    // controld is local: keep retrying briskly
  uint64_t callTimeoutMs = 5'000;     // deadline of AuthorizeAttach / FetchTunnel
  uint64_t countersIntervalMs = 10'000;
  // relayd's machine-wide figures for controld's admin stats (readRelayStats, relay_stats.h):
  // read every statsIntervalMs on the session's writer thread (so it must only read atomics) and
  // sent in a Counters when they changed since the last one this stream carried. Empty: never.
  std::function<v1::RelayStats()> stats;
  uint64_t statsIntervalMs = 1'000;
};

class ControlClient {
 public:
  ControlClient(uv_loop_t* loop, ControlClientOptions options, ControlEvents events);
  ~ControlClient();  // stop()
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  void start();
  // Ends the session (after flushing what is queued, up to 1 s), joins the threads. Callbacks of
  // calls still in flight are dropped. Idempotent.
  void stop();

  // Whether the session is accepted right now, as the loop last heard.
  [[nodiscard]] bool connected() const;
  // Session attempts made so far, failed or not (any thread): how fast a restarted controld is
  // found is counted in attempts, which the session's own backoff paces.
  [[nodiscard]] uint64_t sessionAttempts() const;

  void bridgeAttached(v1::Bridge bridge);
  void bridgeDetached(const std::string& bridgeId, const std::string& tunnelId,
                      v1::DetachReason reason, int64_t detachedAtUnixMs);
  // Usage to report in the next Counters message (summed per tunnel until then, and per origin
  // when the bridge that carried it attached with an origin name).
  void addUsage(const std::string& tunnelId, uint64_t bytesIn, uint64_t bytesOut,
                uint64_t connections, uint64_t rejected, const std::string& origin = {});
  // relayd is shutting down: sends Draining now (and Hello.draining on any reconnect).
  void draining(int64_t deadlineUnixMs);
  // An operator's drain ended (otctl drain --undo): later hellos say serving again.
  void serving();
  void ack(const v1::Ack& ack);
  // The answer to a TunnelStatusQuery (docs/pools-status.md); dropped when no session is up.
  void tunnelStatus(v1::TunnelStatusReply reply);
  // The mesh table copy missed a version: asks the current session's controld for a snapshot
  // (dropped when no session is up: the next one starts with a snapshot anyway).
  void requestMeshSnapshot(uint64_t haveVersion, uint64_t gotVersion);

  using AuthorizeDone = std::function<void(Result<v1::AuthorizeAttachResponse>)>;
  using FetchDone = std::function<void(Result<v1::FetchTunnelResponse>)>;
  // An Error of kind kUnavailable when controld cannot be reached, kTimeout when the deadline
  // passed.
  void authorizeAttach(v1::AuthorizeAttachRequest request, AuthorizeDone done);
  void fetchTunnel(const std::string& tunnelId, FetchDone done);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ot::relayd
