#include "controld/mesh/mesh_events.h"

#include <utility>

#include "controld/mesh/mesh_node.h"

namespace ot::mesh {

MeshEventPublisher::MeshEventPublisher(controld::RecordPublisher& local,
                                       std::function<MeshNode*()> mesh)
    : local_(local), mesh_(std::move(mesh)) {}

void MeshEventPublisher::broadcast(FrameBody event) {
  if (MeshNode* node = mesh_ ? mesh_() : nullptr) node->broadcast(std::move(event));
}

void MeshEventPublisher::publishRecord(const controld::StoredTunnel& tunnel) {
  local_.publishRecord(tunnel);
  const controld::TunnelRecord& record = tunnel.record;
  if (record.deleted()) return broadcast(TunnelDeleted{record.id});
  if (tunnel.revision <= 1) return broadcast(TunnelCreated{record.id});
  CertificateChange change = CertificateChange::kOther;
  if (record.certificate.state == controld::CertificateState::kIssuing) {
    change = CertificateChange::kBound;
  } else if (record.certificate.state == controld::CertificateState::kReady) {
    change = CertificateChange::kReady;
  }
  broadcast(CertificateChanged{record.id, change});
}

void MeshEventPublisher::publishDeleted(const std::string& tunnelId) {
  local_.publishDeleted(tunnelId);
  broadcast(TunnelDeleted{tunnelId});
}

void MeshEventPublisher::publishApiCertificate(const controld::ApiCertificatePem& certificate) {
  // Every machine reads the domain certificate from the shared store itself.
  local_.publishApiCertificate(certificate);
}

void MeshEventPublisher::jobAdded() {
  if (notifier_ != nullptr) notifier_->jobAdded();
  broadcast(JobEnqueued{});
}

PeerEventApplier::PeerEventApplier(controld::TunnelStore& store, controld::RecordPublisher& relays,
                                   controld::JobNotifier& jobs)
    : store_(store), relays_(relays), jobs_(jobs) {}

PeerEventApplier::~PeerEventApplier() {
  stop();
}

void PeerEventApplier::start() {
  thread_ = std::thread([this] { run(); });
}

void PeerEventApplier::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeerEventApplier::apply(const FrameBody& event) {
  std::string tunnelId;
  bool deleted = false;
  if (const auto* created = std::get_if<TunnelCreated>(&event)) {
    tunnelId = created->tunnelId;
  } else if (const auto* changed = std::get_if<CertificateChanged>(&event)) {
    tunnelId = changed->tunnelId;
  } else if (const auto* gone = std::get_if<TunnelDeleted>(&event)) {
    tunnelId = gone->tunnelId;
    deleted = true;
  } else if (std::holds_alternative<JobEnqueued>(event)) {
    {
      std::lock_guard lock(mutex_);
      jobPending_ = true;
    }
    wake_.notify_one();
    return;
  } else {
    return;
  }
  {
    std::lock_guard lock(mutex_);
    if (deleted) deleted_.insert(tunnelId);
    if (queued_.contains(tunnelId)) return;
    if (queue_.size() >= kMaxPending) {
      ++dropped_;
      return;
    }
    queued_.insert(tunnelId);
    queue_.push_back(std::move(tunnelId));
  }
  wake_.notify_one();
}

void PeerEventApplier::linkUp(const std::string& machine, std::vector<std::string> localTunnels) {
  {
    std::lock_guard lock(mutex_);
    if (linkUpPending_) {
      linkUpMachines_ += "," + machine;
    } else {
      linkUpMachines_ = machine;
    }
    linkUpPending_ = true;
    linkUpTunnels_ = std::move(localTunnels);
  }
  wake_.notify_one();
}

void PeerEventApplier::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock,
               [this] { return stopping_ || jobPending_ || linkUpPending_ || !queue_.empty(); });
    if (stopping_) return;
    if (linkUpPending_) {
      linkUpPending_ = false;
      const std::string machines = std::move(linkUpMachines_);
      const std::vector<std::string> tunnels = std::move(linkUpTunnels_);
      linkUpMachines_.clear();
      linkUpTunnels_.clear();
      lock.unlock();
      checkLinkUp(machines, tunnels);
      lock.lock();
      continue;
    }
    if (dropped_ > 0) {
      log_.warn("mesh events dropped: too many pending", {{"dropped", dropped_}});
      dropped_ = 0;
    }
    if (jobPending_) {
      jobPending_ = false;
      lock.unlock();
      jobs_.jobAdded();
      lock.lock();
      continue;
    }
    std::string tunnelId = std::move(queue_.front());
    queue_.pop_front();
    queued_.erase(tunnelId);
    const bool deletedEvent = deleted_.erase(tunnelId) > 0;
    lock.unlock();
    refresh(tunnelId, deletedEvent);
    lock.lock();
  }
}

// The relays first: their FetchTunnel reads come after this point, so they see every write made
// before the peer's hello (docs/mesh.md "Events"). Then the deletions, confirmed by the store.
void PeerEventApplier::checkLinkUp(const std::string& machines,
                                   const std::vector<std::string>& localTunnels) {
  relays_.recheckRecords(machines);
  if (localTunnels.empty()) return;
  auto deleted = store_.deletedAmong(localTunnels);
  if (!deleted.ok()) {
    // The relays' own rules bound how long a deleted tunnel's bridge stays: a later link-up, an
    // attach or its own deletion event. Logged so an operator sees the check did not happen.
    log_.warn("mesh link-up check not done: storage error",
              {{"peers", machines}, {"error", deleted.error().message}});
    return;
  }
  for (const auto& id : deleted.value()) relays_.publishDeleted(id);
  if (!deleted->empty()) {
    log_.info(
        "mesh link-up check: tunnels deleted while events were lost",
        {{"peers", machines}, {"deleted", deleted->size()}, {"checked", localTunnels.size()}});
  }
}

// The database decides, never the event: a deletion the database does not confirm is ignored
// (the record as stored is pushed instead), and a record not found is only a deletion when the
// event said so.
void PeerEventApplier::refresh(const std::string& tunnelId, bool deletedEvent) {
  auto loaded = store_.getTunnel(tunnelId);
  if (!loaded.ok()) {
    log_.warn("mesh event not applied: storage error",
              {{"tunnel", tunnelId}, {"error", loaded.error().message}});
    return;
  }
  if (!loaded->has_value()) {
    if (deletedEvent) relays_.publishDeleted(tunnelId);
    return;
  }
  relays_.publishRecord(**loaded);  // a deleted record goes out as a deletion
}

}  // namespace ot::mesh
