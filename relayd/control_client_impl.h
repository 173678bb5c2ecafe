// ControlClient's insides, shared by control_client.cc (the loop side: public methods and the
// hand-off to the loop), control_authorize.cc (attach authorization on the session, the loop
// side), control_calls.cc (the unary calls on a CompletionQueue thread) and control_session.cc
// (the session thread and its per-stream writer thread). Not for other users.
//
// Ownership: ControlClient holds the Impl through a shared_ptr; stop() joins every thread the Impl
// started, then hands one more reference to the Impl itself until the close callbacks of its three
// handles (the uv_async_t, the authorization deadline timer and the delta timer), so the handles
// (and the gRPC channel) outlive the ControlClient and are freed on the loop thread.
#pragma once

#include <grpcpp/grpcpp.h>
#include <uv.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "opentunnel/control/v1/control.grpc.pb.h"
#include "relayd/control_client.h"
#include "relayd/control_mirror.h"

namespace ot::relayd {

// Work for the loop thread, posted from any thread; one uv_async_send per post wakes the loop.
// Lives in the Impl: every thread that posts is joined before the Impl goes away.
class LoopInbox {
 public:
  explicit LoopInbox(uv_async_t* async) : async_(async) {}

  // Any thread. Dropped once closed.
  void post(std::function<void()> work);
  // Loop thread: everything posted so far, in order.
  [[nodiscard]] std::deque<std::function<void()>> take();
  // Loop thread, before the uv_async_t is closed: refuses further posts (so uv_async_send is never
  // called on a closing handle) and returns the work still queued, to be destroyed on the loop.
  [[nodiscard]] std::deque<std::function<void()>> close();

 private:
  std::mutex mutex_;
  uv_async_t* async_;
  bool closed_ = false;
  std::deque<std::function<void()>> work_;
};

// A unary call in flight on the client's CompletionQueue; its tag is the PendingCall itself. The
// CompletionQueue thread owns it from the start of the call until it completes.
struct PendingCall {
  virtual ~PendingCall() = default;
  // CompletionQueue thread: the call completed (status is set); post the result to the loop.
  virtual void complete() = 0;

  grpc::ClientContext context;
  grpc::Status status;
};

struct ControlClient::Impl {
  using Stream = grpc::ClientReaderWriter<v1::RelayMessage, v1::ControlMessage>;
  // Deltas queued for a slow stream beyond this end it: the next stream resyncs with a snapshot.
  static constexpr size_t kMaxOutbox = 65'536;
  // How long stop() lets an accepted session flush before it cancels the call.
  static constexpr std::chrono::milliseconds kStopLinger{1000};
  // How long bridge deltas (attached, detached) wait on the loop for company: they are held in
  // heldDeltas_ (no lock, no writer wakeup) and go to the outbox with the next authorization
  // request, ack or Draining, or when the loop's deltaTimer_ fires after this long, so an attach
  // costs the writer one wakeup (its request) instead of one more for its delta.
  static constexpr uint64_t kDeltaLingerMs = 10;
  // A RelayBatch holds at most this many messages and about this many bytes: far below gRPC's
  // 4 MB message limit on controld's side.
  static constexpr size_t kMaxBatchMessages = 1'000;
  static constexpr size_t kMaxBatchBytes = 512 * 1024;

  Impl(uv_loop_t* loop, ControlClientOptions options, ControlEvents events);
  ~Impl();

  // ---- loop thread (control_client.cc)
  void start();
  // Joins the session thread, drops pending results, closes the handle; `self` keeps the Impl
  // alive until the close callback.
  void stop(std::shared_ptr<Impl> self);
  void runPosted();
  void deliverSessionState(bool up);
  void deliverMessage(const v1::ControlMessage& message);
  // For the current stream, if one is up; mutex_ held. The deltas held on the loop go first.
  void queueLocked(v1::RelayMessage message);
  // A bridge delta, held on the loop until something else is queued or kDeltaLingerMs passed.
  void holdDelta(v1::RelayMessage message);
  // Moves the held deltas to the outbox (mutex_ held), keeping their order; they wake the writer
  // together with whatever is queued after them.
  void releaseDeltasLocked();
  void onDeltaTimer();
  // Posted by the session thread for its stream attempt `request`: copies the mirror and Hello's
  // draining flag here, on the loop, and in the same step opens the stream's outbox (the cut).
  void takeSnapshot(uint64_t request);
  void finishAuthorize(uint64_t id, Result<v1::AuthorizeAttachResponse> result);
  void finishFetch(uint64_t id, Result<v1::FetchTunnelResponse> result);

  // ---- attach authorization on the session, loop thread (control_authorize.cc)
  // Queues the request on the current stream when controld offered it; false when it did not (or
  // no stream is accepted), and then nothing was registered.
  bool authorizeOnSession(uint64_t id, v1::AuthorizeAttachRequest& request, AuthorizeDone& done);
  // The unary call, for a controld that does not authorize on the session.
  void authorizeUnary(uint64_t id, v1::AuthorizeAttachRequest request, AuthorizeDone done);
  void deliverAnswers(const v1::AuthorizeAnswers& answers);
  // Stream `stream` ended: its requests still waiting are answered kUnavailable now.
  void failAuthorizations(uint64_t stream);
  // Requests past their deadline are answered kTimeout; the timer is re-armed for the next one.
  void expireAuthorizations();
  void armAuthorizeTimer();

  // ---- the unary calls (control_calls.cc)
  // Registers and starts a call on cq_; false (and `call` deleted) once stopping.
  bool startCall(PendingCall* call);
  void completionLoop();  // the CompletionQueue thread
  void cancelCalls();     // loop thread, in stop(): cancels the calls in flight and joins

  // ---- session thread (control_session.cc)
  void sessionLoop();
  // One attempt: connect, Hello, snapshot, SessionAccepted, then read until the stream ends.
  // True when the session was accepted. `reason` says why it ended.
  bool runSession(std::string& reason);
  void writeLoop(Stream& stream, grpc::ClientContext& context);
  // Whether the current stream must end (stop or a broken stream); mutex_ held.
  [[nodiscard]] bool streamClosing() const { return stopping_ || streamEnded_; }

  uv_loop_t* loop_;
  const ControlClientOptions options_;
  const ControlEvents events_;
  const log::Logger log_{"relayd.control"};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RelayControl::Stub> stub_;
  std::atomic<uint64_t> sessionAttempts_{0};  // written by the session thread

  // Loop thread only.
  uv_async_t async_{};
  LoopInbox inbox_{&async_};
  std::shared_ptr<Impl> selfUntilClosed_;  // set by stop(), dropped by the close callback
  bool started_ = false;
  bool stopped_ = false;
  bool connected_ = false;
  uint64_t nextCallId_ = 1;
  // Authorizations waiting for an answer: `stream` is the session stream that carries the request
  // (streamGeneration_ when it was queued), 0 for a unary call (whose deadline is gRPC's).
  struct PendingAuthorize {
    AuthorizeDone done;
    uint64_t stream = 0;
  };
  std::unordered_map<uint64_t, PendingAuthorize> authorizeDone_;
  // The session-carried requests' deadlines (uv_now + callTimeoutMs), in the order they were made,
  // so in deadline order; entries of requests already answered are skipped when they come up.
  std::deque<std::pair<uint64_t, uint64_t>> authorizeDeadlines_;  // (deadline ms, id)
  uv_timer_t authorizeTimer_{};
  // Bridge deltas not yet in the outbox (holdDelta), and the timer that releases them.
  std::vector<v1::RelayMessage> heldDeltas_;
  uv_timer_t deltaTimer_{};
  int handlesOpen_ = 0;  // closed by stop(): the Impl is released when all three are closed
  std::unordered_map<uint64_t, FetchDone> fetchDone_;
  // What every (re)connect reports. Only the loop reads or writes them, so the loop never waits
  // for a gRPC thread to copy them (takeSnapshot hands a copy over instead).
  BridgeMirror mirror_;
  std::optional<int64_t> drainingDeadline_;
  std::thread sessionThread_;
  grpc::CompletionQueue cq_;
  std::thread completionThread_;

  // The unary calls in flight, for stop() to cancel.
  std::mutex callsMutex_;
  std::condition_variable callsWake_;  // the CompletionQueue thread waits here with no call out
  bool callsClosed_ = false;
  std::unordered_set<PendingCall*> calls_;

  // Shared between the loop and the session threads, under mutex_.
  std::mutex mutex_;
  std::condition_variable wake_;    // the writer and the backoff wait
  std::condition_variable exited_;  // stop() waits on it for the session thread
  bool stopping_ = false;
  bool sessionExited_ = false;
  UsageTally usage_;
  int64_t intervalStartUnixMs_ = 0;
  // The hand-over of a snapshot (control_session.cc, runSession): the session thread bumps
  // snapshotRequest_ and posts takeSnapshot to the loop; the loop fills the two fields below for
  // that request only (a stale one, from an attempt that gave up, is dropped).
  uint64_t snapshotRequest_ = 0;
  std::optional<std::vector<v1::RelayMessage>> snapshotParts_;
  bool helloDraining_ = false;
  // A stream's snapshot was taken: deltas, Draining and acks are queued in outbox_ for it.
  bool streamUp_ = false;
  bool streamEnded_ = false;  // the reader saw the stream end: the writer stops
  bool accepted_ = false;     // SessionAccepted read on the current stream
  // The current stream's controld answers AuthorizeBatch (SessionAccepted.authorize_on_session).
  bool authorizeOnSession_ = false;
  // The current stream's controld reads RelayBatch (SessionAccepted.accepts_batches).
  bool acceptsBatches_ = false;
  uint64_t streamGeneration_ = 0;  // grows with every stream whose outbox takeSnapshot opened
  std::deque<v1::RelayMessage> outbox_;
  grpc::ClientContext* context_ = nullptr;  // the current stream's, for TryCancel

  // Session thread only: the backoff's jitter, seeded so that relays restarted together differ.
  std::mt19937_64 random_{
      options_.epoch ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
};

}  // namespace ot::relayd
