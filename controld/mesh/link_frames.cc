#include "controld/mesh/link_frames.h"

#include <array>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/bridge_frame.h"
#include "common/machine_identity.h"

namespace ot::mesh {
namespace {

using nlohmann::json;

constexpr std::array<std::pair<CertificateChange, std::string_view>, 3> kChangeNames = {{
    {CertificateChange::kBound, "bound"},
    {CertificateChange::kReady, "ready"},
    {CertificateChange::kRenewed, "renewed"},
}};

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

void appendLength(std::string& out, size_t length) {
  const auto n = static_cast<uint32_t>(length);
  out.push_back(static_cast<char>((n >> 24) & 0xFF));
  out.push_back(static_cast<char>((n >> 16) & 0xFF));
  out.push_back(static_cast<char>((n >> 8) & 0xFF));
  out.push_back(static_cast<char>(n & 0xFF));
}

std::string withLength(std::string_view body) {
  std::string out;
  out.reserve(4 + body.size());
  appendLength(out, body.size());
  out.append(body);
  return out;
}

json entryFields(const std::string& tunnelId, const BridgeEntry& entry) {
  json fields = json::object();
  fields["tunnel"] = tunnelId;
  fields["bridge"] = entry.bridgeId;
  fields["routes"] = entry.routes;
  fields["attached_at"] = entry.attachedAtMs;
  // Additive (docs/mesh.md): left out for a bridge without an origin, so an entry reads the same
  // to a peer that predates them.
  if (!entry.origin.empty()) {
    fields["origin"] = entry.origin;
    fields["profile_index"] = entry.profileIndex;
  }
  return fields;
}

// Encodes one body. Snapshot parts are written by encodeSnapshotFrame instead.
struct BodyEncoder {
  json& out;

  void operator()(const Hello& hello) const {
    out["version"] = hello.version;
    out["machine"] = hello.machine;
    out["region"] = hello.region;
    out["address"] = hello.address;
    out["epoch"] = hello.epoch;
    out["started_at"] = hello.startedAtMs;
    out["draining"] = hello.draining;
  }
  void operator()(const SnapshotPart&) const {}
  void operator()(const Attached& attached) const {
    out["sequence"] = attached.sequence;
    out.update(entryFields(attached.bridge.tunnelId, attached.bridge));
  }
  void operator()(const Detached& detached) const {
    out["sequence"] = detached.sequence;
    out["tunnel"] = detached.tunnelId;
    out["bridge"] = detached.bridgeId;
  }
  void operator()(const TunnelCreated& event) const { out["tunnel"] = event.tunnelId; }
  void operator()(const CertificateChanged& event) const {
    out["tunnel"] = event.tunnelId;
    out["change"] = certificateChangeName(event.change);
  }
  void operator()(const TunnelDeleted& event) const { out["tunnel"] = event.tunnelId; }
  void operator()(const Leaving&) const {}
  void operator()(const JobEnqueued&) const {}
  void operator()(const Ping&) const {}
  void operator()(const TunnelReset& event) const { out["tunnel"] = event.tunnelId; }
};

// --- decoding ---------------------------------------------------------------------------------

// Reads the fields of one frame type; the first failure is kept and the rest become no-ops.
class FieldReader {
 public:
  FieldReader(const json& object, std::string_view type) : object_(object), type_(type) {}

  [[nodiscard]] bool failed() const { return error_.has_value(); }
  [[nodiscard]] FrameError error() const { return *error_; }

  // A JSON integer (not a float, even 1.0) in [low, high].
  int64_t integer(const char* key, int64_t low = std::numeric_limits<int64_t>::min(),
                  int64_t high = std::numeric_limits<int64_t>::max()) {
    const json* value = member(key);
    if (value == nullptr) return 0;
    if (value->is_number_integer() && !value->is_number_unsigned()) {
      const auto n = value->get<int64_t>();
      if (n >= low && n <= high) return n;
    } else if (value->is_number_unsigned()) {
      const auto n = value->get<uint64_t>();
      if (high >= 0 && n <= static_cast<uint64_t>(high) && static_cast<int64_t>(n) >= low) {
        return static_cast<int64_t>(n);
      }
    }
    fail(key, "an integer in range");
    return 0;
  }

  uint64_t unsignedInteger(const char* key) {
    const json* value = member(key);
    if (value == nullptr) return 0;
    if (value->is_number_unsigned()) return value->get<uint64_t>();
    if (value->is_number_integer() && value->get<int64_t>() >= 0) {
      return static_cast<uint64_t>(value->get<int64_t>());
    }
    fail(key, "an unsigned integer");
    return 0;
  }

  bool boolean(const char* key) {
    const json* value = member(key);
    if (value == nullptr) return false;
    if (!value->is_boolean()) {
      fail(key, "a boolean");
      return false;
    }
    return value->get<bool>();
  }

  template <typename Check>
  std::string text(const char* key, Check&& check, const char* what) {
    const json* value = member(key);
    if (value == nullptr) return {};
    if (!value->is_string() || !check(value->get_ref<const std::string&>())) {
      fail(key, what);
      return {};
    }
    return value->get<std::string>();
  }

  std::string tunnelId() {
    return text(
        "tunnel", [](std::string_view id) { return bridge::isDnsLabel(id); }, "a tunnel ID");
  }
  std::string bridgeId() {
    return text(
        "bridge",
        [](std::string_view id) { return !id.empty() && id.size() <= kMaxBridgeIdLength; },
        "a bridge ID of 1-128 characters");
  }

  std::vector<std::string> routes() {
    const json* value = member("routes");
    if (value == nullptr) return {};
    if (!value->is_array() || value->empty() || value->size() > kMaxRoutesPerBridge) {
      fail("routes", "1-128 routes");
      return {};
    }
    std::vector<std::string> routes;
    routes.reserve(value->size());
    for (const auto& item : *value) {
      if (!item.is_string() || !bridge::isValidRoute(item.get_ref<const std::string&>())) {
        fail("routes", "routes that are \"\" or one DNS label");
        return {};
      }
      routes.push_back(item.get<std::string>());
    }
    return routes;
  }

  BridgeEntry entry() {
    BridgeEntry entry;
    entry.tunnelId = tunnelId();
    entry.bridgeId = bridgeId();
    entry.routes = routes();
    entry.attachedAtMs = integer("attached_at", 0);
    // Optional: a peer that predates origins sends neither (origin "", profile 0).
    if (has("origin")) {
      entry.origin = text("origin", validMachineName, "an origin name of 1-64 [A-Za-z0-9._-]");
    }
    if (has("profile_index")) {
      entry.profileIndex = static_cast<uint32_t>(integer("profile_index", 0, UINT32_MAX));
    }
    return entry;
  }

  // Sets the error unless one is already set.
  void fail(std::string_view key, std::string_view what) {
    if (error_) return;
    error_ = FrameError{FrameErrorCode::kBadField, std::string(type_) + ": " + std::string(key) +
                                                       " must be " + std::string(what)};
  }

 private:
  // A required member; null counts as absent.
  // Present and not null: for the optional fields.
  [[nodiscard]] bool has(const char* key) const {
    const auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }

  const json* member(const char* key) {
    if (error_) return nullptr;
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) {
      fail(key, "present");
      return nullptr;
    }
    return &*it;
  }

  const json& object_;
  std::string_view type_;
  std::optional<FrameError> error_;
};

FrameBody readHello(FieldReader& reader) {
  Hello hello;
  hello.version = static_cast<uint32_t>(reader.integer("version", 1, UINT32_MAX));
  hello.machine = reader.text("machine", validMachineName, "a machine ID");
  hello.region = reader.text("region", validMachineName, "a region name");
  hello.address = reader.text(
      "address",
      [](std::string_view address) {
        return !address.empty() && address.size() <= kMaxAddressLength;
      },
      "an address of 1-128 characters");
  hello.epoch = reader.unsignedInteger("epoch");
  hello.startedAtMs = reader.integer("started_at");
  hello.draining = reader.boolean("draining");
  return hello;
}

FrameBody readSnapshot(FieldReader& reader, const json& object, bool first) {
  SnapshotPart part;
  part.sequence = reader.unsignedInteger("sequence");
  part.part = static_cast<uint32_t>(reader.integer("part", first ? 0 : 1, first ? 0 : UINT32_MAX));
  part.last = reader.boolean("last");
  const auto bridges = object.find("bridges");
  if (bridges == object.end() || !bridges->is_array()) {
    reader.fail("bridges", "an array");
    return part;
  }
  part.bridges.reserve(bridges->size());
  for (const auto& item : *bridges) {
    if (!item.is_object()) {
      reader.fail("bridges", "an array of objects");
      return part;
    }
    FieldReader entryReader(item, first ? "snapshot bridge" : "snapshot_part bridge");
    part.bridges.push_back(entryReader.entry());
    if (entryReader.failed()) {
      reader.fail("bridges", entryReader.error().detail);
      return part;
    }
  }
  return part;
}

CertificateChange changeFromName(std::string_view name) {
  for (const auto& [change, changeName] : kChangeNames) {
    if (changeName == name) return change;
  }
  return CertificateChange::kOther;
}

}  // namespace

std::string_view frameErrorCodeName(FrameErrorCode code) {
  switch (code) {
    case FrameErrorCode::kOversized:
      return "oversized";
    case FrameErrorCode::kBadJson:
      return "bad_json";
    case FrameErrorCode::kMissingType:
      return "missing_type";
    case FrameErrorCode::kBadField:
      return "bad_field";
  }
  return "unknown";
}

std::string_view frameTypeName(const FrameBody& body) {
  // One case per alternative, in FrameBody's order: a new frame type must be named here too.
  static_assert(std::variant_size_v<FrameBody> == 11);
  switch (body.index()) {
    case 0:
      return "hello";
    case 1:
      return std::get<SnapshotPart>(body).part == 0 ? "snapshot" : "snapshot_part";
    case 2:
      return "attached";
    case 3:
      return "detached";
    case 4:
      return "tunnel_created";
    case 5:
      return "certificate_changed";
    case 6:
      return "tunnel_deleted";
    case 7:
      return "leaving";
    case 8:
      return "job_enqueued";
    case 9:
      return "ping";
    default:
      return "tunnel_reset";
  }
}

std::string_view certificateChangeName(CertificateChange change) {
  for (const auto& [known, name] : kChangeNames) {
    if (known == change) return name;
  }
  return "other";
}

std::string encodeBridgeEntry(const BridgeEntry& entry) {
  return dump(entryFields(entry.tunnelId, entry));
}

std::string encodeSnapshotFrame(int64_t sentAtMs, uint64_t sequence, uint32_t part, bool last,
                                std::span<const std::string> bridges) {
  json header = json::object();
  header["type"] = part == 0 ? "snapshot" : "snapshot_part";
  header["sent_at"] = sentAtMs;
  header["sequence"] = sequence;
  header["part"] = part;
  header["last"] = last;
  std::string body = dump(header);
  body.pop_back();  // the closing brace: the bridges array goes last
  body += ",\"bridges\":[";
  for (size_t i = 0; i < bridges.size(); ++i) {
    if (i > 0) body.push_back(',');
    body += bridges[i];
  }
  body += "]}";
  return withLength(body);
}

std::string encodeFrameBody(const Frame& frame) {
  if (std::holds_alternative<SnapshotPart>(frame.body)) {
    return encodeFrame(frame).substr(4);
  }
  json out = json::object();
  out["type"] = frameTypeName(frame.body);
  out["sent_at"] = frame.sentAtMs;
  std::visit(BodyEncoder{out}, frame.body);
  return dump(out);
}

std::string encodeFrame(const Frame& frame) {
  if (const auto* part = std::get_if<SnapshotPart>(&frame.body)) {
    std::vector<std::string> bridges;
    bridges.reserve(part->bridges.size());
    for (const auto& entry : part->bridges) bridges.push_back(encodeBridgeEntry(entry));
    return encodeSnapshotFrame(frame.sentAtMs, part->sequence, part->part, part->last, bridges);
  }
  return withLength(encodeFrameBody(frame));
}

Result<std::optional<Frame>, FrameError> decodeFrameBody(std::string_view body) {
  const json doc = json::parse(body.begin(), body.end(), nullptr, false);
  if (doc.is_discarded()) return FrameError{FrameErrorCode::kBadJson, "not JSON"};
  if (!doc.is_object()) return FrameError{FrameErrorCode::kBadJson, "not a JSON object"};
  const auto typeIt = doc.find("type");
  if (typeIt == doc.end() || !typeIt->is_string()) {
    return FrameError{FrameErrorCode::kMissingType, "no string \"type\""};
  }
  const std::string& type = typeIt->get_ref<const std::string&>();
  FieldReader reader(doc, type);
  Frame frame;
  if (type == "hello") {
    frame.body = readHello(reader);
  } else if (type == "snapshot" || type == "snapshot_part") {
    frame.body = readSnapshot(reader, doc, type == "snapshot");
  } else if (type == "attached") {
    Attached attached;
    attached.sequence = reader.unsignedInteger("sequence");
    attached.bridge = reader.entry();
    frame.body = std::move(attached);
  } else if (type == "detached") {
    Detached detached;
    detached.sequence = reader.unsignedInteger("sequence");
    detached.tunnelId = reader.tunnelId();
    detached.bridgeId = reader.bridgeId();
    frame.body = std::move(detached);
  } else if (type == "tunnel_created") {
    frame.body = TunnelCreated{reader.tunnelId()};
  } else if (type == "certificate_changed") {
    CertificateChanged changed;
    changed.tunnelId = reader.tunnelId();
    changed.change = changeFromName(reader.text(
        "change", [](std::string_view) { return true; }, "a string"));
    frame.body = std::move(changed);
  } else if (type == "tunnel_deleted") {
    frame.body = TunnelDeleted{reader.tunnelId()};
  } else if (type == "leaving") {
    frame.body = Leaving{};
  } else if (type == "job_enqueued") {
    frame.body = JobEnqueued{};
  } else if (type == "ping") {
    frame.body = Ping{};
  } else if (type == "tunnel_reset") {
    frame.body = TunnelReset{reader.tunnelId()};
  } else {
    return std::optional<Frame>();  // a type a later version added
  }
  frame.sentAtMs = reader.integer("sent_at");
  if (reader.failed()) return reader.error();
  return std::optional<Frame>(std::move(frame));
}

}  // namespace ot::mesh
