// Incremental reader of one mesh link's frames (docs/mesh.md, "Link frames"): fed whatever byte
// chunks the socket gives (a length split across reads, several frames in one read), it answers
// one decoded frame at a time, "need more", or an error that ends the link.
//
// The size rule lives here because it is about bytes: until the first frame of a known type (the
// hello) has been read, frames may be at most kMaxHelloBytes; after it kMaxFrameBytes. An oversized
// length is refused as soon as its 4 bytes are in, before any of the body is buffered. Which frame
// may come when (hello first and once, snapshot before deltas, sequence numbers) is
// link_receiver.h's rule, not this one's.
//
// Who calls it: the mesh link loop, one reader per link, on the thread that owns the link. After an
// error the reader keeps answering that error; the link closes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "controld/mesh/link_frames.h"

namespace ot::mesh {

enum class ReadStatus : uint8_t { kFrame, kNeedMore, kError };

struct ReadResult {
  ReadStatus status = ReadStatus::kNeedMore;
  Frame frame;       // kFrame
  FrameError error;  // kError
};

class FrameReader {
 public:
  // The limits are parameters so tests can use small ones; the link uses the defaults.
  explicit FrameReader(size_t maxFirstBytes = kMaxHelloBytes, size_t maxBytes = kMaxFrameBytes)
      : maxFirstBytes_(maxFirstBytes), maxBytes_(maxBytes) {}

  // Appends a chunk. Cheap: decoding happens in next().
  void feed(std::span<const uint8_t> bytes);
  void feed(std::string_view bytes);

  // The next frame, kNeedMore when no whole frame is buffered, or kError. Frames of unknown types
  // are skipped (counted in ignoredFrames()) and do not end the hello limit.
  [[nodiscard]] ReadResult next();

  // Bytes held for a frame not yet complete (at most 4 + the current limit).
  [[nodiscard]] size_t bufferedBytes() const { return buffer_.size() - offset_; }
  [[nodiscard]] uint64_t framesRead() const { return framesRead_; }
  [[nodiscard]] uint64_t ignoredFrames() const { return ignoredFrames_; }

 private:
  ReadResult fail(FrameError error);

  size_t maxFirstBytes_;
  size_t maxBytes_;
  std::string buffer_;
  size_t offset_ = 0;  // bytes of buffer_ already consumed
  uint64_t framesRead_ = 0;
  uint64_t ignoredFrames_ = 0;
  bool failed_ = false;
  FrameError error_;
};

}  // namespace ot::mesh
