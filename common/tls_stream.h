// TLS driven over any byte transport: the one place that feeds ciphertext to a TlsEngine, runs the
// handshake, drains the plaintext, flushes what the engine produced, picks up plaintext held
// while its owner was paused, and sends close_notify. relayd's API connection (over its TCP
// socket), otunnel's relay transport (over its TCP socket) and otunnel's LocalStream (the
// visitor's TLS, carried in bridge frames) each own one and only say where ciphertext goes and
// what plaintext means.
//
// Ciphertext always goes out through Owner::sendCiphertext at once (no buffering here). Owner
// calls may close the owner's transport; the stream then stops as soon as the owner no longer
// wants plaintext (wantsTlsPlaintext) or says its transport is gone (sendCiphertext's answer).
// Loop thread only; nothing here blocks or throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/tls_engine.h"

namespace ot::tls {

class TlsStream {
 public:
  class Owner {
   public:
    // Ciphertext for the peer. False when the owner's transport has closed (meanwhile): the
    // stream stops what it was doing.
    virtual bool sendCiphertext(std::vector<uint8_t> bytes) = 0;
    // The handshake completed (once).
    virtual void onTlsHandshakeDone() = 0;
    // Decrypted bytes; valid only during the call.
    virtual void onTlsPlaintext(std::span<uint8_t> bytes) = 0;
    // The peer sent close_notify: no more plaintext will come.
    virtual void onTlsCloseNotify() = 0;
    // The engine failed (handshake or record): errorText() says why; its alert is already sent.
    virtual void onTlsFailed() = 0;
    // Whether plaintext may be delivered now (past the handshake, not closing).
    [[nodiscard]] virtual bool wantsTlsPlaintext() const = 0;
    // What became of releaseHandshakeState() (once, when decided). Default: nothing.
    virtual void onTlsDetachResult(DetachResult /*result*/) {}

   protected:
    ~Owner() = default;
  };

  // `plainBuffer` is where records are decrypted; it must not be in use by anything that runs
  // inside this stream's owner calls. valid() is false when `engine` is null.
  TlsStream(std::unique_ptr<TlsEngine> engine, Owner& owner, std::span<uint8_t> plainBuffer);
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  [[nodiscard]] bool valid() const { return engine_ != nullptr; }

  // A client's first flight (the ClientHello). False when the engine failed at once (nothing
  // sent; errorText() says why).
  [[nodiscard]] bool startHandshake();
  // Ciphertext from the peer: advances the handshake, then delivers plaintext. The engine reads
  // `ciphertext` in place (TlsEngine::lend): it must not change during the call, also not inside
  // the owner calls made from here; only what is left unread at the end is copied.
  void receive(std::span<const uint8_t> ciphertext);
  // After the owner paused its transport: delivers what the engine decrypted meanwhile.
  void resume();
  // Encrypts and sends `plaintext`. False when the engine failed (nothing sent; errorText()).
  [[nodiscard]] bool write(std::span<const uint8_t> plaintext);
  // write() of the pieces as one (TlsEngine::writeGather). False as for write().
  [[nodiscard]] bool writeGather(std::span<const std::span<const uint8_t>> pieces);
  // Queues close_notify and sends it.
  void closeNotify();
  // write() and closeNotify() sent as one piece (a last answer). False as for write().
  [[nodiscard]] bool writeThenCloseNotify(std::span<const uint8_t> plaintext);
  // Sends whatever the engine has produced. False when the owner's transport is gone.
  bool flush();
  // TlsEngine::releaseHandshakeState: drop OpenSSL's state once the sequence numbers are proven
  // (the outcome comes through Owner::onTlsDetachResult).
  void releaseHandshakeState();
  [[nodiscard]] bool detached() const { return engine_->detached(); }

  [[nodiscard]] bool handshakeDone() const { return engine_->handshakeDone(); }
  [[nodiscard]] std::string_view alpn() const { return engine_->alpn(); }
  [[nodiscard]] bool sessionReused() const { return engine_->sessionReused(); }
  [[nodiscard]] const std::string& errorText() const { return engine_->errorText(); }
  [[nodiscard]] size_t pendingPlaintext() const { return engine_->pendingPlaintext(); }

 private:
  void drain();

  std::unique_ptr<TlsEngine> engine_;
  Owner& owner_;
  std::span<uint8_t> plainBuffer_;
};

}  // namespace ot::tls
