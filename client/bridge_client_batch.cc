// BridgeClient's frame batches (StreamHost::beginFrameBatch / endFrameBatch): the frames of one
// local read or one round of turns leave in one write on the current transport; a data frame in a
// stream's own outermost batch is handed over by reference (sendBorrowedFrame), so its payload is
// sealed into TLS records straight from the stream's read buffer.
#include <utility>

#include "client/bridge_client.h"

namespace ot::client {

void BridgeClient::beginFrameBatch() {
  if (frameBatchDepth_++ > 0) return;
  batchTransport_ = transport_;
  if (batchTransport_ != nullptr) batchTransport_->beginBatch();
}

void BridgeClient::endFrameBatch() {
  if (frameBatchDepth_ == 0 || --frameBatchDepth_ > 0) return;
  // A transport that ended meanwhile still exists (it frees itself on its close callback, never
  // inside a call) but sends nothing more; only the current one writes what it holds.
  RelayTransport* transport = std::exchange(batchTransport_, nullptr);
  if (transport != nullptr && transport == transport_) transport->endBatch();
}

void BridgeClient::sendBorrowedFrame(std::span<const uint8_t> head,
                                     std::span<const uint8_t> payload) {
  if (transport_ == nullptr || ended_) return;
  // Only the stream's own batch, when it is the outermost, ends while `payload` is valid (in
  // runTurns the outer batch outlives each turn's buffer).
  if (frameBatchDepth_ == 1 && batchTransport_ == transport_) {
    (void)transport_->sendBinaryBorrowed(head, payload);
  } else {
    (void)transport_->sendBinary(head, payload);
  }
}

}  // namespace ot::client
