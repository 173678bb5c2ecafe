#include "common/nonce_window.h"

#include <algorithm>

namespace ot::mesh {

void NonceWindow::forgetBefore(int64_t nowMs) {
  while (!byExpiry_.empty() && byExpiry_.top().first < nowMs) {
    forgottenThroughMs_ = std::max(forgottenThroughMs_, byExpiry_.top().first);
    live_.erase(byExpiry_.top().second);
    byExpiry_.pop();
  }
}

NonceWindow::Admit NonceWindow::admit(const Nonce& nonce, int64_t headerTimeMs, int64_t nowMs) {
  forgetBefore(nowMs);
  const int64_t expiry = headerTimeMs + kSignedHeaderValidityMs;
  if (expiry <= forgottenThroughMs_) return Admit::kExpired;
  if (live_.contains(nonce)) return Admit::kReplayed;
  if (live_.size() >= capacity_) return Admit::kFull;
  live_.insert(nonce);
  byExpiry_.emplace(expiry, nonce);
  return Admit::kFresh;
}

ProofError admitError(NonceWindow::Admit admit) {
  switch (admit) {
    case NonceWindow::Admit::kReplayed:
      return ProofError::kReplayed;
    case NonceWindow::Admit::kExpired:
      return ProofError::kStale;
    case NonceWindow::Admit::kFull:
    case NonceWindow::Admit::kFresh:  // not an error: callers never ask
      break;
  }
  return ProofError::kReplayWindowFull;
}

}  // namespace ot::mesh
