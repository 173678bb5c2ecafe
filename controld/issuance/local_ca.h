// The built-in development CA (ISSUER=local). Insecure by design: its private key sits in the
// database. An ECDSA P-256 root lives in the meta table (key "local_ca", JSON {"cert", "key"}),
// so every controld on one database signs with the same root, and clients trust the one file
// written by writeCaFile (LOCAL_CA_FILE). Leaves are signed at once, no network involved.
//
// Owns a copy of the root's key and certificate, immutable after load(). issue() may run on
// several worker threads at once (signing is serialized inside).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "controld/base/openssl_util.h"
#include "controld/issuance/issuer.h"
#include "controld/store/store.h"

namespace ot::controld {

class LocalCa final : public Issuer {
 public:
  static constexpr int64_t kDefaultLeafValidityMs = 90LL * 24 * 60 * 60 * 1000;
  static constexpr const char* kMetaKey = "local_ca";
  static constexpr const char* kCommonName = "OpenTunnel local development CA";

  // Reads the root from the store, creating it first if the row is absent. Creation is
  // insert-if-absent followed by a fresh read, so controlds starting together on one database
  // all end up with whichever root was inserted first. Store errors come back as they are; a row
  // that does not hold a usable root is kInvalid (delete it to have a new root made). An empty
  // clock means unixNowMs (tests inject one to control certificate validity).
  [[nodiscard]] static Result<std::unique_ptr<LocalCa>> load(
      MetaStore& store, int64_t leafValidityMs = kDefaultLeafValidityMs, Clock nowMs = {});

  // Checks the CSR again (checkCsrForNames), then signs a leaf for request.names: CN the first
  // name, exactly those SANs, serverAuth, valid from a minute before now for leaf_validity_ms
  // (never past the root's own expiry). The chain is the leaf alone: clients trust the root.
  Result<IssuedCertificate> issue(const IssueRequest& request,
                                  const std::atomic<bool>& cancel) override;
  [[nodiscard]] const char* name() const override { return "local"; }

  [[nodiscard]] const std::string& caCertificatePem() const { return caCertificatePem_; }
  // Writes the root certificate (PEM, mode 0644 before umask) through a temporary file in the
  // same directory and a rename, so a reader never sees half a file.
  [[nodiscard]] Status writeCaFile(const std::string& path) const;

 private:
  LocalCa(int64_t leafValidityMs, Clock nowMs)
      : leafValidityMs_(leafValidityMs), nowMs_(std::move(nowMs)) {}
  // Takes the root from a meta row's value; kInvalid when it does not hold a usable one.
  [[nodiscard]] Status adopt(const std::string& stored);

  X509Ptr caCertificate_;
  EvpPkeyPtr caKey_;
  std::string caCertificatePem_;
  std::vector<uint8_t> caKeyId_;  // the root's subjectKeyIdentifier, for the leaves' AKID
  int64_t caNotAfterS_ = 0;
  int64_t leafValidityMs_;
  Clock nowMs_;
  std::mutex signMutex_;  // one signature at a time on the shared key
};

}  // namespace ot::controld
