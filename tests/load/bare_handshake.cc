#include "tests/load/bare_handshake.h"

#include <array>
#include <cstdio>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "common/tls_sessions.h"
#include "common/tls_stream.h"
#include "tests/load/loop_buffers.h"
#include "tests/load/owned_write.h"

namespace ot::load {
namespace {

struct Run {
  uv_loop_t* loop;
  sockaddr_in target;
  std::string serverName;
  tls::SslCtxPtr context;
  uint64_t count;
  unsigned concurrency;
  bool priming;  // the first connection waits for a ticket and is not counted
  uint64_t started = 0;
  BareHandshakeRun result;
  std::function<void(const BareHandshakeRun&)> done;
  void next();
  void primed(bool ok) {
    priming = false;
    if (!ok) {
      std::fprintf(stderr, "the priming handshake got no session ticket\n");
      result.failed = count;
      auto callback = std::move(done);
      const BareHandshakeRun outcome = result;
      delete this;
      callback(outcome);
      return;
    }
    for (unsigned i = 0; i < concurrency && i < count; ++i) next();
  }
  void finished(bool ok, bool resumed) {
    ++(ok ? result.completed : result.failed);
    if (ok && resumed) ++result.resumed;
    if (result.completed + result.failed == count) {
      auto callback = std::move(done);
      const BareHandshakeRun outcome = result;
      delete this;
      callback(outcome);
      return;
    }
    next();
  }
};

class Handshake final : private tls::TlsStream::Owner {
 public:
  Handshake(Run& run, bool priming) : run_(run), priming_(priming) {
    tcp_.data = this;
    connect_.data = this;
  }

  void start() {
    uv_tcp_init(run_.loop, &tcp_);
    if (uv_tcp_connect(&connect_, &tcp_, reinterpret_cast<const sockaddr*>(&run_.target),
                       onConnect) != 0)
      finish(false);
  }

 private:
  static void onConnect(uv_connect_t* req, int status) {
    auto* self = static_cast<Handshake*>(req->data);
    if (self->closing_) return;
    if (status != 0) {
      self->finish(false);
      return;
    }
    uv_tcp_nodelay(&self->tcp_, 1);
    self->tls_ = std::make_unique<tls::TlsStream>(
        tls::TlsEngine::client(self->run_.context, self->run_.serverName, true),
        static_cast<tls::TlsStream::Owner&>(*self), loopPlaintextBuffer());
    if (startReading(reinterpret_cast<uv_stream_t*>(&self->tcp_), onRead) != 0 ||
        !self->tls_->valid() || !self->tls_->startHandshake())
      self->finish(false);
  }

  static void onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
    auto* self = static_cast<Handshake*>(stream->data);
    if (self->closing_ || nread == 0) return;
    if (nread < 0) {
      self->finish(false);
      return;
    }
    self->tls_->receive(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(buf->base), size_t(nread)));
    if (self->priming_ && !self->closing_ && self->tls_->handshakeDone() && self->ticketHeld())
      self->finish(true);
  }

  bool sendCiphertext(std::vector<uint8_t> bytes) override {
    if (closing_) return false;
    return writeOwned(reinterpret_cast<uv_stream_t*>(&tcp_), std::move(bytes));
  }
  void onTlsHandshakeDone() override {
    if (!priming_ || ticketHeld()) finish(true);
  }
  // Reading (nothing comes but the ticket) is what makes the engine take the server's ticket.
  void onTlsPlaintext(std::span<uint8_t>) override {}
  void onTlsCloseNotify() override { finish(false); }
  void onTlsFailed() override { finish(false); }
  [[nodiscard]] bool wantsTlsPlaintext() const override { return priming_ && !closing_; }
  [[nodiscard]] bool ticketHeld() const {
    return tls::holdsSession(run_.context.get(), run_.serverName);
  }

  void finish(bool ok) {
    if (closing_) return;
    closing_ = true;
    ok_ = ok;
    uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), [](uv_handle_t* handle) {
      auto* self = static_cast<Handshake*>(handle->data);
      Run& run = self->run_;
      const bool succeeded = self->ok_;
      const bool priming = self->priming_;
      const bool resumed = self->tls_ && self->tls_->sessionReused();
      delete self;
      if (priming)
        run.primed(succeeded);
      else
        run.finished(succeeded, resumed);
    });
  }

  Run& run_;
  const bool priming_;
  uv_tcp_t tcp_{};
  uv_connect_t connect_{};
  std::unique_ptr<tls::TlsStream> tls_;
  bool closing_ = false;
  bool ok_ = false;
};

void Run::next() {
  if (started >= count) return;
  ++started;
  (new Handshake(*this, false))->start();
}

}  // namespace

void startBareHandshakes(uv_loop_t* loop, sockaddr_in target, std::string serverName,
                         tls::SslCtxPtr context, uint64_t count, unsigned concurrency, bool resume,
                         std::function<void(const BareHandshakeRun&)> done) {
  auto* run =
      new Run{loop, target, std::move(serverName), std::move(context), count, concurrency, resume,
              0,    {},     std::move(done)};
  if (resume) {
    (new Handshake(*run, true))->start();
    return;
  }
  for (unsigned i = 0; i < concurrency && i < count; ++i) run->next();
}

}  // namespace ot::load
