#include "relayd/inbound_connection.h"

#include <unistd.h>

#include <algorithm>
#include <new>
#include <utility>
#include <vector>

#include "common/bridge_control.h"
#include "common/log.h"
#include "relayd/api_connection.h"
#include "relayd/listener.h"
#include "relayd/relay.h"
#include "relayd/sni_route.h"

namespace ot::relayd {

namespace {
const log::Logger kInboundConnectionLog("relayd.accept");
constexpr uint64_t kInboundHelloTimeoutMs = 10'000;

bool offersBridgeAlpn(const ClientHelloInfo& info) {
  return std::find(info.alpn.begin(), info.alpn.end(), bridge::kBridgeAlpn) != info.alpn.end();
}
}  // namespace

void InboundConnection::accept(RelayContext& context, Relay& relay, int fd, PeerEndpoint peer) {
  if (context.openConnections >= context.maxConnections) {
    context.metrics.shedConnections.Increment();
    ::close(fd);
    return;
  }
  // TCP_NODELAY and keepalive come from the listener (tuneSocket in Listener::open).
  auto* connection = new InboundConnection(context, relay);
  connection->stream_ = TcpStream::adopt(context, fd, connection);
  if (connection->stream_ == nullptr) {
    delete connection;
    return;
  }
  ++context.openConnections;
  connection->stream_->setPeer(std::move(peer));
  connection->acceptedAtMs_ = context.nowMs();
  context.wheel.schedule(connection->timer_, context.nowMs(), kInboundHelloTimeoutMs);
  // In a storm the ClientHello is in by now (the loop is working through a backlog): read it at
  // once. A connection routed, or turned away, on it never has libuv watch it here: that is an
  // epoll_ctl and a wake-up fewer for each one relayd sheds (docs/capacity.md, "What a shed
  // costs"). On a quiet relay the hello is often not there yet: one recv that finds nothing.
  if (connection->stream_->readNow() && connection->done_) return;
  connection->stream_->startReading();
}

void InboundConnection::adoptDialed(RelayContext& context, Relay& relay, TcpStream* stream,
                                    uint64_t dialId) {
  if (context.openConnections >= context.maxConnections) {
    context.metrics.shedConnections.Increment();
    stream->setHandler(nullptr);
    stream->close(true);
    relay.directDialEnded(dialId);
    return;
  }
  auto* connection = new (std::nothrow) InboundConnection(context, relay);
  if (connection == nullptr) {
    stream->setHandler(nullptr);
    stream->close(true);
    relay.directDialEnded(dialId);
    return;
  }
  connection->proxy_.reset();  // our own connection: no PROXY header
  connection->dialId_ = dialId;
  connection->stream_ = stream;
  stream->setHandler(connection);
  ++context.openConnections;
  stream->setNoDelay(true);  // as an accepted one inherits from the listener
  stream->setKeepAlive(60);
  connection->acceptedAtMs_ = context.nowMs();
  context.wheel.schedule(connection->timer_, context.nowMs(), kInboundHelloTimeoutMs);
  stream->startReading();
}

InboundConnection::InboundConnection(RelayContext& context, Relay& relay)
    : context_(context), relay_(relay), timer_(&InboundConnection::onTimer, this) {
  if (context_.config.proxyProtocol) proxy_.emplace();
}

void InboundConnection::onRead(std::span<const uint8_t> bytes) {
  if (done_) return;
  if (proxy_) {
    const ProxyReadResult result = proxy_->feed(bytes);
    if (result.status == ProxyStatus::kNeedMore) return;
    if (result.status == ProxyStatus::kError) {
      kInboundConnectionLog.debug("bad PROXY header", {{"error", proxyErrorName(result.error)}});
      reject(VisitorOutcome::kRejectedBadHello);
      return;
    }
    if (result.header.addresses)
      stream_->setPeer(PeerEndpoint::fromProxy(result.header.addresses->source));
    proxy_.reset();
    bytes = bytes.subspan(result.consumed);
    if (bytes.empty()) return;
  }
  feedHello(bytes);
}

void InboundConnection::feedHello(std::span<const uint8_t> bytes) {
  const ClientHelloResult& result = hello_.feed(bytes);
  if (result.status == ClientHelloStatus::kNeedMore) return;
  if (result.status == ClientHelloStatus::kError) {
    reject(VisitorOutcome::kRejectedBadHello);
    return;
  }
  route();
}

void InboundConnection::route() {
  const ClientHelloInfo& info = hello_.result().info;
  SniTarget target;
  if (info.sni == SniStatus::kValid) target = classifySni(info.serverName, context_.config.domain);
  if (dialId_ != 0 && target.kind != SniTarget::Kind::kApi) {
    // A connection we dialed carries a bridge to the API domain, never a visitor.
    reject(VisitorOutcome::kRejectedBadHello);
    return;
  }
  std::vector<uint8_t> buffered = hello_.takeBuffered();  // `info` stays valid: it is apart
  switch (target.kind) {
    case SniTarget::Kind::kApi: {
      if (context_.draining && offersBridgeAlpn(info)) {
        // A bridge would only be told to go after a handshake, an upgrade and an attach: reset
        // now (as a shed: no FIN exchange, no TIME_WAIT), which otunnel reads as "restarting"
        // and retries soon (elsewhere, or here anew).
        context_.metrics.shedDrainingBridges.Increment();
        done_ = true;
        timer_.cancel();
        stream_->close(true);  // onClosed frees us
        return;
      }
      TcpStream* stream = stream_;
      const uint64_t dialId = dialId_;
      dialId_ = 0;  // the ApiConnection reports the dial's end from here on
      handOff();
      ApiConnection::start(context_, relay_, stream, std::move(buffered), acceptedAtMs_, dialId);
      return;
    }
    case SniTarget::Kind::kTunnel: {
      TcpStream* stream = stream_;
      handOff();
      relay_.routeVisitor(stream, target, std::move(buffered));
      return;
    }
    case SniTarget::Kind::kOther:
      reject(info.sni == SniStatus::kValid ? VisitorOutcome::kRejectedUnknownTunnel
                                           : VisitorOutcome::kRejectedBadHello);
      return;
  }
}

void InboundConnection::handOff() {
  done_ = true;
  timer_.cancel();
  stream_->stopReading();
  stream_->setHandler(nullptr);
  stream_ = nullptr;
  context_.deferDelete(this);
}

void InboundConnection::reject(VisitorOutcome outcome) {
  if (done_) return;
  done_ = true;
  timer_.cancel();
  context_.metrics.visitor(outcome);
  stream_->close(false);  // onClosed frees us
}

void InboundConnection::onTimer(TimerEntry*, void* owner) {
  auto* self = static_cast<InboundConnection*>(owner);
  self->reject(VisitorOutcome::kRejectedTimeout);
}

void InboundConnection::onEof() {
  reject(VisitorOutcome::kRejectedBadHello);
}

void InboundConnection::onStreamError(int) {
  if (done_) return;
  done_ = true;
  timer_.cancel();
  context_.metrics.visitor(VisitorOutcome::kError);
  stream_->close(true);
}

void InboundConnection::onWritten(size_t) {}

void InboundConnection::onClosed() {
  if (context_.openConnections > 0) --context_.openConnections;
  if (dialId_ != 0) relay_.directDialEnded(dialId_);
  delete this;
}

}  // namespace ot::relayd
