// How the API and the job runner tell the connected relays about changes, without knowing about
// gRPC: the control service implements it and fans each event out to every relay session.
// Thread-safe; never blocks on a slow relay (each session has its own bounded queue).
#pragma once

#include <string>

#include "controld/store/store.h"

namespace ot::controld {

struct ApiCertificatePem {
  std::string chainPem;
  std::string keyPem;
  int64_t notAfterMs = 0;
};

class RecordPublisher {
 public:
  virtual ~RecordPublisher() = default;
  virtual void publishRecord(const StoredTunnel& tunnel) = 0;
  virtual void publishDeleted(const std::string& tunnelId) = 0;
  virtual void publishApiCertificate(const ApiCertificatePem& certificate) = 0;
  // A mesh link to `peerMachine` came up: events sent while it was down are lost, so the relays
  // read their cached negative answers again (docs/mesh.md "Events"). No-op by default.
  virtual void recheckRecords(const std::string& /*peerMachine*/) {}
};

// Wakes the job runner when a job was added, so it does not wait for its next poll.
class JobNotifier {
 public:
  virtual ~JobNotifier() = default;
  virtual void jobAdded() = 0;
};

}  // namespace ot::controld
