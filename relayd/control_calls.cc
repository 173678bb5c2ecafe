// ControlClient's unary calls (FetchTunnel, and AuthorizeAttach for a controld that does not
// authorize on the session) on gRPC's async API with one CompletionQueue thread of the client's
// own.
//
// Why not the callback API (stub->async()): with Debian's gRPC 1.51 its completions run on a
// process-wide thread pool, and a completion that drops the last reference to the channel (its
// ClientContext holds one) destroys that pool from one of its own threads, which aborts the
// process. With our own queue, stop() cancels the calls and joins the thread before the channel can
// go away, and the channel is freed on the loop thread.
#include <chrono>
#include <utility>

#include "relayd/control_client_impl.h"

namespace ot::relayd {
namespace {

Error errorFromStatus(const grpc::Status& status, const char* call) {
  const ErrorKind kind = status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                             ? ErrorKind::kTimeout
                             : ErrorKind::kUnavailable;
  return Error{kind, std::string(call) + " failed (grpc status " +
                         std::to_string(static_cast<int>(status.error_code())) +
                         "): " + status.error_message()};
}

// One call's response and how its result reaches the loop.
template <typename Response>
struct UnaryCall final : PendingCall {
  using Deliver = std::function<void(Result<Response>)>;  // runs on the loop

  UnaryCall(LoopInbox& inboxRef, const char* callName, Deliver deliverOnLoop)
      : inbox(inboxRef), name(callName), deliver(std::move(deliverOnLoop)) {}

  void complete() override {
    Result<Response> result = status.ok() ? Result<Response>(std::move(response))
                                          : Result<Response>(errorFromStatus(status, name));
    inbox.post([deliverOnLoop = std::move(deliver), result = std::move(result)]() mutable {
      deliverOnLoop(std::move(result));
    });
  }

  LoopInbox& inbox;
  const char* name;
  Deliver deliver;
  Response response;
  std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader;
};

}  // namespace

bool ControlClient::Impl::startCall(PendingCall* call) {
  call->context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::milliseconds(options_.callTimeoutMs));
  call->context.set_wait_for_ready(false);  // a controld that is down fails the call at once
  std::lock_guard lock(callsMutex_);
  if (callsClosed_ || !completionThread_.joinable()) {
    delete call;
    return false;
  }
  calls_.insert(call);
  if (calls_.size() == 1) callsWake_.notify_one();
  return true;
}

void ControlClient::Impl::completionLoop() {
  // A thread in Next() takes turns with the session's reader as gRPC's poller of the channel's
  // socket; when it is the one woken for a read meant for the session stream, it has to hand that
  // read over to the reader: one more thread hop per controld answer. So it waits in Next() only
  // while a call of its own is in flight, and otherwise sleeps on callsWake_ (a controld that
  // authorizes on the session leaves it asleep).
  void* tag = nullptr;
  bool ok = false;
  for (;;) {
    {
      std::unique_lock lock(callsMutex_);
      callsWake_.wait(lock, [this] { return callsClosed_ || !calls_.empty(); });
    }
    // Once closed with nothing in flight, Next() returns false when cancelCalls() shuts down.
    if (!cq_.Next(&tag, &ok)) break;
    auto* call = static_cast<PendingCall*>(tag);
    {
      std::lock_guard lock(callsMutex_);
      calls_.erase(call);
    }
    call->complete();  // a unary Finish always completes with its status set, whatever `ok` says
    delete call;
  }
}

void ControlClient::Impl::cancelCalls() {
  {
    std::lock_guard lock(callsMutex_);
    if (callsClosed_) return;
    callsClosed_ = true;
    // Under the lock: the completion thread erases a call before it deletes it.
    for (PendingCall* call : calls_) call->context.TryCancel();
    callsWake_.notify_one();
  }
  cq_.Shutdown();  // the cancelled calls still complete; then Next() returns false
  if (completionThread_.joinable()) completionThread_.join();
}

void ControlClient::Impl::authorizeUnary(uint64_t id, v1::AuthorizeAttachRequest request,
                                         AuthorizeDone done) {
  auto* call = new UnaryCall<v1::AuthorizeAttachResponse>(
      inbox_, "AuthorizeAttach", [self = this, id](Result<v1::AuthorizeAttachResponse> r) {
        self->finishAuthorize(id, std::move(r));
      });
  if (!startCall(call)) {
    inbox_.post([done = std::move(done)] {
      if (done) done(Error{ErrorKind::kInternal, "the control client cannot make calls"});
    });
    return;
  }
  authorizeDone_.emplace(id, PendingAuthorize{std::move(done), 0});
  call->reader = stub_->AsyncAuthorizeAttach(&call->context, request, &cq_);
  call->reader->Finish(&call->response, &call->status, call);
}

void ControlClient::fetchTunnel(const std::string& tunnelId, FetchDone done) {
  Impl& impl = *impl_;
  if (impl.stopped_) return;
  const uint64_t id = impl.nextCallId_++;
  auto* call = new UnaryCall<v1::FetchTunnelResponse>(
      impl.inbox_, "FetchTunnel", [self = &impl, id](Result<v1::FetchTunnelResponse> r) {
        self->finishFetch(id, std::move(r));
      });
  if (!impl.startCall(call)) {
    impl.inbox_.post([done = std::move(done)] {
      if (done) done(Error{ErrorKind::kInternal, "the control client cannot make calls"});
    });
    return;
  }
  impl.fetchDone_.emplace(id, std::move(done));
  v1::FetchTunnelRequest request;
  request.set_tunnel_id(tunnelId);
  call->reader = impl.stub_->AsyncFetchTunnel(&call->context, request, &impl.cq_);
  call->reader->Finish(&call->response, &call->status, call);
}

}  // namespace ot::relayd
