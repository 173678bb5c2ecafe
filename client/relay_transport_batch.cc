// RelayTransport's held frames (relay_transport.h, beginBatch / endBatch): frames sent inside a
// batch wait, copied into one buffer or, for a borrowed payload, as a reference to the caller's
// bytes, and leave as one TLS write (sealed straight from the pieces: TlsStream::writeGather)
// and one socket write when the outermost batch ends or a control frame goes out.
#include <utility>

#include "client/relay_frame.h"
#include "client/relay_transport.h"

namespace ot::client {

bool RelayTransport::sendBinaryBorrowed(std::span<const uint8_t> head,
                                        std::span<const uint8_t> payload) {
  if (state_ != State::kOpen) return false;
  if (batchDepth_ == 0 || payload.empty()) return sendBinary(head, payload);
  const size_t from = batch_.size();
  appendBridgeFrameStart(batch_, ws::Opcode::kBinary, head, payload.size());
  if (pieces_.empty()) {  // the first borrowed piece: list what batch_ holds before it
    heldBytes_ += batch_.size() - from;
    pieces_.push_back({nullptr, 0, batch_.size()});
  } else {
    holdCopied(from);
  }
  pieces_.push_back({payload.data(), 0, payload.size()});
  heldBytes_ += payload.size();
  return true;
}

void RelayTransport::holdCopied(size_t from) {
  const size_t size = batch_.size() - from;
  heldBytes_ += size;
  if (pieces_.empty()) return;  // no borrowed piece yet: batch_ alone says it all
  if (pieces_.back().borrowed == nullptr) {
    pieces_.back().size += size;
  } else {
    pieces_.push_back({nullptr, from, size});
  }
}

void RelayTransport::endBatch() {
  if (batchDepth_ == 0 || --batchDepth_ > 0) return;
  (void)flushBatch();
}

bool RelayTransport::flushBatch() {
  if (heldBytes_ == 0) return !closing();
  if (state_ != State::kOpen && state_ != State::kCloseSent) {
    dropBatch();  // the connection is going away: nothing more is sent
    return false;
  }
  // Moved out while TLS takes it, so a frame sent from inside (a failure's close) finds the
  // batch empty; the buffers (and their capacity) come back afterwards.
  std::vector<uint8_t> frames = std::move(batch_);
  std::vector<HeldPiece> pieces = std::move(pieces_);
  batch_.clear();
  pieces_.clear();
  heldBytes_ = 0;
  bool written = false;
  if (pieces.empty()) {
    written = tls_->write(frames);
  } else {
    std::vector<std::span<const uint8_t>> spans;
    spans.reserve(pieces.size());
    for (const HeldPiece& piece : pieces) {
      spans.emplace_back(piece.borrowed != nullptr ? piece.borrowed : frames.data() + piece.offset,
                         piece.size);
    }
    written = tls_->writeGather(spans);
  }
  if (batch_.empty()) {
    frames.clear();
    batch_ = std::move(frames);
    pieces.clear();
    pieces_ = std::move(pieces);
  }
  if (!written) {
    lose(ws::kCloseAbnormal, "tls: " + tls_->errorText());
    return false;
  }
  return !closing();
}

void RelayTransport::dropBatch() {
  batch_.clear();
  pieces_.clear();
  heldBytes_ = 0;
}

}  // namespace ot::client
