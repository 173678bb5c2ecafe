// Mesh link frames (controld/mesh/frame_reader.h): any bytes a peer sends after the handshake.
// The reader must answer the same frames and the same end whether the bytes come at once or in
// chunks (the chunk size comes from the first byte); every frame it answers must survive
// encode -> decode unchanged; and the per-link receive rules must take whatever it answers.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "controld/mesh/frame_reader.h"
#include "controld/mesh/link_receiver.h"

using namespace ot::mesh;

namespace {

void check(bool condition) {
  if (!condition) __builtin_trap();
}

struct Outcome {
  std::vector<Frame> frames;
  ReadStatus end = ReadStatus::kNeedMore;
  FrameError error;
};

void drain(FrameReader& reader, Outcome& outcome) {
  while (outcome.end != ReadStatus::kError) {
    auto result = reader.next();
    if (result.status == ReadStatus::kNeedMore) return;
    if (result.status == ReadStatus::kError) {
      outcome.end = ReadStatus::kError;
      outcome.error = result.error;
      return;
    }
    outcome.frames.push_back(std::move(result.frame));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  Outcome whole;
  FrameReader wholeReader;
  wholeReader.feed(bytes);
  drain(wholeReader, whole);

  Outcome chunked;
  FrameReader chunkReader;
  const size_t chunk = size == 0 ? 1 : static_cast<size_t>(data[0] % 23) + 1;
  for (size_t at = 0; at < size; at += chunk) {
    chunkReader.feed(bytes.substr(at, chunk));
    drain(chunkReader, chunked);
  }

  check(whole.end == chunked.end);
  check(whole.frames == chunked.frames);
  if (whole.end == ReadStatus::kError) check(whole.error == chunked.error);
  check(wholeReader.framesRead() == whole.frames.size());

  LinkReceiver receiver("m-fuzz", 0);
  int64_t now = 0;
  for (const auto& frame : whole.frames) {
    const std::string encoded = encodeFrame(frame);
    check(encoded.size() >= 4);
    auto again = decodeFrameBody(std::string_view(encoded).substr(4));
    check(again.ok() && again.value().has_value() && *again.value() == frame);
    auto step = receiver.receive(frame, ++now);
    if (!step.ok()) check(!linkErrorCodeName(step.error().code).empty());
  }
  return 0;
}
