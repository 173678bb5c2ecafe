// controld's side of the relayd <-> controld contract (proto/opentunnel/control/v1): the
// RelayControl service. Session streams are run by RelaySession (relay_session.h) through the
// RelayHub; the unary calls answer from the store and the bridge registry. Called on gRPC's
// synchronous server threads, so blocking store reads are fine here. The store, registry and hub
// are borrowed and must outlive the server.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>

#include "common/clock.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/relay_hub.h"
#include "controld/store/store.h"
#include "opentunnel/control/v1/control.grpc.pb.h"

namespace ot::controld {

struct ControlServiceOptions {
  // An attach whose tunnel read took longer than this is answered ERROR ("storage unavailable"):
  // relayd has given up waiting by then and decides from its cache. The store's own timeouts bound
  // the read itself.
  std::chrono::milliseconds attachTimeout{4000};
  std::chrono::milliseconds writerLinger{2000};  // see RelaySessionOptions
  Clock nowMs;                                   // empty: the system clock
};

class ControlService final : public cv1::RelayControl::Service {
 public:
  ControlService(TunnelStore& store, BridgeRegistry& registry, RelayHub& hub,
                 ControlServiceOptions options = {});

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
  [[nodiscard]] cv1::AuthorizeAttachResponse authorize(grpc::ServerContext& context,
                                                       const cv1::AuthorizeAttachRequest& request);
  [[nodiscard]] int64_t nowMs() const;

  TunnelStore& store_;
  BridgeRegistry& registry_;
  RelayHub& hub_;
  const ControlServiceOptions options_;
};

}  // namespace ot::controld
