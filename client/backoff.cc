#include "client/backoff.h"

#include <algorithm>
#include <random>
#include <utility>

namespace ot::client {

Backoff::Backoff(std::function<uint64_t(uint64_t)> random, uint64_t baseMs, uint64_t capMs)
    : random_(std::move(random)), baseMs_(baseMs), capMs_(capMs) {}

uint64_t Backoff::nextDelayMs() {
  // Shifting past 2^20 cannot be below the cap for any sane base; stop growing the exponent there.
  const uint32_t exponent = std::min<uint32_t>(failures_, 20);
  const uint64_t base = std::min(capMs_, baseMs_ << exponent);
  if (failures_ < UINT32_MAX) ++failures_;
  const uint64_t half = base / 2;
  return half + random_(base - half);
}

uint64_t uniformRandom(uint64_t n) {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return std::uniform_int_distribution<uint64_t>(0, n)(generator);
}

}  // namespace ot::client
