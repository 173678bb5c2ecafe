#include "relayd/forward_splice.h"

#include <uv.h>

namespace ot::relayd {

ForwardSplice* ForwardSplice::start(RelayContext& context, TcpStream* visitor, TcpStream* holder,
                                    std::span<const uint8_t> toVisitor, WriteBacklogMarks marks) {
  auto* splice = new ForwardSplice(context, marks);
  // A forwarded visitor is open here too (the reference's gauge counts it on both machines).
  context.metrics.visitorConnectionsOpen.Increment();
  splice->visitor_.stream = visitor;
  splice->holder_.stream = holder;
  visitor->setHandler(&splice->visitor_);
  holder->setHandler(&splice->holder_);
  splice->touch();
  splice->armTimer();
  if (!toVisitor.empty()) splice->forward(splice->holder_, toVisitor);
  if (!splice->holder_.heldForOther) (void)holder->startReading();
  (void)visitor->startReading();
  return splice;
}

ForwardSplice::ForwardSplice(RelayContext& context, WriteBacklogMarks marks)
    : context_(context),
      marks_(marks),
      visitor_(*this),
      holder_(*this),
      timer_(&ForwardSplice::onTimer, this) {
  visitor_.other = &holder_;
  holder_.other = &visitor_;
}

void ForwardSplice::forward(Side& from, std::span<const uint8_t> bytes) {
  touch();
  from.bytesRead += bytes.size();
  TcpStream* to = from.other->stream;
  if (to == nullptr || to->closing()) return;
  (void)to->writeCopy(bytes);
  if (to->queuedBytes() > marks_.high && !from.heldForOther) {
    from.heldForOther = true;
    if (from.stream != nullptr) from.stream->stopReading();
  }
}

void ForwardSplice::Side::onRead(std::span<const uint8_t> bytes) {
  owner.forward(*this, bytes);
}

void ForwardSplice::Side::onWritten(size_t) {
  owner.touch();
  // Our queue went down: the side that writes into it may be read again at the low mark.
  if (other->heldForOther && stream != nullptr && stream->queuedBytes() <= owner.marks_.low) {
    other->heldForOther = false;
    if (other->stream != nullptr && !other->ended) (void)other->stream->startReading();
  }
}

void ForwardSplice::Side::onEof() {
  if (ended) return;
  ended = true;
  owner.touch();
  if (stream != nullptr) stream->stopReading();
  // The FIN goes out once what was queued toward the other side is written.
  if (other->stream != nullptr && other->stream->shutdownWrite() != 0) {
    owner.resetBoth();
    return;
  }
  owner.armTimer();  // now the half-close timeout
}

void ForwardSplice::Side::onShutdownDone(int status) {
  if (status != 0) {
    owner.resetBoth();
    return;
  }
  finSent = true;
  owner.closeIfComplete();
}

void ForwardSplice::Side::onStreamError(int) {
  owner.resetBoth();
}

void ForwardSplice::closeIfComplete() {
  // Both directions ended and both FINs out: the connection is complete on both sides.
  if (!(visitor_.ended && holder_.ended && visitor_.finSent && holder_.finSent)) return;
  timer_.cancel();
  if (visitor_.stream != nullptr) visitor_.stream->close(false);
  if (holder_.stream != nullptr) holder_.stream->close(false);
}

void ForwardSplice::resetBoth() {
  if (resetting_) return;
  resetting_ = true;
  timer_.cancel();
  if (visitor_.stream != nullptr) visitor_.stream->close(true);
  if (holder_.stream != nullptr) holder_.stream->close(true);
}

void ForwardSplice::Side::onClosed() {
  stream = nullptr;
  ForwardSplice& splice = owner;
  if (this == &splice.visitor_) splice.context_.metrics.visitorConnectionsOpen.Decrement();
  if (this == &splice.visitor_ && splice.countsOpenConnection_) {
    splice.countsOpenConnection_ = false;
    if (splice.context_.openConnections > 0) --splice.context_.openConnections;
  }
  if (other->stream != nullptr) {
    // One side went away on its own (a close we did not ask for): the other is reset. After a
    // complete exchange both are already closing and this changes nothing.
    if (!other->stream->closing()) splice.resetBoth();
    return;
  }
  delete &splice;  // the close callback is a top-level loop callback; the stream is freed after
}

void ForwardSplice::armTimer() {
  const bool halfClosed = visitor_.ended || holder_.ended;
  const uint64_t limit =
      halfClosed ? context_.config.halfCloseTimeoutMs : context_.config.connectionIdleTimeoutMs;
  const uint64_t now = context_.nowMs();
  const uint64_t due = lastActivityMs_ + limit;
  context_.wheel.schedule(timer_, now, due > now ? due - now : 0);
}

void ForwardSplice::onTimer(TimerEntry*, void* owner) {
  auto* self = static_cast<ForwardSplice*>(owner);
  const bool halfClosed = self->visitor_.ended || self->holder_.ended;
  const uint64_t limit = halfClosed ? self->context_.config.halfCloseTimeoutMs
                                    : self->context_.config.connectionIdleTimeoutMs;
  if (self->context_.nowMs() < self->lastActivityMs_ + limit) {
    self->armTimer();  // traffic since it was armed: check again later
    return;
  }
  self->resetBoth();
}

}  // namespace ot::relayd
