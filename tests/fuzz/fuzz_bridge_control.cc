// Bridge control messages: any text is parsed both as the relay reads it (attach) and as the
// client reads it (relay messages). Whatever is accepted must satisfy the documented limits and
// survive serialize -> parse unchanged; every refusal must serialize to an attach_error the
// client reads back with the same code and message.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_set>
#include <variant>

#include "common/bridge_control.h"

using namespace ot::bridge;

namespace {

void check(bool condition) {
  if (!condition) __builtin_trap();
}

void checkAttach(const AttachRequest& attach) {
  // Invalid routes wait in routeError (answered after the token); the list is then empty.
  check(attach.routeError.empty() ? !attach.routes.empty() : attach.routes.empty());
  check(attach.routes.size() <= kMaxRoutesPerAttach);
  std::unordered_set<std::string_view> seen;
  for (const auto& route : attach.routes) {
    check(isValidRoute(route));
    check(seen.insert(route).second);
  }
  check(!attach.token.empty() && attach.token.size() <= kMaxTokenLength);
  check(attach.maxConns >= 1 && attach.maxConns <= kMaxConnsPerBridge);
  check(attach.window >= kMinWindow && attach.window <= kMaxWindow);
  check(attach.origin.size() <= kMaxNameLength && attach.profile.size() <= kMaxNameLength);
}

void fuzzClientMessage(std::string_view text) {
  const auto attach = parseClientMessage(text);
  if (attach.ok()) {
    checkAttach(attach.value());
    // serializeAttach writes what a client sends: only an attach with valid routes round-trips.
    if (!attach.value().routeError.empty()) return;
    const auto again = parseClientMessage(serializeAttach(attach.value()));
    check(again.ok() && again.value() == attach.value());
    return;
  }
  const AttachError& error = attach.error();
  check(!error.message.empty());
  switch (error.code) {
    case AttachErrorCode::kError:
      check(error.closeCode == 1002);
      break;
    case AttachErrorCode::kTooManyRoutes:
    case AttachErrorCode::kBadToken:
      check(error.closeCode == 1008);
      break;
    case AttachErrorCode::kInvalidRoute:  // after the token: AttachRequest::routeError
    case AttachErrorCode::kCertNotReady:
    case AttachErrorCode::kRouteConflict:
    case AttachErrorCode::kTooManyFailures:
    case AttachErrorCode::kTooManyBridges:
      check(false);  // only the relay's later checks give these
      break;
  }
  const auto answer = parseRelayMessage(serializeAttachError(error));
  check(answer.ok() && std::holds_alternative<AttachError>(answer.value()));
  if (answer.ok()) {
    const auto& back = std::get<AttachError>(answer.value());
    check(back.code == error.code && back.message == error.message);
  }
}

void fuzzRelayMessage(std::string_view text) {
  const auto message = parseRelayMessage(text);
  if (!message.ok()) return;
  std::string again;
  if (const auto* attached = std::get_if<Attached>(&message.value())) {
    check(!attached->bridgeId.empty() && attached->bridgeId.size() <= kMaxBridgeIdLength);
    check(attached->limits.maxPayload >= 1 && attached->limits.maxPayload <= kMaxDataPayload);
    again = serializeAttached(*attached);
  } else if (const auto* error = std::get_if<AttachError>(&message.value())) {
    check(error->closeCode == closeCodeFor(error->code));
    again = serializeAttachError(*error);
  } else {
    again = serializeDrain();
  }
  const auto reparsed = parseRelayMessage(again);
  check(reparsed.ok() && reparsed.value() == message.value());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzzClientMessage(text);
  fuzzRelayMessage(text);
  return 0;
}
