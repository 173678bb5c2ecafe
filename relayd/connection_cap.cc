#include "relayd/connection_cap.h"

#include <algorithm>
#include <limits>

namespace ot::relayd {

ConnectionCap deriveConnectionCap(const ConnectionCapInputs& in) {
  constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();
  ConnectionCap cap;
  cap.byMemory = kUnbounded;
  if (in.memoryBytes > 0) {
    const uint64_t usable = in.memoryBytes / 4 * 3;
    const uint64_t forConnections =
        usable > in.bufferedBytesLimit ? usable - in.bufferedBytesLimit : 0;
    cap.byMemory = forConnections / std::max<uint64_t>(in.bytesPerConnection, 1);
  }
  cap.byDescriptors = kUnbounded;
  if (in.openFileLimit > 0) {
    cap.reservedDescriptors =
        std::min(kOwnDescriptors +
                     std::min(kApiProxyDescriptorsMax, in.openFileLimit / kApiProxyDescriptorShare),
                 in.openFileLimit / kSmallLimitReserveShare);
    cap.byDescriptors =
        in.openFileLimit > cap.reservedDescriptors ? in.openFileLimit - cap.reservedDescriptors : 0;
  }
  if (cap.byMemory == kUnbounded && cap.byDescriptors == kUnbounded) {
    cap.limit = kFallbackConnectionCap;
    cap.boundBy = "fallback";
    return cap;
  }
  cap.boundBy = cap.byDescriptors <= cap.byMemory ? "descriptors" : "memory";
  cap.limit = std::max<uint64_t>(1, std::min(cap.byMemory, cap.byDescriptors));
  return cap;
}

}  // namespace ot::relayd
