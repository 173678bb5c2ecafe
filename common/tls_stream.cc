#include "common/tls_stream.h"

#include <utility>

namespace ot::tls {

TlsStream::TlsStream(std::unique_ptr<TlsEngine> engine, Owner& owner,
                     std::span<uint8_t> plainBuffer)
    : engine_(std::move(engine)), owner_(owner), plainBuffer_(plainBuffer) {}

TlsStream::~TlsStream() {
  if (step_ == nullptr) return;
  step_->stream = nullptr;
  step_->orphan = std::move(engine_);  // the runner's thread may still be inside it
}

const std::string& TlsStream::errorText() const {
  static const std::string kNone;
  return step_ ? kNone : engine_->errorText();
}

bool TlsStream::startHandshake() {
  if (engine_->handshake() == TlsStatus::kError) return false;
  flush();
  return true;
}

void TlsStream::receive(std::span<const uint8_t> ciphertext) {
  if (step_ != nullptr) {  // the engine is busy on the runner: the bytes wait for the step
    held_.insert(held_.end(), ciphertext.begin(), ciphertext.end());
    return;
  }
  if (runner_ != nullptr && !engine_->handshakeDone()) {
    engine_->feed(ciphertext);  // a copy: the bytes outlive this call
    submitStep();
    return;
  }
  // Read in place; what the engine leaves (a cut record, or records held while the owner paused)
  // is copied inside on the way out. Owners are never freed inside their calls (they go on their
  // socket's close callback), so the engine is still there.
  engine_->lend(ciphertext);
  struct KeepUnread {
    TlsEngine& engine;
    ~KeepUnread() { engine.keepUnread(); }
  } keep{*engine_};
  if (!engine_->handshakeDone()) {
    const TlsStatus status = engine_->handshake();
    if (status == TlsStatus::kError || !engine_->handshakeDone()) {
      if (!flush()) return;  // handshake output, and an alert on failure
      if (status == TlsStatus::kError) owner_.onTlsFailed();
      return;
    }
    finishHandshake({});
    return;
  }
  drain();
}

bool TlsStream::finishHandshake(std::span<const uint8_t> held) {
  // The step that completed the handshake may leave output (a client's Finished, a server's
  // session ticket) and, on a server, have come with application data (the request). The output
  // waits while the owner hears of the handshake and reads what came, so what the owner writes
  // then (the client's request, the server's answer) leaves in the same write: in a reconnect
  // storm one write per bridge fewer on each side, and relayd reads a bridge's Finished and its
  // upgrade request together. A transport that closed meanwhile fails the flush at the end; its
  // owner copes with writes on a closing transport as it does at any other time.
  owner_.onTlsHandshakeDone();
  if (!held.empty()) engine_->feed(held);
  drain();
  return owner_.holdsTlsOutput() || flush();  // held: the owner's next write takes it along
}

void TlsStream::submitStep() {
  auto job = std::make_unique<HandshakeRunner::Job>();
  job->engine = engine_.get();
  job->stream = this;
  step_ = job.get();
  runner_->submit(std::move(job));
}

void TlsStream::handshakeStepDone(std::unique_ptr<HandshakeRunner::Job> job) {
  if (job->stream == nullptr) return;  // the stream is gone: the orphaned engine goes with `job`
  job->stream->afterStep(job->status);
}

void TlsStream::handshakeStepDropped(std::unique_ptr<HandshakeRunner::Job> job) {
  if (job->stream == nullptr) return;
  job->stream->step_ = nullptr;
  job->stream->held_.clear();
}

void TlsStream::afterStep(TlsStatus status) {
  step_ = nullptr;
  std::vector<uint8_t> held;
  held.swap(held_);
  if (status == TlsStatus::kError || !engine_->handshakeDone()) {
    if (!flush()) return;  // the step's output (and an alert on failure)
    if (status == TlsStatus::kError) {
      owner_.onTlsFailed();
      return;
    }
    if (!held.empty()) {
      engine_->feed(held);
      submitStep();
    }
    return;
  }
  if (!finishHandshake(held)) return;
  owner_.onTlsStepDelivered();
}

void TlsStream::resume() {
  if (step_ == nullptr && engine_->pendingPlaintext() > 0) drain();
}

void TlsStream::drain() {
  while (owner_.wantsTlsPlaintext()) {
    const ReadResult result = engine_->read(plainBuffer_);
    if (result.bytes > 0) {
      owner_.onTlsPlaintext(plainBuffer_.first(result.bytes));
      if (!owner_.wantsTlsPlaintext()) return;
    }
    if (result.status == TlsStatus::kClosed) {
      owner_.onTlsCloseNotify();
      return;
    }
    if (result.status == TlsStatus::kError) {
      flush();
      owner_.onTlsFailed();
      return;
    }
    if (result.bytes < plainBuffer_.size()) break;
  }
  // Post-handshake messages (tickets, key update answers), unless the owner writes soon anyway.
  if (!owner_.holdsTlsOutput()) flush();
}

bool TlsStream::write(std::span<const uint8_t> plaintext) {
  if (step_ != nullptr) return true;  // as before a handshake: nothing taken
  if (engine_->write(plaintext) == TlsStatus::kError) return false;
  flush();
  return true;
}

bool TlsStream::writeGather(std::span<const std::span<const uint8_t>> pieces) {
  if (step_ != nullptr) return true;
  if (engine_->writeGather(pieces) == TlsStatus::kError) return false;
  flush();
  return true;
}

void TlsStream::closeNotify() {
  if (step_ != nullptr) return;  // mid-handshake: there is no close_notify to send
  engine_->shutdown();
  flush();
}

bool TlsStream::writeThenCloseNotify(std::span<const uint8_t> plaintext) {
  if (step_ != nullptr) return true;
  if (engine_->write(plaintext) == TlsStatus::kError) return false;
  closeNotify();
  return true;
}

bool TlsStream::flush() {
  if (step_ != nullptr) return true;  // the step's output comes with it
  const DetachResult detach = engine_->takeDetachResult();
  if (detach != DetachResult::kNone) owner_.onTlsDetachResult(detach);
  if (engine_->pendingOutputSize() == 0) return true;
  return owner_.sendCiphertext(engine_->takeOutput());
}

void TlsStream::releaseHandshakeState() {
  if (step_ != nullptr) return;
  engine_->releaseHandshakeState();
  const DetachResult detach = engine_->takeDetachResult();  // decided at once (e.g. TLS 1.2)
  if (detach != DetachResult::kNone) owner_.onTlsDetachResult(detach);
}

}  // namespace ot::tls
