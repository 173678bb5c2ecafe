// Attach authorization, the loop side of ControlClient. When controld offered it
// (SessionAccepted.authorize_on_session) a request rides the Session stream: it gets an ID, is
// queued to the stream's outbox (requests queued while the writer is busy join one
// AuthorizeBatch, so a burst of attaches costs one write), and its answer comes back in an
// AuthorizeAnswers message read by the session thread. No gRPC call is made per attach (no
// HTTP/2 stream, headers, trailers, deadline timer or CompletionQueue hop), which was most of
// relayd's control-plane CPU per attach.
//
// What the unary call gave, kept: the deadline (callTimeoutMs, one loop timer for all requests,
// answered kTimeout), an error when controld is away (the stream ended: every request it carried
// is answered kUnavailable at once, never left waiting), and the same request and answer
// messages. With a controld that did not offer it, the unary AuthorizeAttach is made as before.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "relayd/control_client_impl.h"

namespace ot::relayd {

void ControlClient::authorizeAttach(v1::AuthorizeAttachRequest request, AuthorizeDone done) {
  Impl& impl = *impl_;
  if (impl.stopped_) return;
  const uint64_t id = impl.nextCallId_++;
  if (impl.authorizeOnSession(id, request, done)) return;
  impl.authorizeUnary(id, std::move(request), std::move(done));
}

bool ControlClient::Impl::authorizeOnSession(uint64_t id, v1::AuthorizeAttachRequest& request,
                                             AuthorizeDone& done) {
  uint64_t stream = 0;
  {
    std::lock_guard lock(mutex_);
    if (!streamUp_ || !accepted_ || !authorizeOnSession_) return false;
    stream = streamGeneration_;
    releaseDeltasLocked();  // the deltas reported before it go first, in the same writer wakeup
    // Joins the batch at the back of the outbox when there is one (the writer has not taken it
    // yet); a delta queued in between starts a new one, so the order of messages is kept.
    if (!outbox_.empty() && outbox_.back().kind_case() == v1::RelayMessage::kAuthorize) {
      v1::AuthorizeItem* item = outbox_.back().mutable_authorize()->add_requests();
      item->set_request_id(id);
      *item->mutable_request() = std::move(request);
    } else {
      v1::RelayMessage message;
      v1::AuthorizeItem* item = message.mutable_authorize()->add_requests();
      item->set_request_id(id);
      *item->mutable_request() = std::move(request);
      // An overflow here cancels the stream; its end fails this request with the others.
      queueLocked(std::move(message));
    }
  }
  authorizeDone_.emplace(id, PendingAuthorize{std::move(done), stream});
  const bool first = authorizeDeadlines_.empty();
  authorizeDeadlines_.emplace_back(uv_now(loop_) + options_.callTimeoutMs, id);
  if (first) armAuthorizeTimer();
  return true;
}

void ControlClient::Impl::deliverAnswers(const v1::AuthorizeAnswers& answers) {
  for (const v1::AuthorizeAnswer& answer : answers.answers()) {
    // An answer after the deadline (or after the stream that carried it ended) finds nothing:
    // the attach was already decided from the cache.
    auto it = authorizeDone_.find(answer.request_id());
    if (it == authorizeDone_.end() || it->second.stream == 0) continue;
    finishAuthorize(answer.request_id(), answer.response());
    if (stopped_) return;
  }
}

void ControlClient::Impl::failAuthorizations(uint64_t stream) {
  std::vector<uint64_t> ids;
  for (const auto& [id, pending] : authorizeDone_) {
    if (pending.stream != 0 && pending.stream <= stream) ids.push_back(id);
  }
  // In the order they were made, so attaches are decided in the order they asked.
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    finishAuthorize(
        id, Error{ErrorKind::kUnavailable, "the control session ended before controld answered"});
    if (stopped_) return;
  }
}

void ControlClient::Impl::expireAuthorizations() {
  const uint64_t now = uv_now(loop_);
  while (!authorizeDeadlines_.empty() && authorizeDeadlines_.front().first <= now) {
    const uint64_t id = authorizeDeadlines_.front().second;
    authorizeDeadlines_.pop_front();
    auto it = authorizeDone_.find(id);
    if (it == authorizeDone_.end()) continue;  // answered meanwhile
    finishAuthorize(id,
                    Error{ErrorKind::kTimeout, "controld did not answer the attach within " +
                                                   std::to_string(options_.callTimeoutMs) + " ms"});
    if (stopped_) return;
  }
  armAuthorizeTimer();
}

void ControlClient::Impl::armAuthorizeTimer() {
  // Entries already answered are dropped here, so the timer only wakes for a request that waits.
  while (!authorizeDeadlines_.empty() &&
         authorizeDone_.count(authorizeDeadlines_.front().second) == 0) {
    authorizeDeadlines_.pop_front();
  }
  if (authorizeDeadlines_.empty() || stopped_) {
    uv_timer_stop(&authorizeTimer_);
    return;
  }
  const uint64_t now = uv_now(loop_);
  const uint64_t due = authorizeDeadlines_.front().first;
  uv_timer_start(
      &authorizeTimer_,
      [](uv_timer_t* handle) { static_cast<Impl*>(handle->data)->expireAuthorizations(); },
      due > now ? due - now : 0, 0);
}

}  // namespace ot::relayd
