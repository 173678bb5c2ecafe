// Fuzzes HttpParser (requests and responses, collected and streamed bodies, default and tiny
// limits) with pipelined input. The first byte picks the configuration, the second seeds the
// split points; the rest is the connection's bytes. Invariants, trapped on violation:
//   - parsing the input whole and cut into data-derived pieces gives the same messages, errors,
//     details, bodies and message boundaries;
//   - consumed <= the size of every feed, and each streamed body piece lies inside what was fed;
//   - a complete request/response re-serialized by http_serializer parses back to the same fields.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/http_parser.h"
#include "common/http_serializer.h"

namespace {

using ot::HttpParser;
using ot::HttpParseStatus;

void check(bool condition) {
  if (!condition) __builtin_trap();
}

struct Record {
  HttpParseStatus status = HttpParseStatus::kNeedMore;
  ot::HttpError error = ot::HttpError::kNone;
  size_t end = 0;  // offset in the whole input where this message (or the error) stopped
  ot::HttpMessage message;
  std::string streamed;
  std::string detail;

  bool operator==(const Record& other) const {
    const auto& a = message;
    const auto& b = other.message;
    return status == other.status && error == other.error && end == other.end &&
           streamed == other.streamed && detail == other.detail && a.method == b.method &&
           a.target == b.target && a.status == b.status && a.reason == b.reason &&
           a.versionMajor == b.versionMajor && a.versionMinor == b.versionMinor &&
           a.headers == b.headers && a.contentLength == b.contentLength && a.chunked == b.chunked &&
           a.keepAlive == b.keepAlive && a.upgrade == b.upgrade && a.body == b.body;
  }
};

// Feeds `input` in pieces ending at `cuts` (then the rest), pipelining up to a few messages.
std::vector<Record> run(HttpParser::Kind kind, const ot::HttpParserLimits& limits,
                        std::span<const uint8_t> input, const std::vector<size_t>& cuts) {
  HttpParser parser(kind, limits);
  std::vector<Record> records;
  Record current;
  size_t offset = 0;
  size_t cut = 0;
  auto pieceEnd = [&] {
    while (cut < cuts.size() && cuts[cut] <= offset) ++cut;
    return cut < cuts.size() ? cuts[cut] : input.size();
  };
  for (size_t steps = 0; steps < 100000; ++steps) {
    const size_t end = pieceEnd();
    const std::span<const uint8_t> piece = input.subspan(offset, end - offset);
    const ot::HttpParseResult r = parser.feed(piece);
    check(r.consumed <= piece.size());
    if (r.status == HttpParseStatus::kBody) {
      check(!r.body.empty() && r.body.data() >= piece.data() &&
            r.body.data() + r.body.size() == piece.data() + r.consumed);
      current.streamed.append(reinterpret_cast<const char*>(r.body.data()), r.body.size());
    } else {
      check(r.body.empty());
    }
    if (r.status != HttpParseStatus::kError) check(r.error == ot::HttpError::kNone);
    offset += r.consumed;
    if (r.status == HttpParseStatus::kHeaders) check(parser.headersComplete());
    if (r.status == HttpParseStatus::kHeaders || r.status == HttpParseStatus::kBody) continue;
    if (r.status == HttpParseStatus::kNeedMore) {
      check(offset == end);
      if (offset < input.size()) continue;
      const ot::HttpParseResult eof = parser.finish();
      if (eof.status == HttpParseStatus::kNeedMore) break;
      current.status = eof.status;
      current.error = eof.error;
    } else {
      current.status = r.status;
      current.error = r.error;
    }
    check((current.status == HttpParseStatus::kError) == (current.error != ot::HttpError::kNone));
    current.end = offset;
    current.message = parser.message();
    current.detail = std::string(parser.errorDetail());
    records.push_back(std::move(current));
    current = Record{};
    if (records.back().status != HttpParseStatus::kDone || records.size() == 8) break;
    if (!records.back().message.keepAlive) break;
    parser.reset();
  }
  return records;
}

bool isFraming(const ot::HttpHeader& h) {
  return ot::httpNameEquals(h.name, "content-length") ||
         ot::httpNameEquals(h.name, "transfer-encoding");
}

std::vector<ot::HttpHeader> withoutFraming(const std::vector<ot::HttpHeader>& headers) {
  std::vector<ot::HttpHeader> out;
  for (const auto& h : headers) {
    if (!isFraming(h)) out.push_back(h);
  }
  return out;
}

// A complete message written back out must parse to the same fields.
void checkRoundTrip(HttpParser::Kind kind, const ot::HttpParserLimits& limits,
                    const Record& record) {
  const ot::HttpMessage& m = record.message;
  if (record.status != HttpParseStatus::kDone || m.upgrade || m.versionMinor != 1) return;
  const std::string body = m.body + record.streamed;
  const auto wire = kind == HttpParser::Kind::kRequest
                        ? ot::serializeRequest(m.method, m.target, m.headers, body)
                        : ot::serializeResponse(m.status, m.reason, m.headers, body);
  check(wire.has_value());
  ot::HttpParserLimits relaxed;
  // Room for an added Content-Length and a reason phrase filled in for an empty one.
  relaxed.maxStartLineBytes = limits.maxStartLineBytes + 64;
  relaxed.maxHeaderCount = limits.maxHeaderCount + 1;
  relaxed.maxHeaderBytes = limits.maxHeaderBytes + 128;
  relaxed.maxBodyBytes = limits.maxBodyBytes;
  HttpParser parser(kind, relaxed);
  const ot::HttpParseResult r = parser.feed(*wire);
  check(r.status == HttpParseStatus::kDone && r.consumed == wire->size());
  const ot::HttpMessage& back = parser.message();
  check(back.method == m.method && back.target == m.target && back.status == m.status);
  check(m.reason.empty() || back.reason == m.reason);
  check(withoutFraming(back.headers) == withoutFraming(m.headers));
  check(back.body == body);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t config = data[0];
  uint32_t seed = data[1];
  const std::span<const uint8_t> input(data + 2, size - 2);

  const auto kind = (config & 1) != 0 ? HttpParser::Kind::kResponse : HttpParser::Kind::kRequest;
  ot::HttpParserLimits limits;
  if ((config & 2) != 0) limits.bodyMode = ot::HttpBodyMode::kStream;
  if ((config & 4) != 0) {  // tiny limits, so every limit is reachable by short inputs
    const size_t scale = config >> 4;
    limits.maxStartLineBytes = 16 + scale;
    limits.maxHeaderBytes = 64 + 4 * scale;
    limits.maxHeaderCount = 1 + ((config >> 3) & 3u);
    limits.maxBodyBytes = 8 + scale;
  }

  const std::vector<Record> whole = run(kind, limits, input, {});
  std::vector<size_t> cuts;
  for (size_t at = 0;;) {
    seed = seed * 1103515245u + 12345u;
    at += 1 + ((seed >> 16) % ((config & 8) != 0 ? 3u : 24u));
    if (at >= input.size()) break;
    cuts.push_back(at);
  }
  check(run(kind, limits, input, cuts) == whole);
  for (const Record& record : whole) checkRoundTrip(kind, limits, record);
  return 0;
}
