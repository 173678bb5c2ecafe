// The API's documentation as data: the component schemas and each route's RouteDoc, which
// api_routes.cc puts into the route table beside the handlers and openapi.h renders. Kept apart
// from the handlers so each file stays one concern. Pure.
#pragma once

#include "controld/api/api_router.h"

namespace ot::controld {

// Error, CreateTunnelRequest, CreatedTunnel, Tunnel, CertificateSummary, Certificate,
// BindCertificateRequest, Deleted, Health, OpenApiDocument.
void addApiSchemas(ApiRouter& router);

[[nodiscard]] RouteDoc createTunnelDoc();
[[nodiscard]] RouteDoc getTunnelDoc();
[[nodiscard]] RouteDoc deleteTunnelDoc();
[[nodiscard]] RouteDoc bindCertificateDoc();
[[nodiscard]] RouteDoc getCertificateDoc();
[[nodiscard]] RouteDoc healthDoc();
[[nodiscard]] RouteDoc openApiDoc();

}  // namespace ot::controld
