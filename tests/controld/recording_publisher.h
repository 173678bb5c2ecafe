// A RecordPublisher for tests that records what controld would push to relays: records,
// deletions and API certificates, readable from any thread.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "controld/relays/record_publisher.h"

namespace ot::controld::test_support {

class RecordingPublisher final : public RecordPublisher {
 public:
  void publishRecord(const StoredTunnel& tunnel) override {
    const std::lock_guard lock(mutex_);
    records_.push_back(tunnel);
  }
  void publishDeleted(const std::string& tunnelId) override {
    const std::lock_guard lock(mutex_);
    deleted_.push_back(tunnelId);
  }
  void publishApiCertificate(const ApiCertificatePem& certificate) override {
    const std::lock_guard lock(mutex_);
    api_.push_back(certificate);
  }
  void recheckRecords(const std::string& peerMachine) override {
    const std::lock_guard lock(mutex_);
    rechecks_.push_back(peerMachine);
  }
  [[nodiscard]] std::vector<std::string> rechecks() const {
    const std::lock_guard lock(mutex_);
    return rechecks_;
  }
  [[nodiscard]] std::vector<StoredTunnel> records() const {
    const std::lock_guard lock(mutex_);
    return records_;
  }
  [[nodiscard]] std::vector<StoredTunnel> recordsOf(const std::string& id) const {
    const std::lock_guard lock(mutex_);
    std::vector<StoredTunnel> out;
    for (const auto& record : records_) {
      if (record.record.id == id) out.push_back(record);
    }
    return out;
  }
  [[nodiscard]] std::vector<std::string> deleted() const {
    const std::lock_guard lock(mutex_);
    return deleted_;
  }
  [[nodiscard]] std::vector<ApiCertificatePem> api() const {
    const std::lock_guard lock(mutex_);
    return api_;
  }
  [[nodiscard]] int apiCertificates() const {
    const std::lock_guard lock(mutex_);
    return static_cast<int>(api_.size());
  }

 private:
  mutable std::mutex mutex_;
  std::vector<StoredTunnel> records_;
  std::vector<std::string> deleted_;
  std::vector<std::string> rechecks_;
  std::vector<ApiCertificatePem> api_;
};

}  // namespace ot::controld::test_support
