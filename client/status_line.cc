#include "client/status_line.h"

namespace ot::client {

std::string formatSeconds(uint64_t ms) {
  const uint64_t tenths = (ms + 50) / 100;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10);
}

std::string statusKey(const PoolStatus& status) {
  return std::to_string(status.links) + "/" + std::to_string(status.attached) +
         (status.fatal ? "/fatal/" : "/") + (status.nextRetryMs > 0 ? status.lastError : "");
}

std::optional<std::string> statusLine(const PoolStatus& status) {
  const std::string error = status.lastError.empty() ? "the bridge ended" : status.lastError;
  if (status.fatal) return "otunnel: " + error;
  const std::string links =
      "(" + std::to_string(status.attached) + "/" + std::to_string(status.links) + " links)";
  if (status.links > 0 && status.attached >= status.links) return "otunnel: connected " + links;
  if (status.nextRetryMs > 0) {
    std::string line = "otunnel: ";
    if (status.attached > 0) line += "connected " + links + "; ";
    return line + "reconnecting in " + formatSeconds(status.nextRetryMs) + " s: " + error;
  }
  if (status.attached > 0) return "otunnel: connected " + links;
  return std::nullopt;
}

}  // namespace ot::client
