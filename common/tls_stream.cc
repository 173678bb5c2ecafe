#include "common/tls_stream.h"

#include <utility>

namespace ot::tls {

TlsStream::TlsStream(std::unique_ptr<TlsEngine> engine, Owner& owner,
                     std::span<uint8_t> plainBuffer)
    : engine_(std::move(engine)), owner_(owner), plainBuffer_(plainBuffer) {}

bool TlsStream::startHandshake() {
  if (engine_->handshake() == TlsStatus::kError) return false;
  flush();
  return true;
}

void TlsStream::receive(std::span<const uint8_t> ciphertext) {
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
    if (!flush()) return;  // handshake output, and an alert on failure
    if (status == TlsStatus::kError) {
      owner_.onTlsFailed();
      return;
    }
    if (!engine_->handshakeDone()) return;
    owner_.onTlsHandshakeDone();
  }
  drain();
}

void TlsStream::resume() {
  if (engine_->pendingPlaintext() > 0) drain();
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
  flush();  // post-handshake messages (tickets, key update answers)
}

bool TlsStream::write(std::span<const uint8_t> plaintext) {
  if (engine_->write(plaintext) == TlsStatus::kError) return false;
  flush();
  return true;
}

bool TlsStream::writeGather(std::span<const std::span<const uint8_t>> pieces) {
  if (engine_->writeGather(pieces) == TlsStatus::kError) return false;
  flush();
  return true;
}

void TlsStream::closeNotify() {
  engine_->shutdown();
  flush();
}

bool TlsStream::writeThenCloseNotify(std::span<const uint8_t> plaintext) {
  if (engine_->write(plaintext) == TlsStatus::kError) return false;
  closeNotify();
  return true;
}

bool TlsStream::flush() {
  const DetachResult detach = engine_->takeDetachResult();
  if (detach != DetachResult::kNone) owner_.onTlsDetachResult(detach);
  if (engine_->pendingOutputSize() == 0) return true;
  return owner_.sendCiphertext(engine_->takeOutput());
}

void TlsStream::releaseHandshakeState() {
  engine_->releaseHandshakeState();
  const DetachResult detach = engine_->takeDetachResult();  // decided at once (e.g. TLS 1.2)
  if (detach != DetachResult::kNone) owner_.onTlsDetachResult(detach);
}

}  // namespace ot::tls
