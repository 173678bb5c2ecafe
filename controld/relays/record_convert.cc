#include "controld/relays/record_convert.h"

#include <openssl/pem.h>

#include <algorithm>

#include "common/crypto.h"
#include "controld/base/openssl_util.h"

namespace ot::controld {

std::optional<std::string> tokenHashBytes(std::string_view hex) {
  if (hex.size() != 2 * crypto::kSha256Size) return std::nullopt;
  auto bytes = crypto::fromHex(hex);
  if (!bytes) return std::nullopt;
  return std::string(bytes->begin(), bytes->end());
}

bool certificateUsable(const CertificateInfo& certificate, int64_t nowMs) {
  return !certificate.chainPem.empty() && certificate.notAfterMs > nowMs;
}

cv1::CertificateState toProtoState(CertificateState state) {
  switch (state) {
    case CertificateState::kNone:
      return cv1::CERTIFICATE_STATE_NONE;
    case CertificateState::kIssuing:
      return cv1::CERTIFICATE_STATE_ISSUING;
    case CertificateState::kReady:
      return cv1::CERTIFICATE_STATE_READY;
    case CertificateState::kFailed:
      return cv1::CERTIFICATE_STATE_FAILED;
  }
  return cv1::CERTIFICATE_STATE_UNSPECIFIED;
}

cv1::TunnelRecord toProtoRecord(const TunnelRecord& record, int64_t revision, int64_t nowMs) {
  return toProtoRecord(record, revision, nowMs, installedOriginSecret());
}

cv1::TunnelRecord toProtoRecord(const TunnelRecord& record, int64_t revision, int64_t nowMs,
                                const std::optional<OriginSecret>& secret) {
  cv1::TunnelRecord out;
  out.set_tunnel_id(record.id);
  out.set_revision(revision > 0 ? static_cast<uint64_t>(revision) : 0);
  out.set_token_sha256(tokenHashBytes(record.tokenSha256Hex).value_or(std::string()));
  out.set_hostname(record.hostname);
  out.set_certificate_state(toProtoState(record.certificate.state));
  const bool ready = certificateUsable(record.certificate, nowMs);
  out.set_cert_ready(ready);
  out.set_cert_not_after_unix_ms(ready ? record.certificate.notAfterMs : 0);
  out.set_deleted(record.deleted());
  if (secret) {
    for (const OriginEntry& origin : record.origins) {
      cv1::OriginCredential* credential = out.add_origins();
      credential->set_name(origin.name);
      const auto digest = crypto::sha256(
          deriveOriginCredential(*secret, record.id, origin.name, record.credentialGeneration));
      credential->set_credential_sha256(std::string(digest.begin(), digest.end()));
      if (origin.direct) {
        // Every relay machine of the region dials it (docs/pools-direct.md).
        credential->set_direct_address(origin.direct->address);
        credential->set_direct_links(origin.direct->links);
      }
    }
  }
  out.set_balancing(record.balancing == Balancing::kPriority ? cv1::BALANCING_PRIORITY
                                                             : cv1::BALANCING_SPREAD);
  // 0 on the wire means "the default" (10000), so a hold of 0 the owner asked for is sent as 1 ms,
  // which relayd treats as no hold at all.
  out.set_sticky_hold_ms(static_cast<uint32_t>(std::max<int64_t>(1, record.stickyHoldMs)));
  out.set_credential_generation(record.credentialGeneration);
  return out;
}

Result<cv1::ApiCertificate> toProtoCertificate(const ApiCertificatePem& certificate) {
  BioPtr bio(
      BIO_new_mem_buf(certificate.chainPem.data(), static_cast<int>(certificate.chainPem.size())));
  if (bio == nullptr) return Error{ErrorKind::kInternal, takeOpensslError()};
  X509Ptr leaf(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (leaf == nullptr) {
    return Error{ErrorKind::kInvalid,
                 "the API certificate chain holds no certificate: " + takeOpensslError()};
  }
  unsigned char* der = nullptr;
  const int size = i2d_X509(leaf.get(), &der);
  if (size <= 0) return Error{ErrorKind::kInternal, takeOpensslError()};
  const auto digest = crypto::sha256(std::span<const uint8_t>(der, static_cast<size_t>(size)));
  OPENSSL_free(der);

  cv1::ApiCertificate out;
  out.set_certificate_chain_pem(certificate.chainPem);
  out.set_private_key_pem(certificate.keyPem);
  out.set_not_after_unix_ms(certificate.notAfterMs);
  out.set_fingerprint_sha256(crypto::toHex(digest));
  return out;
}

BridgeEntry bridgeEntryFromProto(const cv1::Bridge& bridge) {
  BridgeEntry entry;
  entry.bridgeId = bridge.bridge_id();
  entry.tunnelId = bridge.tunnel_id();
  entry.routes.assign(bridge.routes().begin(), bridge.routes().end());
  entry.origin = bridge.origin();
  entry.profile = bridge.profile();
  entry.profileIndex = bridge.profile_index();
  entry.maxConns = bridge.max_conns();
  entry.attachedAtMs = bridge.attached_at_unix_ms();
  entry.peerAddress = bridge.peer_address();
  return entry;
}

}  // namespace ot::controld
