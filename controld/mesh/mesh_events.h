// The mesh's events (docs/mesh.md "Events"): what one machine's API and job runner change is told
// to every linked peer, so the peers' relayds do not serve stale copies of a tunnel's record.
//
// MeshEventPublisher stands between the API / job runner and this machine's own relays: it passes
// every change on locally (the RelayHub, the job runner) and, with the mesh running, broadcasts
// the matching event (tunnel created, certificate changed, tunnel deleted, job enqueued).
//
// PeerEventApplier acts on the events peers send, off the mesh loop (a store read each): the
// tunnel's record is read again and pushed to this machine's relays (a deletion only once the
// database says so), and a job enqueued wakes this machine's job runner. Events for one tunnel
// that arrive while its read is pending are folded into it.
//
// A link that comes up (linkUp) stands for the events its peer may have sent while it was down,
// which are lost: the relays are told to read their cached negative answers again
// (RecheckRecords), and one store query per 500 tunnels finds which tunnels with a bridge here the
// database says are deleted; each goes out as a deletion, closing its bridges, as a confirmed
// tunnel_deleted event would. Link-ups that arrive while one waits are folded into it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/log.h"
#include "controld/mesh/link_frames.h"
#include "controld/relays/record_publisher.h"
#include "controld/store/store.h"

namespace ot::mesh {

class MeshNode;

class MeshEventPublisher final : public controld::RecordPublisher, public controld::JobNotifier {
 public:
  // `local`: this machine's relays (the hub). `mesh`: the node when the mesh runs, else nullptr,
  // asked per change (the node starts after the API and the job runner are built).
  MeshEventPublisher(controld::RecordPublisher& local, std::function<MeshNode*()> mesh);

  // The job runner, once built (it takes this publisher first).
  void setLocalNotifier(controld::JobNotifier* notifier) { notifier_ = notifier; }

  void publishRecord(const controld::StoredTunnel& tunnel) override;
  void publishDeleted(const std::string& tunnelId) override;
  void publishApiCertificate(const controld::ApiCertificatePem& certificate) override;
  void jobAdded() override;

 private:
  void broadcast(FrameBody event);

  controld::RecordPublisher& local_;
  controld::JobNotifier* notifier_ = nullptr;
  std::function<MeshNode*()> mesh_;
};

class PeerEventApplier {
 public:
  // Pending tunnels beyond this are dropped (counted in the log): the link-up checks and the
  // relays' own re-reads cover them.
  static constexpr size_t kMaxPending = 10'000;

  PeerEventApplier(controld::TunnelStore& store, controld::RecordPublisher& relays,
                   controld::JobNotifier& jobs);
  ~PeerEventApplier();  // stop()
  PeerEventApplier(const PeerEventApplier&) = delete;
  PeerEventApplier& operator=(const PeerEventApplier&) = delete;

  void start();
  void stop();

  // From the mesh loop: never blocks on the store.
  void apply(const FrameBody& event);
  // From the mesh loop: a link to `machine` came up; `localTunnels`: the tunnels with a bridge on
  // this machine now. Never blocks on the store.
  void linkUp(const std::string& machine, std::vector<std::string> localTunnels);

 private:
  void run();
  void refresh(const std::string& tunnelId, bool deletedEvent);
  void checkLinkUp(const std::string& machines, const std::vector<std::string>& localTunnels);

  controld::TunnelStore& store_;
  controld::RecordPublisher& relays_;
  controld::JobNotifier& jobs_;
  log::Logger log_{"controld.mesh"};

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::string> queue_;            // tunnel IDs in arrival order
  std::unordered_set<std::string> queued_;   // the same, for folding repeats
  std::unordered_set<std::string> deleted_;  // queued tunnels a deletion event named
  bool jobPending_ = false;
  bool linkUpPending_ = false;
  std::string linkUpMachines_;              // the links folded into the pending check, for the log
  std::vector<std::string> linkUpTunnels_;  // the latest set: the check reads what is here now
  bool stopping_ = false;
  size_t dropped_ = 0;
  std::thread thread_;
};

}  // namespace ot::mesh
