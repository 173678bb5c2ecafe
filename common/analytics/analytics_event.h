// Analytics events and their JSON envelope (docs/analytics.md). Pure: no I/O, no clock, no
// threads. An Event is what a daemon hands over where something happened (cheap to build: a type
// named by a static string, a time, a tunnel ID and a few fields); the sender thread turns a batch
// of them into one JSON array, the body of one POST to ANALYTICS_URL.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace ot::analytics {

// Bumped when an envelope key changes meaning or goes away; new keys and new event types do not
// bump it (receivers ignore what they do not know).
inline constexpr int kSchemaVersion = 1;

// The event types (docs/analytics.md lists each one's data). Static strings, so an Event holds a
// view and building one copies nothing.
namespace type {
inline constexpr std::string_view kTunnelCreated = "tunnel.created";
inline constexpr std::string_view kTunnelDeleted = "tunnel.deleted";
inline constexpr std::string_view kCertificateIssued = "certificate.issued";
inline constexpr std::string_view kCertificateFailed = "certificate.failed";
inline constexpr std::string_view kBridgeAttached = "bridge.attached";
inline constexpr std::string_view kBridgeDetached = "bridge.detached";
inline constexpr std::string_view kVisitorConnection = "visitor.connection";
}  // namespace type

using FieldValue = std::variant<int64_t, bool, std::string>;

struct Field {
  std::string_view name{};  // a static string: the field names are part of the schema
  FieldValue value{};
};

struct Event {
  std::string_view type{};  // one of type::k*, a static string
  int64_t atUnixMs = 0;
  std::string tunnel{};  // empty: the event is about no tunnel (the key is left out)
  std::vector<Field> fields{};

  // Append a field in place, named by a static string. Out of line on purpose: a Field moved out
  // of a temporary trips GCC 12's -Wmaybe-uninitialized inside std::variant.
  Event& add(std::string_view name, int64_t number);
  Event& add(std::string_view name, bool flag);
  Event& add(std::string_view name, std::string text);
  Event& add(std::string_view name, const char* text) = delete;  // would convert to bool
};

// Where an event is handed over (Analytics::emit, or a test's recorder). Must not block.
using EventSink = std::function<void(Event)>;

// Who sends: the same on every event of one process.
struct Origin {
  std::string machine{};
  std::string region{};
  std::string source{};  // the daemon: "controld" or "relayd"
};

// "2026-12-02T16:31:57.123Z" (RFC 3339, UTC, milliseconds).
[[nodiscard]] std::string formatTime(int64_t unixMs);

// One envelope as a JSON object:
//   {"v":1,"id":"<id>","type":...,"time":...,"machine":...,"region":...,"source":...,
//    "tunnel":... (only with one),"data":{fields}}
// Invalid UTF-8 in any string is replaced (U+FFFD) rather than failing the batch.
[[nodiscard]] std::string encodeEvent(const Event& event, const Origin& origin,
                                      std::string_view id);

// A batch: a JSON array of envelopes, the i-th with id "<idPrefix>-<firstSequence + i>" (ids are
// fixed when the batch is encoded, so a retried batch carries the same ids and a receiver can
// drop the duplicates a retry after a lost answer makes).
[[nodiscard]] std::string encodeBatch(std::span<const Event> events, const Origin& origin,
                                      std::string_view idPrefix, uint64_t firstSequence);

}  // namespace ot::analytics
