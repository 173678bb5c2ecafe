// Admin TunnelStatus (`otctl status ID`): the document GET /api/tunnel/{id}/status answers, for
// the operator, without the tunnel's token (docs/pools-status.md).
#include "controld/admin/admin_service.h"

namespace ot::controld {

grpc::Status AdminService::TunnelStatus(grpc::ServerContext*,
                                        const av1::TunnelStatusRequest* request,
                                        av1::TunnelStatusResponse* response) {
  const std::string& id = request->tunnel_id();
  if (!isValidTunnelId(id)) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "not a tunnel ID: \"" + id + "\""};
  }
  auto loaded = context_.store->getTunnel(id);
  if (!loaded) return grpcStatus(loaded.error());
  if (!loaded->has_value() || (*loaded)->record.deleted()) {
    return {grpc::StatusCode::NOT_FOUND, "no tunnel " + id};
  }
  const TunnelStatusInputs inputs =
      context_.tunnelStatus ? context_.tunnelStatus(id) : TunnelStatusInputs{};
  response->set_json(tunnelStatusJson(id, inputs)
                         .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  return grpc::Status::OK;
}

}  // namespace ot::controld
