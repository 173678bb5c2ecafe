// MeshNode's route checks (docs/mesh.md "Route checks"): before an attach claims routes of a
// tunnel that the table says another machine holds, that machine is asked whether its live
// bridges claim them now (GET /internal/tunnel/<id>/routes, signed in x-opentunnel-auth); only a
// live "yes" is a conflict, so a machine that is down, draining or cannot be asked never blocks a
// client that moved. The answering side is the handed-off HTTP connection on the internal port.
#include <algorithm>
#include <future>
#include <memory>
#include <set>
#include <utility>

#include "common/clock.h"
#include "common/route_check_auth.h"
#include "controld/mesh/mesh_node.h"

namespace ot::mesh {
namespace {

// Asking: connect, ask and read the answer within this; answering: the request within 10 s (the
// internal listener's own bound for a first line).
constexpr uint64_t kRouteCheckTimeoutMs = 2'000;
constexpr uint64_t kRouteCheckRequestTimeoutMs = 10'000;

constexpr std::string_view kAsked = "asked";
constexpr std::string_view kAnswered = "answered";

}  // namespace

std::map<std::string, prometheus::Counter*, std::less<>> MeshNode::routeCheckCounters(
    metrics::Metrics& metrics) {
  static constexpr std::pair<std::string_view, std::string_view> kSeries[] = {
      {kAsked, "conflict"},     {kAsked, "free"},       {kAsked, "unreachable"},
      {kAsked, "invalid"},      {kAnswered, "ok"},      {kAnswered, "refused"},
      {kAnswered, "not_found"}, {kAnswered, "invalid"},
  };
  std::map<std::string, prometheus::Counter*, std::less<>> counters;
  for (const auto& [side, result] : kSeries) {
    counters[std::string(side) + "/" + std::string(result)] = &metrics.counter(
        "opentunnel_mesh_route_checks_total",
        "Route checks: asked (this machine asking a peer whose table entries hold a requested "
        "route) and answered (a peer asking this machine), by result",
        {{"side", std::string(side)}, {"result", std::string(result)}});
  }
  return counters;
}

void MeshNode::countRouteCheck(std::string_view side, std::string_view result) {
  const auto found = routeCheckCounters_.find(std::string(side) + "/" + std::string(result));
  if (found != routeCheckCounters_.end()) found->second->Increment();
}

// --- answering ----------------------------------------------------------------------------------

void MeshNode::answerRouteCheck(ReceivedHandoff received) {
  if (!exchanges_) exchanges_ = std::make_unique<InternalExchanges>(&loop_);
  const auto peer = parseHostPort(received.handoff.peerAddress);
  std::string peerHost = peer ? peer->host : std::string();
  exchanges_->adopt(
      received.connectionFd, received.handoff.prefix, kMaxRouteCheckRequestBytes,
      kRouteCheckRequestTimeoutMs,
      [](std::string_view bytes) {
        RouteCheckRequest request;
        return parseRouteCheckRequest(bytes, request);
      },
      [this, peerHost = std::move(peerHost)](InternalExchange& exchange,
                                             std::optional<std::string> bytes) {
        if (!bytes) {
          countRouteCheck(kAnswered, "invalid");
          return;
        }
        exchange.respond(routeCheckAnswer(*bytes, peerHost));
      });
}

std::string MeshNode::routeCheckAnswer(const std::string& bytes, const std::string& peerHost) {
  RouteCheckRequest request;
  if (parseRouteCheckRequest(bytes, request) != HttpParse::kComplete) {
    countRouteCheck(kAnswered, "invalid");
    return formatRouteCheckError(400, "not a route check");
  }
  if (request.tunnelId.empty() || request.method != "GET") {
    countRouteCheck(kAnswered, "not_found");
    return formatRouteCheckError(404, "no such internal route");
  }
  if (!request.auth) {
    countRouteCheck(kAnswered, "refused");
    return formatRouteCheckError(401, "missing x-opentunnel-auth");
  }
  // From a machine linked now, and from the host of the address it linked with.
  auto linkedSender = [this, &peerHost](std::string_view sender) {
    const auto found = active_.find(std::string(sender));
    if (found == active_.end()) return false;
    const auto& hello = found->second->hello();
    if (!hello) return false;
    const auto address = parseHostPort(hello->address);
    return address && !peerHost.empty() && address->host == peerHost;
  };
  auto verified =
      verifyRouteCheckAuth(*request.auth, request.method, request.target, settings_.token,
                           settings_.machineId, unixNowMs(), linkedSender, routeCheckNonces_);
  if (!verified) {
    countRouteCheck(kAnswered, "refused");
    log_.warn("route check refused",
              {{"reason", std::string(proofErrorName(verified.error()))}, {"from", peerHost}});
    return formatRouteCheckError(401, proofErrorName(verified.error()));
  }
  countRouteCheck(kAnswered, "ok");
  const std::vector<BridgeEntry> bridges = local_.bridgesOf(request.tunnelId);
  std::set<std::string> routes;
  // Only bridges without an origin hold a route against another machine's attach: a pool's
  // named origins share routes across machines (docs/pools-mesh.md).
  for (const BridgeEntry& bridge : bridges) {
    if (bridge.origin.empty()) routes.insert(bridge.routes.begin(), bridge.routes.end());
  }
  return formatRouteCheckAnswer(request.tunnelId, {routes.begin(), routes.end()}, bridges.size());
}

// --- asking -------------------------------------------------------------------------------------

void MeshNode::checkRoutes(std::string tunnelId, std::vector<std::string> routes,
                           std::function<void(std::optional<RouteConflict>)> done) {
  {
    std::lock_guard lock(tasksMutex_);
    if (!accepting_) return done(std::nullopt);
  }
  post([this, tunnelId = std::move(tunnelId), routes = std::move(routes),
        done = std::move(done)]() mutable {
    std::vector<PeerTarget> holders;
    for (PeerTarget& holder : table_.routeHolders(tunnelId, routes)) {
      // Only a machine linked now can be asked (and believed).
      if (active_.contains(holder.machineId)) holders.push_back(std::move(holder));
    }
    if (holders.empty() || stopping_) return done(std::nullopt);
    if (!exchanges_) exchanges_ = std::make_unique<InternalExchanges>(&loop_);

    struct Pending {
      size_t left = 0;
      std::optional<RouteConflict> conflict;
      std::function<void(std::optional<RouteConflict>)> done;
    };
    auto pending = std::make_shared<Pending>();
    pending->left = holders.size();
    pending->done = std::move(done);
    auto settle = [pending](std::optional<RouteConflict> found) {
      if (found && !pending->conflict) pending->conflict = std::move(found);
      if (--pending->left == 0) pending->done(std::move(pending->conflict));
    };

    const std::string target = routeCheckTarget(tunnelId);
    for (const PeerTarget& holder : holders) {
      const auto address = parseHostPort(holder.internalAddress);
      const auto nonce = randomNonce();
      const auto auth =
          nonce ? buildRouteCheckAuth(
                      settings_.token,
                      SignedEnvelope{settings_.machineId, holder.machineId, unixNowMs(), *nonce},
                      "GET", target)
                : std::nullopt;
      const auto destination =
          address ? resolveWithoutDns(address->host, address->port) : std::nullopt;
      if (!auth || !destination) {
        countRouteCheck(kAsked, "invalid");
        settle(std::nullopt);
        continue;
      }
      exchanges_->dial(
          resolveWithoutDns(settings_.internalAddress.host, 0).value_or(sockaddr_storage{}),
          *destination, formatRouteCheckRequest(holder.internalAddress, target, *auth),
          kMaxRouteCheckResponseBytes, kRouteCheckTimeoutMs,
          [](std::string_view bytes) {
            RouteCheckAnswer answer;
            return parseRouteCheckAnswer(bytes, answer);
          },
          [this, settle, routes, machine = holder.machineId](InternalExchange& exchange,
                                                             std::optional<std::string> bytes) {
            exchange.close();
            RouteCheckAnswer answer;
            if (!bytes) {
              countRouteCheck(kAsked, "unreachable");
              return settle(std::nullopt);
            }
            if (parseRouteCheckAnswer(*bytes, answer) != HttpParse::kComplete ||
                answer.status != 200) {
              countRouteCheck(kAsked, "invalid");
              log_.warn("route check answer refused",
                        {{"peer", machine}, {"status", int64_t{answer.status}}});
              return settle(std::nullopt);
            }
            for (const std::string& route : routes) {
              if (std::find(answer.routes.begin(), answer.routes.end(), route) !=
                  answer.routes.end()) {
                countRouteCheck(kAsked, "conflict");
                return settle(RouteConflict{machine, route});
              }
            }
            countRouteCheck(kAsked, "free");
            settle(std::nullopt);
          });
    }
  });
}

std::optional<RouteConflict> MeshNode::findRouteConflict(const std::string& tunnelId,
                                                         const std::vector<std::string>& routes) {
  auto promise = std::make_shared<std::promise<std::optional<RouteConflict>>>();
  auto future = promise->get_future();
  checkRoutes(tunnelId, routes, [promise](std::optional<RouteConflict> found) {
    promise->set_value(std::move(found));
  });
  // The asks time out on the loop; this bound only covers a loop that stopped meanwhile.
  if (future.wait_for(std::chrono::milliseconds(kRouteCheckTimeoutMs + 1'000)) !=
      std::future_status::ready) {
    return std::nullopt;
  }
  return future.get();
}

}  // namespace ot::mesh
