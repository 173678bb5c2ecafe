// One relay's Session stream on controld's side, on gRPC's synchronous API: the handler thread
// reads RelayMessages and applies them through the hub, and a writer thread of the session's own
// drains its outbox into the stream (the only thread that writes to it).
//
// Why the sync API with a writer thread rather than the callback API's ServerBidiReactor: the
// reader does blocking store reads (the records of the snapshot's tunnels), which must not run on
// a reactor thread, and there is one relayd per machine, so two threads per session cost nothing
// while plain blocking code is easier to get right than a reactor's state across callbacks.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/sync_stream.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "controld/relays/relay_hub.h"
#include "controld/store/store.h"
#include "opentunnel/control/v1/control.grpc.pb.h"

namespace ot::controld {

struct RelaySessionOptions {
  // How long an ending session waits for its writer to finish a pending write before it cancels
  // the call (a relay that stopped reading).
  std::chrono::milliseconds writerLinger{2000};
  Clock nowMs;  // empty: the system clock
  // Attach authorizations relayd sends on the session (AuthorizeBatch), handed over on the reader
  // thread: the handler must not block (it queues the work; the answers go to the session's
  // outbox). Empty: the session does not offer it, and relayd makes unary calls.
  std::function<void(const RelayHub::SessionPtr& session, cv1::AuthorizeBatch batch)> authorize;
};

// Lives on the stack of the Session handler, for one stream.
class RelaySession {
 public:
  using Stream = grpc::ServerReaderWriter<cv1::ControlMessage, cv1::RelayMessage>;

  RelaySession(grpc::ServerContext& context, Stream& stream, TunnelStore& store, RelayHub& hub,
               RelaySessionOptions options);
  // Ends the session if run() did not get to (an exception): the writer is always joined.
  ~RelaySession();
  RelaySession(const RelaySession&) = delete;
  RelaySession& operator=(const RelaySession&) = delete;

  // Reads until the stream ends; the status is the Session call's.
  grpc::Status run();

 private:
  [[nodiscard]] grpc::Status apply(const cv1::RelayMessage& message);
  [[nodiscard]] grpc::Status snapshotPart(const cv1::BridgeSnapshot& part);
  // After the snapshot: the records of the tunnels relayd holds bridges for.
  void pushRecords(const std::set<std::string>& tunnelIds);
  // The records of tunnels with a direct origin, but those in alreadyPushed.
  void pushDirectRecords(const std::set<std::string>& alreadyPushed);
  static constexpr int kDirectRecordsPage = 500;
  void writeLoop();
  // Writes `messages` in order, consecutive AuthorizeAnswers merged into one; false when the
  // stream broke.
  [[nodiscard]] bool writeAll(std::deque<cv1::ControlMessage> messages);
  void finish();
  [[nodiscard]] int64_t nowMs() const;

  grpc::ServerContext& context_;
  Stream& stream_;
  TunnelStore& store_;
  RelayHub& hub_;
  const RelaySessionOptions options_;

  RelayHub::SessionPtr session_;
  std::thread writer_;
  std::promise<void> writerDone_;
  bool finished_ = false;
  bool snapshotComplete_ = false;
  // The snapshot collected so far; deltas that arrive before its last part apply here.
  std::unordered_map<std::string, BridgeEntry> pending_;
};

}  // namespace ot::controld
