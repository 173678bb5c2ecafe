// The mesh link's frames after authentication (docs/mesh.md, "Link frames"): typed frames, their
// encoder, and the decoder of one frame body. Pure: no I/O, never throws (bad input comes back as
// a FrameError value). The incremental byte reader is frame_reader.h, the snapshot splitter
// snapshot_split.h, the per-link ordering rules link_receiver.h.
//
// Who calls it (once wired): controld's mesh link loop encodes what this machine announces
// (encodeFrame, one std::string per frame, handed to the link's OutboundQueue) and decodes what a
// peer sends through a FrameReader per link. Any thread may call these functions; a value is
// owned by whoever holds it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/result.h"
#include "controld/mesh/mesh_types.h"

namespace ot::mesh {

// First on every link: who the sender is. `machine` must be the machine that proved itself in the
// handshake (link_receiver.h checks it).
struct Hello {
  uint32_t version = kLinkFormatVersion;
  std::string machine;
  std::string region;
  std::string address;  // host:port where forwards to this machine's bridges go
  uint64_t epoch = 0;   // random per life of the machine
  int64_t startedAtMs = 0;
  bool draining = false;

  friend bool operator==(const Hello&, const Hello&) = default;
};

// One part of the sender's snapshot of its own bridges, taken at `sequence` (the next delta is
// sequence + 1). Part 0 goes out as type "snapshot", later ones as "snapshot_part"; `last` ends it.
// Entries on the wire carry no machine: the decoder leaves BridgeEntry::machine empty and the
// receiver fills it from the hello.
struct SnapshotPart {
  uint64_t sequence = 0;
  uint32_t part = 0;
  bool last = true;
  std::vector<BridgeEntry> bridges;

  friend bool operator==(const SnapshotPart&, const SnapshotPart&) = default;
};

// Deltas, numbered by the sender's per-machine sequence.
struct Attached {
  uint64_t sequence = 0;
  BridgeEntry bridge;  // machine empty, as in a snapshot

  friend bool operator==(const Attached&, const Attached&) = default;
};

struct Detached {
  uint64_t sequence = 0;
  std::string tunnelId;
  std::string bridgeId;

  friend bool operator==(const Detached&, const Detached&) = default;
};

// Events: not numbered (a lost one is covered by the checks a new link makes, docs/mesh.md).
struct TunnelCreated {
  std::string tunnelId;
  friend bool operator==(const TunnelCreated&, const TunnelCreated&) = default;
};

enum class CertificateChange : uint8_t { kBound, kReady, kRenewed, kOther };

struct CertificateChanged {
  std::string tunnelId;
  CertificateChange change = CertificateChange::kOther;  // a name this build does not know: kOther
  friend bool operator==(const CertificateChanged&, const CertificateChanged&) = default;
};

struct TunnelDeleted {
  std::string tunnelId;
  friend bool operator==(const TunnelDeleted&, const TunnelDeleted&) = default;
};

// The sender is draining: drop its entries, stop forwarding to it.
struct Leaving {
  friend bool operator==(const Leaving&, const Leaving&) = default;
};

// A certificate job was queued: wake the job runner.
struct JobEnqueued {
  friend bool operator==(const JobEnqueued&, const JobEnqueued&) = default;
};

struct Ping {
  friend bool operator==(const Ping&, const Ping&) = default;
};

// The tunnel's owner (or an operator) reset it on the sender: reset it here too, closing its
// bridges on this machine's relayd (docs/pools-reset.md). An older build ignores the type.
struct TunnelReset {
  std::string tunnelId;
  friend bool operator==(const TunnelReset&, const TunnelReset&) = default;
};

using FrameBody =
    std::variant<Hello, SnapshotPart, Attached, Detached, TunnelCreated, CertificateChanged,
                 TunnelDeleted, Leaving, JobEnqueued, Ping, TunnelReset>;

struct Frame {
  int64_t sentAtMs = 0;  // the sender's clock (Unix ms) when it encoded the frame
  FrameBody body;

  friend bool operator==(const Frame&, const Frame&) = default;
};

enum class FrameErrorCode : uint8_t {
  kOversized,    // the length prefix is over the limit for this frame
  kBadJson,      // not JSON, or not a JSON object
  kMissingType,  // no string "type"
  kBadField,     // a known type with a required field missing, ill-typed or out of range
};

struct FrameError {
  FrameErrorCode code = FrameErrorCode::kBadJson;
  std::string detail;  // names the frame type and field, for the log line

  friend bool operator==(const FrameError&, const FrameError&) = default;
};

[[nodiscard]] std::string_view frameErrorCodeName(FrameErrorCode code);
[[nodiscard]] std::string_view frameTypeName(const FrameBody& body);  // the wire "type"
[[nodiscard]] std::string_view certificateChangeName(CertificateChange change);

// The JSON body alone (no length prefix).
[[nodiscard]] std::string encodeFrameBody(const Frame& frame);
// Length prefix (big-endian u32) and body: what goes on the link.
[[nodiscard]] std::string encodeFrame(const Frame& frame);

// One body. nullopt: a well-formed object whose type this build does not know (ignore it).
// Unknown fields are ignored; null counts as absent.
[[nodiscard]] Result<std::optional<Frame>, FrameError> decodeFrameBody(std::string_view body);

// The JSON of one snapshot entry, as it appears in a snapshot's "bridges" array (the splitter
// measures parts with it).
[[nodiscard]] std::string encodeBridgeEntry(const BridgeEntry& entry);
// A whole snapshot or snapshot_part frame (prefix included) from entries already encoded with
// encodeBridgeEntry: what encodeFrame writes for a SnapshotPart, without encoding entries twice.
[[nodiscard]] std::string encodeSnapshotFrame(int64_t sentAtMs, uint64_t sequence, uint32_t part,
                                              bool last, std::span<const std::string> bridges);

}  // namespace ot::mesh
