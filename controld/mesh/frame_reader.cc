#include "controld/mesh/frame_reader.h"

#include <utility>

namespace ot::mesh {

void FrameReader::feed(std::span<const uint8_t> bytes) {
  feed(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

void FrameReader::feed(std::string_view bytes) {
  if (failed_) return;
  // Consumed bytes are dropped when they are most of the buffer, so a stream of small frames
  // neither grows it nor moves the tail on every frame.
  if (offset_ > 0 && offset_ >= buffer_.size() / 2) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  buffer_.append(bytes);
}

ReadResult FrameReader::fail(FrameError error) {
  failed_ = true;
  error_ = std::move(error);
  buffer_.clear();
  buffer_.shrink_to_fit();
  offset_ = 0;
  return {ReadStatus::kError, {}, error_};
}

ReadResult FrameReader::next() {
  while (true) {
    if (failed_) return {ReadStatus::kError, {}, error_};
    if (bufferedBytes() < 4) return {};
    const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + offset_);
    const size_t length = (static_cast<size_t>(p[0]) << 24) | (static_cast<size_t>(p[1]) << 16) |
                          (static_cast<size_t>(p[2]) << 8) | static_cast<size_t>(p[3]);
    const size_t limit = framesRead_ == 0 ? maxFirstBytes_ : maxBytes_;
    if (length > limit) {
      return fail({FrameErrorCode::kOversized,
                   "a frame of " + std::to_string(length) + " bytes (at most " +
                       std::to_string(limit) + (framesRead_ == 0 ? " before the hello)" : ")")});
    }
    if (bufferedBytes() - 4 < length) {
      buffer_.reserve(offset_ + 4 + length);  // one allocation for a large frame
      return {};
    }
    const std::string_view body(buffer_.data() + offset_ + 4, length);
    auto decoded = decodeFrameBody(body);
    offset_ += 4 + length;
    if (offset_ == buffer_.size()) {
      buffer_.clear();
      offset_ = 0;
    }
    if (!decoded.ok()) return fail(decoded.error());
    if (!decoded.value().has_value()) {
      ++ignoredFrames_;
      continue;
    }
    ++framesRead_;
    ReadResult result;
    result.status = ReadStatus::kFrame;
    result.frame = std::move(*decoded.value());
    return result;
  }
}

}  // namespace ot::mesh
