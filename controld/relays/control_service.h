// controld's side of the relayd <-> controld contract (proto/opentunnel/control/v1): the
// RelayControl service. Session streams are run by RelaySession (relay_session.h) through the
// RelayHub; the unary calls answer from the store and the bridge registry on gRPC's synchronous
// server threads, so blocking store reads are fine there. Attach authorizations carried by a
// session (AuthorizeBatch) are handed by its reader to the service's own worker threads, which
// make the same checks and queue each answer to the session's outbox: the reader never waits on
// the store. The store, registry and hub are borrowed and must outlive the server.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>

#include "common/clock.h"
#include "controld/http/worker_pool.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/relay_hub.h"
#include "controld/store/store.h"
#include "opentunnel/control/v1/control.grpc.pb.h"

namespace ot::controld {

// A route another machine's live bridges of the tunnel claim now (the region mesh's route check,
// docs/mesh.md "Route checks").
struct RouteHeldElsewhere {
  std::string machineId;
  std::string route;
};
using RouteConflictCheck = std::function<std::optional<RouteHeldElsewhere>(
    const std::string& tunnelId, const std::vector<std::string>& routes)>;

struct ControlServiceOptions {
  // An attach whose tunnel read took longer than this is answered ERROR ("storage unavailable"):
  // relayd has given up waiting by then and decides from its cache. The store's own timeouts bound
  // the read itself.
  std::chrono::milliseconds attachTimeout{4000};
  std::chrono::milliseconds writerLinger{2000};  // see RelaySessionOptions
  Clock nowMs;                                   // empty: the system clock
  // The threads that answer session-carried authorizations (each blocks on one store read at a
  // time) and how many requests may wait for one; a request beyond that is answered ERROR at once
  // (relayd decides from its cache). 32, not a thread per core: a store far from the machine
  // (~150 ms a read) would cap 4 threads at ~26 attaches a second, below what the unary call's
  // gRPC threads allowed; 32 stay under the store's default pool of 50 sessions.
  size_t authorizeThreads = 32;
  size_t authorizeQueue = 4096;
  // The mesh's route check, asked last (it may wait up to ~2 s for another machine's answer, on
  // an authorization worker); empty: one machine, no check.
  RouteConflictCheck routeConflict{};
};

class ControlService final : public cv1::RelayControl::Service {
 public:
  ControlService(TunnelStore& store, BridgeRegistry& registry, RelayHub& hub,
                 ControlServiceOptions options = {});
  // Stops the authorization workers (the requests queued are answered first).
  ~ControlService() override;
  ControlService(const ControlService&) = delete;
  ControlService& operator=(const ControlService&) = delete;

  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<cv1::ControlMessage, cv1::RelayMessage>* stream) override;
  grpc::Status AuthorizeAttach(grpc::ServerContext* context,
                               const cv1::AuthorizeAttachRequest* request,
                               cv1::AuthorizeAttachResponse* response) override;
  grpc::Status FetchTunnel(grpc::ServerContext* context, const cv1::FetchTunnelRequest* request,
                           cv1::FetchTunnelResponse* response) override;

 private:
  // The checks, in the contract's order: route count, credential, route names, certificate,
  // routes held on this machine.
  // `received` is when the request arrived; an answer later than attachTimeout after it, or for a
  // caller that went away (`cancelled`), is ERROR.
  [[nodiscard]] cv1::AuthorizeAttachResponse authorize(
      const cv1::AuthorizeAttachRequest& request, std::chrono::steady_clock::time_point received,
      const std::function<bool()>& cancelled);
  // The session reader's hand-off: one worker task per request.
  void authorizeOnSession(const RelayHub::SessionPtr& session, cv1::AuthorizeBatch batch);
  [[nodiscard]] int64_t nowMs() const;

  TunnelStore& store_;
  BridgeRegistry& registry_;
  RelayHub& hub_;
  const ControlServiceOptions options_;
  WorkerPool authorizePool_;
};

}  // namespace ot::controld
