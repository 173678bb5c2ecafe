#include "relayd/forwarded_visitor.h"

#include <unistd.h>

#include <string>
#include <utility>

#include "common/log.h"
#include "relayd/listener.h"
#include "relayd/mesh_forwarder.h"

namespace ot::relayd {

namespace {
const log::Logger kForwardedVisitorLog("relayd.forward");
constexpr uint64_t kHelloTimeoutMs = 10'000;
}  // namespace

void ForwardedVisitor::start(RelayContext& context, ForwardedVisitorRouter& router, int fd,
                             const mesh::ForwardHeader& header, std::span<const uint8_t> rest) {
  // TCP_NODELAY and keepalive come from the internal listener (tuneSocket in Listener::open).
  auto* visitor = new ForwardedVisitor(context, router, header);
  visitor->stream_ = TcpStream::adopt(context, fd, visitor);
  if (visitor->stream_ == nullptr) {
    delete visitor;
    return;
  }
  // Counted like an accepted public visitor: the visitor stream gives it back when it closes.
  ++context.openConnections;
  // The real visitor's address, as the sender saw it: per-source limits and the `open` message.
  if (const auto address = parseSocketAddress(header.visitorAddress)) {
    visitor->stream_->setPeer(PeerEndpoint::fromSocket(*address));
  } else {
    visitor->stream_->setPeer(PeerEndpoint{});
  }
  context.wheel.schedule(visitor->timer_, context.nowMs(), kHelloTimeoutMs);
  if (!rest.empty()) {
    visitor->onRead(rest);
    if (visitor->done_) return;
  }
  (void)visitor->stream_->startReading();
}

ForwardedVisitor::ForwardedVisitor(RelayContext& context, ForwardedVisitorRouter& router,
                                   const mesh::ForwardHeader& header)
    : context_(context),
      router_(router),
      header_(header),
      timer_(&ForwardedVisitor::onTimer, this) {}

void ForwardedVisitor::onRead(std::span<const uint8_t> bytes) {
  if (done_) return;
  const ClientHelloResult& result = hello_.feed(bytes);
  if (result.status == ClientHelloStatus::kNeedMore) return;
  if (result.status == ClientHelloStatus::kError) {
    close(VisitorOutcome::kRejectedBadHello, false);
    return;
  }
  route();
}

void ForwardedVisitor::route() {
  const ClientHelloInfo& info = hello_.result().info;
  SniTarget target;
  if (info.sni == SniStatus::kValid) target = classifySni(info.serverName, context_.config.domain);
  if (target.kind != SniTarget::Kind::kTunnel || target.tunnelId != header_.tunnelId ||
      target.route != header_.route) {
    // Signed for one tunnel, carrying another's visitor: never routed.
    kForwardedVisitorLog.info("forward refused: its ClientHello names another tunnel or route",
                              {{"tunnel", header_.tunnelId}, {"sender", header_.envelope.sender}});
    context_.metrics.registry
        .counter("opentunnel_mesh_internal_refused_total",
                 "Connections closed unserved on the internal listener, by reason.",
                 {{"reason", std::string(kForwardHelloMismatch)}})
        .Increment();
    close(VisitorOutcome::kRejectedBadHello, false);
    return;
  }
  done_ = true;
  timer_.cancel();
  TcpStream* stream = stream_;
  stream->stopReading();
  std::vector<uint8_t> buffered(hello_.buffered().begin(), hello_.buffered().end());
  // `1\n` goes out whole at once (a fresh socket's send buffer is empty), so it reaches the
  // sender before any byte of the stream and is never reported to the stream's handler.
  const auto accept = [stream] {
    static constexpr uint8_t kYes[] = {'1', '\n'};
    return stream->writeCopy(std::span<const uint8_t>(kYes)) == sizeof kYes;
  };
  stream->setHandler(nullptr);
  stream_ = nullptr;
  const ForwardedRoute routed =
      router_.routeForwarded(stream, target, std::move(buffered), accept, header_.origin);
  if (routed == ForwardedRoute::kNoBridge) {
    // Ours again, to say no.
    stream_ = stream;
    stream->setHandler(this);
    answerNoBridge();
    return;
  }
  context_.deferDelete(this);
}

void ForwardedVisitor::answerNoBridge() {
  static constexpr uint8_t kNo[] = {'0', '\n'};
  (void)stream_->writeCopy(std::span<const uint8_t>(kNo));
  stream_->close(false);  // after the answer: queued writes go out before the FIN
}

void ForwardedVisitor::close(VisitorOutcome outcome, bool reset) {
  if (done_) return;
  done_ = true;
  timer_.cancel();
  context_.metrics.visitor(outcome);
  stream_->close(reset);  // onClosed frees us
}

void ForwardedVisitor::onTimer(TimerEntry*, void* owner) {
  static_cast<ForwardedVisitor*>(owner)->close(VisitorOutcome::kRejectedTimeout, false);
}

void ForwardedVisitor::onEof() {
  close(VisitorOutcome::kRejectedBadHello, false);
}

void ForwardedVisitor::onStreamError(int) {
  close(VisitorOutcome::kError, true);
}

void ForwardedVisitor::onWritten(size_t) {}

void ForwardedVisitor::onClosed() {
  if (context_.openConnections > 0) --context_.openConnections;
  delete this;
}

}  // namespace ot::relayd
