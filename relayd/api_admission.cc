#include "relayd/api_admission.h"

#include <new>
#include <string>
#include <utility>

#include "common/log.h"
#include "common/log_throttle.h"
#include "relayd/api_connection.h"
#include "relayd/relay.h"
#include "relayd/relay_context.h"
#include "relayd/source_counts.h"

namespace ot::relayd {

namespace {

const log::Logger kApiAdmissionLog("relayd.api");

constexpr uint64_t kShedLogEveryMs = 10'000;

// A connection closed before an ApiConnection took it: it stops counting as open here. A shed
// one is reset, not closed: a storm sheds several for every bridge it brings back, and a reset
// leaves no FIN exchange and no TIME_WAIT socket (docs/capacity.md, "Storm"). otunnel reads a reset
// before the handshake as it reads an EOF there: busy, come back soon (client::classifyAttemptEnd).
enum class Unserved : uint8_t { kClose, kShed };
void closeUnserved(RelayContext& context, TcpStream* stream, Unserved how = Unserved::kClose) {
  if (context.openConnections > 0) --context.openConnections;
  stream->setHandler(nullptr);
  stream->close(how == Unserved::kShed);
}

void countShed(RelayContext& context, const char* why) {
  context.metrics.shedHandshakes.Increment();
  static LogThrottle throttle(kShedLogEveryMs);
  if (uint64_t suppressed = 0; throttle.allow(context.nowMs(), suppressed)) {
    kApiAdmissionLog.warn("API connection shed before its TLS handshake",
                          {{"reason", why},
                           {"in_progress", context.apiHandshakes.inProgress()},
                           {"waiting", context.apiHandshakes.waiting()},
                           {"suppressed", suppressed}});
  }
}

// A connection waiting for a handshake slot: its stream's handler until it gets one (then an
// ApiConnection takes the stream), is shed, or the stream goes. The stream does not read while it
// waits: a TLS client sends nothing more before our ServerHello.
class QueuedApiConnection final : public TcpStream::Handler, public HandshakeSlots::Waiter {
 public:
  QueuedApiConnection(RelayContext& context, Relay& relay, TcpStream* stream,
                      std::vector<uint8_t> hello, uint64_t startedAtMs, SourceSlot sourceSlot,
                      std::string source, uint64_t dialId)
      : context_(context),
        relay_(relay),
        stream_(stream),
        hello_(std::move(hello)),
        startedAtMs_(startedAtMs),
        sourceSlot_(std::move(sourceSlot)),
        source_(std::move(source)),
        dialId_(dialId) {
    stream_->setHandler(this);
  }
  ~QueuedApiConnection() = default;

  // HandshakeSlots::Waiter
  void onSlot() override {
    TcpStream* stream = std::exchange(stream_, nullptr);
    ApiConnection::begin(context_, relay_, stream, std::move(hello_), startedAtMs_,
                         std::move(sourceSlot_), std::move(source_), dialId_);
    delete this;
  }
  void onShed() override {
    countShed(context_, "no handshake slot within the wait");
    closeUnserved(context_, std::exchange(stream_, nullptr), Unserved::kShed);
    delete this;
  }

  // TcpStream::Handler (not reading: only a close or a failed write can arrive)
  void onRead(std::span<const uint8_t>) override {}
  void onEof() override { stream_->close(false); }
  void onStreamError(int) override { stream_->close(true); }
  void onWritten(size_t) override {}
  void onClosed() override {
    // Closed while waiting (shutdown resets every stream): leave the queue, stop counting it.
    if (context_.openConnections > 0) --context_.openConnections;
    delete this;  // ~Waiter leaves the queue
  }

 private:
  RelayContext& context_;
  Relay& relay_;
  TcpStream* stream_;
  std::vector<uint8_t> hello_;
  uint64_t startedAtMs_;
  SourceSlot sourceSlot_;
  std::string source_;
  uint64_t dialId_;
};

}  // namespace

void admitApiConnection(RelayContext& context, Relay& relay, TcpStream* stream,
                        std::vector<uint8_t> hello, uint64_t startedAtMs, uint64_t dialId) {
  if (!relay.apiContext()) {
    // No certificate for the API domain yet: TLS to the domain fails while tunnels work.
    context.metrics.apiHandshakeFailed.Increment();
    closeUnserved(context, stream);
    return;
  }
  // The source's share first: one address cannot fill the slots, nor the queue for them.
  const std::string source = peerSourceKey(stream->peerAddress());
  SourceSlot sourceSlot;
  if (!source.empty()) {
    const uint64_t limit = context.apiHandshakes.limits().slots / 8;
    sourceSlot = SourceSlot::acquire(context.apiHandshakesBySource, source, limit);
    if (!sourceSlot.held()) {
      context.metrics.shedSourceHandshakes.Increment();
      static LogThrottle throttle(kShedLogEveryMs);
      if (uint64_t suppressed = 0; throttle.allow(context.nowMs(), suppressed)) {
        kApiAdmissionLog.warn(
            "API handshake refused: the source holds its share of handshake slots",
            {{"source", source}, {"limit", limit}, {"suppressed", suppressed}});
      }
      closeUnserved(context, stream, Unserved::kShed);
      return;
    }
  }
  if (context.apiHandshakes.tryTake()) {
    ApiConnection::begin(context, relay, stream, std::move(hello), startedAtMs,
                         std::move(sourceSlot), source, dialId);
    return;
  }
  auto* waiter = new (std::nothrow) QueuedApiConnection(
      context, relay, stream, std::move(hello), startedAtMs, std::move(sourceSlot), source, dialId);
  if (waiter == nullptr) {
    closeUnserved(context, stream);
    return;
  }
  switch (context.apiHandshakes.admit(*waiter)) {
    case HandshakeSlots::Admission::kSlot:  // not after tryTake() failed; handled all the same
      waiter->onSlot();                     // begins the handshake now and frees the waiter
      return;
    case HandshakeSlots::Admission::kQueued:
      if (log::enabled(log::Level::kDebug)) {
        kApiAdmissionLog.debug("API connection waits for a handshake slot",
                               {{"waiting", context.apiHandshakes.waiting()}});
      }
      return;
    case HandshakeSlots::Admission::kShed:
      countShed(context, "the handshake queue is full");
      closeUnserved(context, stream, Unserved::kShed);
      delete waiter;
      return;
  }
}

}  // namespace ot::relayd
