#include "client/provision.h"

#include <thread>

#include "client/key_material.h"

namespace ot::client {
namespace {

using Clock = std::chrono::steady_clock;

// Poll quickly at first (the local CA answers at once), then every second (ACME takes a while).
constexpr int kFastPolls = 8;
constexpr std::chrono::milliseconds kFastPoll{250};
constexpr std::chrono::milliseconds kSlowPoll{1000};

Error failed(std::string message) {
  return Error{ErrorKind::kUnavailable, std::move(message)};
}

class Provisioner {
 public:
  Provisioner(const ApiClient& api, const ProvisionOptions& options)
      : api_(api), options_(options) {}

  Result<Provisioned> run();

 private:
  void say(const std::string& line) const {
    if (options_.say) options_.say(line);
  }
  void pause(std::chrono::milliseconds wait) const {
    if (options_.sleep) {
      options_.sleep(wait);
    } else {
      std::this_thread::sleep_for(wait);
    }
  }
  Status save() { return saveTunnelState(path_, state_); }
  // The saved tunnel if the server still knows it; else a new one.
  Status ensureTunnel(std::optional<TunnelState> saved);
  // The saved tunnel has everything to connect without the server: token, key, a current
  // certificate for its names.
  [[nodiscard]] bool usableUnchecked(const TunnelState& saved) const;
  Status createTunnel();
  // A key and a CSR for the tunnel's names: the saved ones when they fit.
  Status ensureCsr(bool fresh);
  Result<CertificateStatus> waitForCertificate(CertificateStatus status);
  Status writePassthroughFiles(Provisioned& provisioned) const;

  const ApiClient& api_;
  const ProvisionOptions& options_;
  std::string path_;
  TunnelState state_;
  std::optional<std::string> unchecked_;  // set: using the saved tunnel unchecked, and why
};

// Worth connecting without the server's word: it did not answer, or answered that it cannot
// now. 401 and 404 are its word (the tunnel is gone), as is any other 4xx.
bool serverUnavailable(const ApiError& error) {
  return error.status == 0 || error.status == 429 || error.status >= 500;
}

Status Provisioner::createTunnel() {
  auto created = api_.createTunnel(options_.wantedId);
  if (!created) {
    return failed("cannot create a tunnel: " + created.error().describe());
  }
  state_ = TunnelState{};
  state_.server = api_.options().server.base();
  state_.id = created->id;
  state_.hostname = created->hostname;
  state_.url = created->url;
  state_.token = created->token;
  // The token is never shown again: keep it before anything else can fail.
  if (Status saved = save(); !saved.ok()) return saved;
  say("otunnel: created tunnel " + state_.id);
  return Ok{};
}

Status Provisioner::ensureTunnel(std::optional<TunnelState> saved) {
  if (!saved) return createTunnel();
  if (options_.wantedId && *options_.wantedId != saved->id) {
    say("otunnel: the saved tunnel is " + saved->id + ", not " + *options_.wantedId +
        "; creating " + *options_.wantedId);
    return createTunnel();
  }
  // With a tunnel that can connect as it is, one try: the client does not wait out the retries
  // of an outage before it serves.
  const bool canGoUnchecked = usableUnchecked(*saved);
  ApiClientOptions once = api_.options();
  if (canGoUnchecked) once.maxRetries = 0;
  auto info = canGoUnchecked ? ApiClient(once).getTunnel(saved->id, saved->token)
                             : api_.getTunnel(saved->id, saved->token);
  if (!info && canGoUnchecked && serverUnavailable(info.error())) {
    unchecked_ = info.error().describe();
    state_ = std::move(*saved);
    return Ok{};
  }
  if (!info) {
    const int status = info.error().status;
    if (status == 401 || status == 404) {
      say("otunnel: the saved tunnel " + saved->id + " is no longer usable (" +
          info.error().message + "); creating a new one");
      return createTunnel();
    }
    return failed("cannot check the saved tunnel " + saved->id + ": " + info.error().describe());
  }
  state_ = std::move(*saved);
  state_.server = api_.options().server.base();
  state_.hostname = info->hostname;
  return Ok{};
}

bool Provisioner::usableUnchecked(const TunnelState& saved) const {
  return !saved.token.empty() && !saved.hostname.empty() && checkPrivateKeyPem(saved.keyPem).ok() &&
         certificateMatchesKey(saved.chainPem, saved.keyPem) &&
         certificateServes(saved.chainPem, saved.hostname, options_.wildcard);
}

Status Provisioner::ensureCsr(bool fresh) {
  if (fresh || !checkPrivateKeyPem(state_.keyPem).ok()) {
    auto key = generatePrivateKeyPem();
    if (!key) return key.error();
    state_.keyPem = std::move(key).value();
    state_.csrPem.clear();
    state_.chainPem.clear();
  }
  bool wildcard = options_.wildcard;
  if (!state_.csrPem.empty()) {
    auto summary = readCsr(state_.csrPem);
    const std::vector<std::string> bare{state_.hostname};
    const std::vector<std::string> both{state_.hostname, "*." + state_.hostname};
    // A wildcard once asked for is kept: dropping it would cost a new issuance each time routes
    // come and go.
    const bool fits = summary && summary->signatureValid &&
                      summary->commonName == state_.hostname &&
                      (summary->dnsNames == both || (!wildcard && summary->dnsNames == bare)) &&
                      csrMatchesKey(state_.csrPem, state_.keyPem);
    if (fits) return Ok{};
  }
  auto csr = makeCsrPem(state_.keyPem, state_.hostname, wildcard);
  if (!csr) return csr.error();
  state_.csrPem = std::move(csr).value();
  return save();
}

Result<CertificateStatus> Provisioner::waitForCertificate(CertificateStatus status) {
  const auto deadline = Clock::now() + options_.issueTimeout;
  bool announced = false;
  for (int polls = 0; status.state == "issuing"; ++polls) {
    if (!announced) {
      say("otunnel: issuing certificate...");
      announced = true;
    }
    if (Clock::now() >= deadline) {
      return failed(
          "the certificate was not issued within " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::seconds>(options_.issueTimeout).count()) +
          " s (--issue-timeout); it is still being issued, run otunnel again later");
    }
    pause(polls < kFastPolls ? kFastPoll : kSlowPoll);
    auto next = api_.getCertificate(state_.id, state_.token);
    if (!next) return failed("cannot read the certificate: " + next.error().describe());
    status = std::move(next).value();
  }
  return status;
}

Status Provisioner::writePassthroughFiles(Provisioned& provisioned) const {
  const std::string base = options_.stateDir + "/" + state_.id;
  provisioned.keyFile = base + ".key.pem";
  provisioned.chainFile = base + ".chain.pem";
  if (Status written = writePrivateFile(provisioned.keyFile, state_.keyPem); !written.ok()) {
    return written;
  }
  return writePrivateFile(provisioned.chainFile, state_.chainPem);
}

Result<Provisioned> Provisioner::run() {
  path_ = stateFilePath(options_.stateDir, api_.options().server);
  auto saved = loadTunnelState(path_);
  if (!saved) return saved.error();
  const bool hadSaved = saved->has_value();
  const std::string savedId = hadSaved ? (*saved)->id : std::string();
  if (Status tunnel = ensureTunnel(std::move(saved).value()); !tunnel.ok()) return tunnel.error();
  const bool reused = hadSaved && savedId == state_.id;
  if (unchecked_) {
    say("otunnel: cannot reach the control plane (" + *unchecked_ +
        "); connecting with the saved tunnel " + state_.id + " and checking it in the background");
    Provisioned provisioned{state_, path_, "", "", true, *unchecked_};
    if (options_.passthrough) {
      if (Status written = writePassthroughFiles(provisioned); !written.ok())
        return written.error();
      say("otunnel: key " + provisioned.keyFile);
      say("otunnel: certificate chain " + provisioned.chainFile);
    }
    return provisioned;
  }

  // A failure left over from an earlier run is retried once with a new key and CSR (binding the
  // same CSR again would only repeat the old answer).
  bool fresh = false;
  CertificateStatus status;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (Status csr = ensureCsr(fresh); !csr.ok()) return csr.error();
    auto bound = api_.bindCertificate(state_.id, state_.token, state_.csrPem);
    if (!bound) {
      if (bound.error().status == 409) {
        // Another key's certificate is being issued for this tunnel (another client with its
        // token): asking again now is refused the same way, so stop and say so.
        return failed("another certificate request for tunnel " + state_.id +
                      " is in progress (another otunnel with this tunnel's token?); run otunnel "
                      "again once it has finished: " +
                      bound.error().describe());
      }
      return failed("the server refused the certificate request: " + bound.error().describe());
    }
    const bool oldFailure = bound->state == "failed" && reused && attempt == 0;
    if (oldFailure) {
      say("otunnel: the last certificate request failed (" + bound->error +
          "); trying again with a new key");
      fresh = true;
      continue;
    }
    auto waited = waitForCertificate(std::move(bound).value());
    if (!waited) return waited.error();
    status = std::move(waited).value();
    break;
  }
  if (status.state == "failed") {
    return failed("the certificate could not be issued: " +
                  (status.error.empty() ? std::string("no reason given") : status.error));
  }
  if (status.state != "ready") {
    return failed("the server left the certificate in state \"" + status.state + "\"");
  }
  if (!certificateMatchesKey(status.chain, state_.keyPem)) {
    return failed("the server's certificate is not for this client's key");
  }
  state_.chainPem = status.chain;
  if (Status savedNow = save(); !savedNow.ok()) return savedNow.error();

  Provisioned provisioned{state_, path_, "", "", false, ""};
  if (options_.passthrough) {
    if (Status written = writePassthroughFiles(provisioned); !written.ok()) return written.error();
    say("otunnel: key " + provisioned.keyFile);
    say("otunnel: certificate chain " + provisioned.chainFile);
  }
  return provisioned;
}

}  // namespace

Result<Provisioned> provisionTunnel(const ApiClient& api, const ProvisionOptions& options) {
  Provisioner provisioner(api, options);
  return provisioner.run();
}

Status saveCertificate(Provisioned& provisioned, const std::string& chainPem) {
  provisioned.state.chainPem = chainPem;
  if (Status saved = saveTunnelState(provisioned.statePath, provisioned.state); !saved.ok()) {
    return saved;
  }
  if (provisioned.chainFile.empty()) return Ok{};
  return writePrivateFile(provisioned.chainFile, chainPem);
}

std::string tunnelDomain(const TunnelState& state) {
  const std::string prefix = state.id + ".";
  if (state.hostname.starts_with(prefix)) return state.hostname.substr(prefix.size());
  return state.hostname;
}

}  // namespace ot::client
