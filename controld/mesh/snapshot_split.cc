#include "controld/mesh/snapshot_split.h"

#include "controld/mesh/link_frames.h"

namespace ot::mesh {

std::vector<std::string> encodeSnapshot(std::span<const BridgeEntry> bridges, uint64_t sequence,
                                        int64_t sentAtMs, size_t maxPartBytes) {
  std::vector<std::string> frames;
  std::vector<std::string> part;
  size_t partBytes = 0;  // the part's entries with the commas between them
  uint32_t index = 0;
  for (const auto& bridge : bridges) {
    std::string entry = encodeBridgeEntry(bridge);
    const size_t added = entry.size() + (part.empty() ? 0 : 1);
    if (!part.empty() && partBytes + added > maxPartBytes) {
      frames.push_back(encodeSnapshotFrame(sentAtMs, sequence, index++, false, part));
      part.clear();
      partBytes = 0;
    }
    partBytes += entry.size() + (part.empty() ? 0 : 1);
    part.push_back(std::move(entry));
  }
  frames.push_back(encodeSnapshotFrame(sentAtMs, sequence, index, true, part));
  return frames;
}

}  // namespace ot::mesh
