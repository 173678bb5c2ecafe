// What the HTTP API does to tunnels, independent of HTTP: create, read, bind a certificate
// request, read the certificate, delete, and the health check. The routes (api_routes.h) turn
// requests into these calls and ServiceErrors into statuses.
//
// Owns nothing it is given: the store, the bridge registry, the publisher and the notifier must
// outlive it. Thread-safe: the HTTP server calls it from several worker threads at once, and every
// call may block on storage. Writes to one tunnel are serialized within the process (a striped
// lock) and name the revision they read, so other controlds on the same database stay correct.
//
// Authentication: an operation on an existing tunnel needs its token. A request without one is
// refused (kUnauthorized) before anything is read, so callers without a token learn nothing. With
// a token, an unknown or deleted tunnel is kNotFound and a wrong token kUnauthorized: tunnel IDs
// are public hostnames, so answering 404 for them reveals nothing a DNS lookup would not.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "common/analytics/analytics_event.h"
#include "common/clock.h"
#include "common/result.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/record_publisher.h"
#include "controld/store/store.h"
#include "controld/store/tunnel_record.h"

namespace ot::controld {

// The limits behind the API (CREATE_RATE_*, ISSUANCE_RATE_*, ISSUANCE_BACKLOG_LIMIT). A rate of 0
// disables that limit; a burst below 1 counts as 1.
struct TunnelServiceConfig {
  std::string domain = "opentunnel.localhost";  // tunnels are <id>.<domain>
  int64_t createRatePerHour = 30;
  int64_t createRateBurst = 10;
  int64_t issuanceRatePerDay = 5;
  int64_t issuanceRateBurst = 5;
  int64_t issuanceBacklogLimit = 200;  // refuse while more jobs than this are pending; 0: never
  int64_t backlogCacheMs = 5000;       // the pending count is read at most this often
  // Told of every refusal by a limit: "create_rate", "issuance_rate" or "issuance_backlog" (for
  // opentunnel_requests_limited_total). Called on the request's thread; may be empty.
  std::function<void(std::string_view limit)> onLimited;
  // Told of tunnel.created and tunnel.deleted (docs/analytics.md); may be empty.
  analytics::EventSink events{};
};

// Why an operation did not happen; api_routes.cc maps each kind to one status and _tag.
enum class ServiceErrorKind {
  kBadRequest,             // 400: the input can never succeed (invalid ID, CSR refused)
  kUnauthorized,           // 401: no token, or not this tunnel's token
  kNotFound,               // 404: no such tunnel, or deleted
  kIdTaken,                // 409: the wanted ID exists
  kCertificateInProgress,  // 409: another CSR's issuance is running for this tunnel
  kConflict,               // 409: the change clashes with the state (origin exists, pool full)
  kRateLimited,            // 429: over a rate; retry_after_s says when the next one passes
  kBusy,                   // 503: issuance backlog; retry_after_s is 30
  kStale,     // 503: the tunnel changed underneath (another writer); retrying reloads it
  kStorage,   // 503: the database did not answer
  kInternal,  // 500: a bug or a broken record
};

struct ServiceError {
  ServiceErrorKind kind = ServiceErrorKind::kInternal;
  std::string message;      // safe to show the client: never holds tokens or keys
  int64_t retryAfterS = 0;  // for kRateLimited and kBusy
};

// A value or a ServiceError (the API needs more kinds than common/result.h's ErrorKind has).
template <typename T>
using ServiceResult = Result<T, ServiceError>;

// The answer to a create: the only time the token is ever returned.
struct CreatedTunnel {
  std::string id;
  std::string hostname;
  std::string token;
  std::string url;  // https://<hostname>
};

// A tunnel as the API shows it: the stored record and the live bridge count, which alone decides
// whether it is online.
struct TunnelView {
  TunnelRecord record;
  size_t bridges = 0;
  [[nodiscard]] bool online() const { return bridges > 0; }
};

struct CertificateBinding {
  CertificateInfo certificate;
  bool newRequest = false;  // false: the CSR was already bound, nothing changed
};

// The key a client address is rate limited under: an IPv4 address as is, an IPv6 address as its
// /64 ("2001:db8:1:2::/64"), an IPv4-mapped IPv6 address as the IPv4 address. Different
// spellings of one address give one key. Anything else ("" or an "ip:port" endpoint, which the
// API never passes on purpose) is "unknown": one budget shared by all such requests, so no client
// can get a fresh budget by varying the text.
[[nodiscard]] std::string clientRateKey(std::string_view clientAddress);

// The storage TunnelService touches, by role (controld passes its one Store for each).
struct TunnelServiceStores {
  TunnelStore& tunnels;
  JobStore& jobs;  // the backlog count and issuance jobs
  RateLimitStore& rateLimits;
  HealthStore& health;
};

class TunnelService {
 public:
  TunnelService(TunnelServiceConfig config, TunnelServiceStores stores,
                const BridgeRegistry& bridges, RecordPublisher& publisher, JobNotifier& notifier,
                Clock nowMs);

  // wanted_id: std::nullopt for a random ID.
  ServiceResult<CreatedTunnel> createTunnel(const std::optional<std::string>& wantedId,
                                            std::string_view clientAddress);
  // token: the bearer token, std::nullopt when the request had none.
  ServiceResult<TunnelView> getTunnel(std::string_view id, const std::optional<std::string>& token);
  ServiceResult<CertificateBinding> bindCertificate(std::string_view id,
                                                    const std::optional<std::string>& token,
                                                    std::string_view csrPem);
  ServiceResult<CertificateInfo> getCertificate(std::string_view id,
                                                const std::optional<std::string>& token);
  ServiceResult<std::monostate> deleteTunnel(std::string_view id,
                                             const std::optional<std::string>& token);
  // The database answers.
  ServiceResult<std::monostate> health();

  // A change to a live tunnel's record: edits it in place, or refuses with the error to answer
  // (then nothing is written).
  using RecordChange = std::function<std::optional<ServiceError>(TunnelRecord&)>;
  // Checks the token, applies `change` to the record read, writes it at that revision and
  // publishes it to the relays (and through them the mesh) like every record change. A write that
  // loses the race with another writer reads the record again and applies `change` afresh, a few
  // times, then answers kStale. Returns the record as written.
  ServiceResult<StoredTunnel> changeTunnel(std::string_view id,
                                           const std::optional<std::string>& token,
                                           const RecordChange& change);

  [[nodiscard]] const TunnelServiceConfig& config() const { return config_; }
  // The service's clock (routes kept in other files stamp records with it).
  [[nodiscard]] int64_t nowMs() const { return nowMs_(); }

 private:
  // Loads a live tunnel and checks the token against its stored hash.
  ServiceResult<StoredTunnel> authorize(std::string_view id,
                                        const std::optional<std::string>& token);
  // kBusy while more issuance jobs are pending than the limit allows.
  std::optional<ServiceError> checkBacklog();
  std::optional<ServiceError> charge(const std::string& key, int64_t perPeriod, int64_t periodMs,
                                     int64_t burst, std::string_view what);
  std::mutex& tunnelLock(std::string_view id);
  void limited(std::string_view limit) const;

  TunnelServiceConfig config_;
  TunnelServiceStores stores_;
  const BridgeRegistry& bridges_;
  RecordPublisher& publisher_;
  JobNotifier& notifier_;
  Clock nowMs_;

  std::mutex backlogMutex_;
  std::optional<int64_t> backlogReadAtMs_;  // last read attempt
  std::optional<int64_t> backlogPending_;   // nullopt: unknown (never read, or the read failed)
  bool backlogReading_ = false;

  std::array<std::mutex, 64> tunnelLocks_;
};

}  // namespace ot::controld
