// Fuzzes ApiHttp2Session (relayd's HTTP/2 framing on nghttp2) as a client would drive it: the
// first byte seeds the split points, the rest is the connection's bytes from the client. Every
// complete request is answered at once (some with a body, some HEAD-like), output is taken after
// each piece. Invariants, trapped on violation:
//   - requests handed on are well formed (a method and a path) and within the limits;
//   - every stream the handler was told closed had been handed on, and only once;
//   - no stream is left over once the session has nothing open, and nothing stays pending.
#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "relayd/api_http2_session.h"

namespace {

using ot::relayd::ApiHttp2Session;
using ot::relayd::Http2Limits;
using ot::relayd::Http2Request;

void check(bool condition) {
  if (!condition) __builtin_trap();
}

struct Handler final : ApiHttp2Session::Handler {
  ApiHttp2Session* session = nullptr;
  Http2Limits limits;
  std::set<int32_t> open;
  std::set<int32_t> seen;
  void onHttp2Request(Http2Request request) override {
    check(!request.method.empty() && !request.path.empty());
    check(request.body.size() <= limits.maxBodyBytes);
    check(seen.insert(request.streamId).second);
    open.insert(request.streamId);
    const bool headOnly = (request.streamId % 4) == 3;
    session->respond(request.streamId, 200, {{"Content-Type", "text/plain"}},
                     std::string(request.path.size() * 100, 'r'), headOnly, 42);
  }
  void onHttp2StreamClosed(int32_t streamId) override { check(open.erase(streamId) == 1); }
  void onHttp2Refused(int status) override { check(status >= 400 && status < 600); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint32_t seed = data[0] | 1u;
  std::span<const uint8_t> input(data + 1, size - 1);
  Handler handler;
  auto session = ApiHttp2Session::create(handler, handler.limits);
  check(session != nullptr);
  handler.session = session.get();
  std::vector<uint8_t> out;
  while (!input.empty()) {
    seed = seed * 1103515245u + 12345u;
    const size_t piece = std::min<size_t>(input.size(), 1 + (seed >> 16) % 64);
    session->receive(input.first(piece));
    input = input.subspan(piece);
    out.clear();
    session->takeOutput(out, 1u << 20);
  }
  out.clear();
  session->takeOutput(out, 1u << 20);
  if (session->openStreams() == 0) check(session->pendingResponseBytes() == 0);
  return 0;
}
