#include "controld/acme/acme_issuer.h"

#include "common/log.h"

namespace ot::controld {
namespace {

const log::Logger kAcmeIssuerLog("controld.acme");

}  // namespace

Result<std::unique_ptr<AcmeIssuer>> AcmeIssuer::create(AcmeIssuerConfig config,
                                                       std::unique_ptr<DnsProvider> dns,
                                                       DnsRecordMetrics* dnsMetrics) {
  if (!dns) return Error{ErrorKind::kInvalid, "ISSUER=acme needs a DNS_PROVIDER"};
  if (dnsMetrics != nullptr) config.order.dnsMetrics = dnsMetrics;
  if (config.order.pollIntervalMs < 1) {
    return Error{ErrorKind::kInvalid, "ACME_POLL_INTERVAL_MS must be at least 1"};
  }
  auto client = AcmeClient::create(config.client);
  if (!client) return Error{ErrorKind::kInvalid, client.error().message};
  return std::unique_ptr<AcmeIssuer>(
      new AcmeIssuer(std::move(config), std::move(client).value(), std::move(dns)));
}

Result<IssuedCertificate> AcmeIssuer::issue(const IssueRequest& request,
                                            const std::atomic<bool>& cancel) {
  FailureDetail detail;
  return issueDetailed(request, cancel, detail);
}

Result<IssuedCertificate> AcmeIssuer::issueDetailed(const IssueRequest& request,
                                                    const std::atomic<bool>& cancel,
                                                    FailureDetail& detail) {
  auto issued = runAcmeOrder(*client_, *dns_, config_.order, request.names, request.csrPem, cancel);
  if (issued) return std::move(issued).value();
  const AcmeError& error = issued.error();
  detail = toFailureDetail(error);
  if (cancel.load()) return Error{ErrorKind::kUnavailable, "cancelled: " + error.message};
  kAcmeIssuerLog.debug("ACME attempt failed",
                       {{"name", request.names.empty() ? "" : request.names.front()},
                        {"error_class", detail.reason},
                        {"http_status", error.httpStatus},
                        {"error", error.message}});
  return toError(error);
}

}  // namespace ot::controld
