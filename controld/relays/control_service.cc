#include "controld/relays/control_service.h"

#include <exception>
#include <string>
#include <utility>

#include "common/bridge_control.h"
#include "common/bridge_frame.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/log.h"
#include "controld/base/origin_credentials.h"
#include "controld/relays/attach_credential.h"
#include "controld/relays/record_convert.h"
#include "controld/relays/relay_session.h"
#include "controld/store/tunnel_record.h"

namespace ot::controld {
namespace {

const log::Logger& controlServiceLogger() {
  static const log::Logger instance("controld.control");
  return instance;
}

constexpr const char* kBadTokenMessage = "unknown tunnel or wrong token";
constexpr const char* kStorageUnavailable = "storage unavailable";

cv1::AuthorizeAttachResponse answer(cv1::AttachResult result, std::string message) {
  cv1::AuthorizeAttachResponse response;
  response.set_result(result);
  response.set_message(std::move(message));
  return response;
}

BridgeEntry authorizedBridge(const cv1::AuthorizeAttachRequest& request, int64_t nowMs) {
  BridgeEntry bridge;
  bridge.bridgeId = request.bridge_id();
  bridge.tunnelId = request.tunnel_id();
  bridge.routes.assign(request.routes().begin(), request.routes().end());
  bridge.origin = request.origin();
  bridge.profile = request.profile();
  bridge.maxConns = request.max_conns();
  bridge.attachedAtMs = nowMs;
  bridge.peerAddress = request.peer_address();
  return bridge;
}

grpc::Status internalError(const char* call, const std::exception& error) {
  controlServiceLogger().error("control call failed", {{"call", call}, {"error", error.what()}});
  return {grpc::StatusCode::INTERNAL, "internal error"};
}

}  // namespace

ControlService::ControlService(TunnelStore& store, BridgeRegistry& registry, RelayHub& hub,
                               ControlServiceOptions options)
    : store_(store),
      registry_(registry),
      hub_(hub),
      options_(std::move(options)),
      authorizePool_(options_.authorizeThreads, options_.authorizeQueue) {}

ControlService::~ControlService() {
  authorizePool_.stop();
}

int64_t ControlService::nowMs() const {
  if (options_.nowMs) return options_.nowMs();
  return unixNowMs();
}

grpc::Status ControlService::Session(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<cv1::ControlMessage, cv1::RelayMessage>* stream) {
  try {
    RelaySessionOptions sessionOptions{options_.writerLinger, options_.nowMs, nullptr};
    sessionOptions.authorize = [this](const RelayHub::SessionPtr& session,
                                      cv1::AuthorizeBatch batch) {
      authorizeOnSession(session, std::move(batch));
    };
    RelaySession session(*context, *stream, store_, hub_, std::move(sessionOptions));
    return session.run();
  } catch (const std::exception& error) {
    return internalError("Session", error);
  }
}

grpc::Status ControlService::AuthorizeAttach(grpc::ServerContext* context,
                                             const cv1::AuthorizeAttachRequest* request,
                                             cv1::AuthorizeAttachResponse* response) {
  try {
    *response = authorize(*request, std::chrono::steady_clock::now(),
                          [context] { return context->IsCancelled(); });
    return grpc::Status::OK;
  } catch (const std::exception& error) {
    return internalError("AuthorizeAttach", error);
  }
}

void ControlService::authorizeOnSession(const RelayHub::SessionPtr& session,
                                        cv1::AuthorizeBatch batch) {
  const auto received = std::chrono::steady_clock::now();
  for (cv1::AuthorizeItem& item : *batch.mutable_requests()) {
    const uint64_t id = item.request_id();
    auto send = [this, session, id](cv1::AuthorizeAttachResponse response) {
      cv1::ControlMessage message;
      cv1::AuthorizeAnswer* answered = message.mutable_authorized()->add_answers();
      answered->set_request_id(id);
      *answered->mutable_response() = std::move(response);
      (void)hub_.send(session, std::move(message));  // false: the session ended, relayd knows
    };
    const bool queued = authorizePool_.submit(
        [this, session, received, send, request = std::move(*item.mutable_request())] {
          cv1::AuthorizeAttachResponse response;
          try {
            response = authorize(request, received, [&] { return session->outbox().closed(); });
            // Announced to the mesh before relayd hears the answer (and tells the client).
            if (response.result() == cv1::ATTACH_RESULT_OK && !request.bridge_id().empty()) {
              registry_.authorized(session->relayKey(), authorizedBridge(request, nowMs()));
            }
          } catch (const std::exception& error) {
            controlServiceLogger().error("control call failed",
                                         {{"call", "AuthorizeBatch"}, {"error", error.what()}});
            response = answer(cv1::ATTACH_RESULT_ERROR, "internal error");
          }
          send(std::move(response));
        });
    if (!queued) {
      // Every worker is busy and the queue is full: relayd decides from its cache rather than
      // waiting out its deadline.
      controlServiceLogger().warn("attach not authorized: the authorization queue is full",
                                  {{"relay", session->relayKey()}});
      send(answer(cv1::ATTACH_RESULT_ERROR, "controld is busy"));
    }
  }
}

cv1::AuthorizeAttachResponse ControlService::authorize(
    const cv1::AuthorizeAttachRequest& request, std::chrono::steady_clock::time_point received,
    const std::function<bool()>& cancelled) {
  // Counted before anything else is looked at, as relayd does with the attach itself.
  const auto requested = static_cast<size_t>(request.routes_size());
  if (requested > bridge::kMaxRoutesPerAttach) {
    return answer(cv1::ATTACH_RESULT_TOO_MANY_ROUTES,
                  std::to_string(requested) + " routes in one attach; at most " +
                      std::to_string(bridge::kMaxRoutesPerAttach));
  }
  if (!isValidTunnelId(request.tunnel_id())) {
    return answer(cv1::ATTACH_RESULT_BAD_TOKEN, kBadTokenMessage);
  }

  auto loaded = store_.getTunnel(request.tunnel_id());
  const auto elapsed = std::chrono::steady_clock::now() - received;
  if (!loaded.ok()) {
    controlServiceLogger().warn(
        "attach not authorized: storage error",
        {{"tunnel", request.tunnel_id()}, {"error", loaded.error().message}});
    return answer(cv1::ATTACH_RESULT_ERROR, kStorageUnavailable);
  }
  if (elapsed > options_.attachTimeout || cancelled()) {
    controlServiceLogger().warn(
        "attach not authorized: the tunnel read was too slow",
        {{"tunnel", request.tunnel_id()},
         {"elapsed_ms", std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()}});
    return answer(cv1::ATTACH_RESULT_ERROR, kStorageUnavailable);
  }
  if (!loaded->has_value() || (*loaded)->record.deleted()) {
    return answer(cv1::ATTACH_RESULT_BAD_TOKEN, kBadTokenMessage);
  }
  const StoredTunnel& tunnel = **loaded;

  const auto expected = tokenHashBytes(tunnel.record.tokenSha256Hex);
  if (!expected) {
    controlServiceLogger().error("stored token hash is malformed",
                                 {{"tunnel", request.tunnel_id()}});
    return answer(cv1::ATTACH_RESULT_BAD_TOKEN, kBadTokenMessage);
  }
  if (!attachCredentialAccepted(tunnel.record, *expected, request.origin(), request.token(),
                                installedOriginSecret())) {
    return answer(cv1::ATTACH_RESULT_BAD_TOKEN, kBadTokenMessage);
  }

  for (const auto& route : request.routes()) {
    if (bridge::isValidRoute(route)) continue;
    return answer(cv1::ATTACH_RESULT_INVALID_ROUTE,
                  route.size() <= bridge::kMaxRouteLength
                      ? "route \"" + route + "\" is not one DNS label"
                      : std::string("a route is longer than one DNS label"));
  }

  const int64_t now = nowMs();
  if (!certificateUsable(tunnel.record.certificate, now)) {
    return answer(cv1::ATTACH_RESULT_CERT_NOT_READY, "the tunnel has no valid certificate yet");
  }

  // The registry holds this machine's bridges only; other machines' are asked last (the route
  // check), once everything local has passed.
  const std::vector<std::string> requestedRoutes(request.routes().begin(), request.routes().end());
  const size_t routes = registry_.routeCountWith(request.tunnel_id(), requestedRoutes);
  if (routes > kDefaultMaxRoutesPerTunnel) {
    return answer(cv1::ATTACH_RESULT_TOO_MANY_ROUTES,
                  "the tunnel would hold " + std::to_string(routes) +
                      " routes on this machine; at most " +
                      std::to_string(kDefaultMaxRoutesPerTunnel));
  }

  // A named origin never conflicts: a pool's origins may attach on different machines, and every
  // machine chooses a visitor's origin over all of them (docs/pools-mesh.md).
  if (options_.routeConflict && request.origin().empty()) {
    if (auto held = options_.routeConflict(request.tunnel_id(), requestedRoutes)) {
      return answer(
          cv1::ATTACH_RESULT_ROUTE_CONFLICT,
          "route \"" + held->route + "\" is served by live bridges on machine " + held->machineId);
    }
  }

  cv1::AuthorizeAttachResponse response = answer(cv1::ATTACH_RESULT_OK, "");
  *response.mutable_record() = toProtoRecord(tunnel, now);
  return response;
}

grpc::Status ControlService::FetchTunnel(grpc::ServerContext* /*context*/,
                                         const cv1::FetchTunnelRequest* request,
                                         cv1::FetchTunnelResponse* response) {
  try {
    response->Clear();
    if (!isValidTunnelId(request->tunnel_id())) return grpc::Status::OK;
    auto loaded = store_.getTunnel(request->tunnel_id());
    if (!loaded.ok()) {
      controlServiceLogger().warn(
          "tunnel fetch failed: storage error",
          {{"tunnel", request->tunnel_id()}, {"error", loaded.error().message}});
      return {grpc::StatusCode::UNAVAILABLE, kStorageUnavailable};
    }
    if (!loaded->has_value() || (*loaded)->record.deleted()) return grpc::Status::OK;
    response->set_found(true);
    *response->mutable_record() = toProtoRecord(**loaded, nowMs());
    return grpc::Status::OK;
  } catch (const std::exception& error) {
    return internalError("FetchTunnel", error);
  }
}

}  // namespace ot::controld
