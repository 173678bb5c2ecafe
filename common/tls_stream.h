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
// Loop thread only; nothing here blocks or throws. With a HandshakeRunner the handshake's steps
// (the costly part: key exchange, signatures, tickets) run on the runner's threads; the stream
// hands its engine to one step at a time and touches it again only once that step is back.
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

class TlsStream;

// Runs TLS handshake steps away from the loop thread (relayd's handshake workers).
class HandshakeRunner {
 public:
  struct Job {
    TlsEngine* engine = nullptr;        // the runner's thread: status = engine->handshake()
    TlsStatus status = TlsStatus::kOk;  // written there, read on the loop once back
    // Loop thread only, never touched by the runner's thread:
    TlsStream* stream = nullptr;        // null once the stream is gone
    std::unique_ptr<TlsEngine> orphan;  // the engine of a stream gone while the step ran
  };
  // Runs `job` on another thread, then hands it to TlsStream::handshakeStepDone on the loop
  // thread (also when the stream is gone: that frees the orphaned engine there).
  virtual void submit(std::unique_ptr<Job> job) = 0;

 protected:
  ~HandshakeRunner() = default;
};

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
    // A handshake step that ran on a HandshakeRunner has been delivered (its owner calls above
    // were made outside receive()): whatever the owner does after receive() it does now.
    virtual void onTlsStepDelivered() {}
    // Asked when output the owner did not write would go out alone (the handshake's last, such
    // as a server's session ticket, or a key update's answer): true when the owner is about to
    // write anyway (an answer it waits for), so that output leaves with that write. Default: no.
    [[nodiscard]] virtual bool holdsTlsOutput() const { return false; }

   protected:
    ~Owner() = default;
  };

  // `plainBuffer` is where records are decrypted; it must not be in use by anything that runs
  // inside this stream's owner calls. valid() is false when `engine` is null.
  TlsStream(std::unique_ptr<TlsEngine> engine, Owner& owner, std::span<uint8_t> plainBuffer);
  // A step still running elsewhere keeps the engine (freed once the step is back).
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  [[nodiscard]] bool valid() const { return engine_ != nullptr; }

  // From now on the handshake's steps run on `runner` (null: on the caller's thread). The runner
  // must outlive every step it was given.
  void runHandshakeOn(HandshakeRunner* runner) { runner_ = runner; }
  // The loop's end of a step (the runner calls it): delivers what the step produced.
  static void handshakeStepDone(std::unique_ptr<HandshakeRunner::Job> job);
  // A step the runner will never deliver (it stopped; the step may not have run): its stream,
  // if still there, takes its engine back and delivers nothing. For a runner's shutdown, while
  // every stream is being closed.
  static void handshakeStepDropped(std::unique_ptr<HandshakeRunner::Job> job);

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
  // TlsEngine::prefetch, `stage` pointers beyond this stream (0: its engine). The stream's own
  // members are its owner's to ask for. Nothing while a handshake step runs elsewhere.
  void prefetch(unsigned stage) const {
    if (step_ == nullptr && engine_) engine_->prefetch(stage);
  }
  // Queues close_notify and sends it.
  void closeNotify();
  // write() and closeNotify() sent as one piece (a last answer). False as for write().
  [[nodiscard]] bool writeThenCloseNotify(std::span<const uint8_t> plaintext);
  // Sends whatever the engine has produced. False when the owner's transport is gone.
  bool flush();
  // TlsEngine::releaseHandshakeState: drop OpenSSL's state once the sequence numbers are proven
  // (the outcome comes through Owner::onTlsDetachResult).
  void releaseHandshakeState();
  [[nodiscard]] bool detached() const { return step_ == nullptr && engine_->detached(); }

  // While a step runs elsewhere these answer as for a handshake in progress.
  [[nodiscard]] bool handshakeDone() const { return step_ == nullptr && engine_->handshakeDone(); }
  [[nodiscard]] std::string_view alpn() const { return step_ ? "" : engine_->alpn(); }
  [[nodiscard]] bool sessionReused() const { return step_ == nullptr && engine_->sessionReused(); }
  [[nodiscard]] const std::string& errorText() const;
  [[nodiscard]] size_t pendingPlaintext() const { return step_ ? 0 : engine_->pendingPlaintext(); }
  // A handshake step is running on the runner.
  [[nodiscard]] bool stepRunning() const { return step_ != nullptr; }

 private:
  void drain();
  // The handshake just completed: tells the owner, reads what came with it (`held`: bytes that
  // arrived during a worker's step), then flushes what the step and the owner wrote, in one
  // write. False when the flush failed (the transport closed).
  bool finishHandshake(std::span<const uint8_t> held);
  void submitStep();
  void afterStep(TlsStatus status);

  std::unique_ptr<TlsEngine> engine_;
  Owner& owner_;
  std::span<uint8_t> plainBuffer_;
  HandshakeRunner* runner_ = nullptr;
  HandshakeRunner::Job* step_ = nullptr;  // the step running elsewhere (owned by the runner)
  std::vector<uint8_t> held_;             // ciphertext that arrived while it ran
};

}  // namespace ot::tls
