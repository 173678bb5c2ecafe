// ControlClient's session thread: one Session stream to controld at a time, reconnected with
// backoff until stop(). Per stream the session thread writes Hello and the snapshot, reads
// SessionAccepted and then everything controld pushes (answers to attach authorizations too); a
// writer thread of the stream's own sends the deltas, counters, Draining, acks and authorization
// requests queued by the loop (the sync API allows one Read and one Write at a time, from
// different threads). When the stream ends, the authorizations it carried are failed on the loop
// at once (control_authorize.cc), so their attaches fall back to the cache without waiting.
#include <algorithm>
#include <chrono>
#include <exception>
#include <system_error>
#include <utility>
#include <vector>

#include "relayd/control_client_impl.h"
#include "relayd/relay_stats.h"

namespace ot::relayd {
namespace {

// How long an attempt waits for the channel's connect once gRPC's backoff was reset: bounds how
// long stop() can wait on this thread, and is ample for a unix socket.
constexpr std::chrono::milliseconds kConnectWait{250};

std::string describe(const grpc::Status& status) {
  return "grpc status " + std::to_string(static_cast<int>(status.error_code())) + ": " +
         status.error_message();
}

}  // namespace

void ControlClient::Impl::sessionLoop() {
  ReconnectBackoff backoff(options_.reconnectInitialMs, options_.reconnectMaxMs);
  std::uniform_real_distribution<double> jitter(0.0, 1.0);
  uint64_t failures = 0;
  for (uint64_t attempt = 1;; ++attempt) {
    log_.debug("control session attempt", {{"socket", options_.socketPath}, {"attempt", attempt}});
    sessionAttempts_.fetch_add(1, std::memory_order_relaxed);
    std::string reason;
    const bool accepted = runSession(reason);
    if (accepted) {
      backoff.reset();
      failures = 0;
    }
    ++failures;
    const uint64_t waitMs = backoff.next(jitter(random_));
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
    }
    if (accepted) {
      log_.warn("control session lost", {{"reason", reason}, {"retry_in_ms", waitMs}});
    } else if (failures == 1) {
      log_.warn("control session not established; retrying",
                {{"reason", reason}, {"retry_in_ms", waitMs}});
    } else {
      log_.debug("control session attempt failed",
                 {{"reason", reason}, {"retry_in_ms", waitMs}, {"failures", failures}});
    }
    std::unique_lock lock(mutex_);
    if (wake_.wait_for(lock, std::chrono::milliseconds(waitMs), [this] { return stopping_; })) {
      break;
    }
  }
  log_.info("control session stopped");
  std::lock_guard lock(mutex_);
  sessionExited_ = true;
  exited_.notify_all();
}

bool ControlClient::Impl::runSession(std::string& reason) {
  // A controld known to be unreachable fails the attempt without copying the mirror. gRPC keeps
  // its own reconnect backoff under ours; measured on gRPC 1.51, it found a restarted controld
  // 3.4-5 s after it listened. This attempt's timing is ours: the channel's backoff is reset so it
  // connects now, and the attempt waits briefly for that connect (a local socket: well under
  // kConnectWait) before it is judged unreachable.
  if (channel_->GetState(true) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
    grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
    const auto deadline = std::chrono::system_clock::now() + kConnectWait;
    if (!channel_->WaitForStateChange(GRPC_CHANNEL_TRANSIENT_FAILURE, deadline) ||
        channel_->GetState(true) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      reason = "controld unreachable at " + options_.socketPath;
      return false;
    }
  }

  grpc::ClientContext context;  // declared before the stream: it must outlive it
  v1::RelayMessage hello;
  std::vector<v1::RelayMessage> snapshot;
  {
    // Hello's draining flag, the snapshot and the start of the delta queue are one atomic cut,
    // made on the loop (takeSnapshot): this thread asks for it through the loop's inbox and waits
    // here; the loop copies the mirror without any lock and, in the same step, opens the outbox,
    // so whatever it reports after the copy is queued for this stream and nothing before it is.
    // No copy is made under mutex_: the loop still takes it to queue a delta, but no thread holds
    // it for more than a few field updates or a swap, whatever the number of bridges.
    std::unique_lock lock(mutex_);
    if (stopping_) {
      reason = "stopping";
      return false;
    }
    context_ = &context;
    accepted_ = false;
    streamEnded_ = false;
    streamUp_ = false;
    snapshotParts_.reset();
    const uint64_t request = ++snapshotRequest_;
    lock.unlock();
    inbox_.post([this, request] { takeSnapshot(request); });
    lock.lock();
    wake_.wait(lock, [this] { return stopping_ || snapshotParts_.has_value(); });
    if (!snapshotParts_) {
      ++snapshotRequest_;  // a takeSnapshot still queued finds itself stale
      context_ = nullptr;
      reason = "stopping";
      return false;
    }
    snapshot = std::move(*snapshotParts_);
    snapshotParts_.reset();
    v1::Hello* fields = hello.mutable_hello();
    fields->set_machine_id(options_.machineId);
    fields->set_epoch(options_.epoch);
    fields->set_started_at_unix_ms(options_.startedAtUnixMs);
    fields->set_version(options_.version);
    fields->set_draining(helloDraining_);
  }
  auto endStream = [this] {
    uint64_t stream = 0;
    {
      std::lock_guard lock(mutex_);
      streamUp_ = false;
      streamEnded_ = true;
      accepted_ = false;
      authorizeOnSession_ = false;
      acceptsBatches_ = false;
      outbox_.clear();
      context_ = nullptr;
      stream = streamGeneration_;
      wake_.notify_all();
    }
    // Attaches waiting on this stream are decided from the cache now, not at their deadline.
    inbox_.post([this, stream] { failAuthorizations(stream); });
  };

  std::unique_ptr<Stream> stream = stub_->Session(&context);
  bool ok = stream->Write(hello);
  size_t bridges = 0;
  for (const auto& part : snapshot) {
    if (!ok) break;
    bridges += static_cast<size_t>(part.snapshot().bridges_size());
    ok = stream->Write(part);
  }
  snapshot = {};
  v1::ControlMessage first;
  if (ok) ok = stream->Read(&first);
  if (ok && first.kind_case() != v1::ControlMessage::kAccepted) {
    context.TryCancel();
    (void)stream->Finish();
    endStream();
    reason = "controld did not answer hello with SessionAccepted";
    return false;
  }
  if (!ok) {
    const grpc::Status status = stream->Finish();
    endStream();
    reason = describe(status);
    return false;
  }

  const v1::SessionAccepted& accepted = first.accepted();
  {
    std::lock_guard lock(mutex_);
    accepted_ = true;
    authorizeOnSession_ = accepted.authorize_on_session();
    acceptsBatches_ = accepted.accepts_batches();
  }
  log_.info("control session accepted", {{"controld_instance", accepted.instance_id()},
                                         {"skew_ms", accepted.server_time_unix_ms() - unixNowMs()},
                                         {"bridges", bridges}});
  inbox_.post([this] { deliverSessionState(true); });

  std::thread writer;
  try {
    writer = std::thread([this, &stream, &context] { writeLoop(*stream, context); });
  } catch (const std::system_error& e) {
    reason = std::string("cannot start the writer thread: ") + e.what();
    context.TryCancel();
  }
  for (;;) {
    v1::ControlMessage message;
    if (!stream->Read(&message)) break;
    if (message.kind_case() == v1::ControlMessage::kAccepted) continue;  // only the first counts
    inbox_.post([this, message = std::move(message)] { deliverMessage(message); });
  }
  endStream();  // also tells the writer to stop
  if (writer.joinable()) writer.join();
  const grpc::Status status = stream->Finish();
  if (reason.empty()) reason = describe(status);
  inbox_.post([this] { deliverSessionState(false); });
  return true;
}

void ControlClient::Impl::writeLoop(Stream& stream, grpc::ClientContext& context) {
  using Clock = std::chrono::steady_clock;
  const auto interval =
      std::chrono::milliseconds(std::max<uint64_t>(options_.countersIntervalMs, 1));
  auto nextCounters = Clock::now() + interval;
  // The machine-wide figures: the first reading goes out at once (a new stream may be a new
  // controld, which knows none), then only when they moved.
  const auto statsInterval =
      std::chrono::milliseconds(std::max<uint64_t>(options_.statsIntervalMs, 1));
  auto nextStats = Clock::now();
  std::optional<v1::RelayStats> sentStats;
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto until = options_.stats ? std::min(nextCounters, nextStats) : nextCounters;
    wake_.wait_until(lock, until, [this] { return streamClosing() || !outbox_.empty(); });
    if (streamEnded_) return;
    const bool stopping = stopping_;
    std::deque<v1::RelayMessage> batch = std::exchange(outbox_, {});
    std::optional<v1::RelayMessage> counters;
    if (stopping || Clock::now() >= nextCounters) {
      const int64_t now = unixNowMs();
      counters = usage_.take(intervalStartUnixMs_, now);
      if (counters) intervalStartUnixMs_ = now;
      nextCounters = Clock::now() + interval;
    }
    const bool statsDue = options_.stats && (stopping || Clock::now() >= nextStats);
    if (statsDue) nextStats = Clock::now() + statsInterval;
    const bool batches = acceptsBatches_;
    lock.unlock();

    if (statsDue) {
      v1::RelayStats stats = options_.stats();
      if (!sentStats || !sameRelayStats(*sentStats, stats)) {
        sentStats = stats;
        stats.set_taken_at_unix_ms(unixNowMs());
        if (!counters) counters.emplace();  // figures alone: no tunnels, no interval
        *counters->mutable_counters()->mutable_relay() = std::move(stats);
      }
    }

    // No buffer_hint: on the synchronous API a hinted Write does not return until a later write
    // flushes it, so the writer would stall. Batching is done by merging messages instead:
    // authorizations into one AuthorizeBatch (control_authorize.cc), and what was taken here into
    // RelayBatch messages when controld reads them (one Write each: on the synchronous API every
    // Write is a wait for its completion, often a thread hop).
    std::optional<v1::Counters> sentUsage;  // kept to restore if the write fails
    if (counters) {
      sentUsage = counters->counters();
      batch.push_back(std::move(*counters));
    }
    bool ok = true;
    for (const auto& message :
         packRelayBatches(std::move(batch), batches, kMaxBatchMessages, kMaxBatchBytes)) {
      if (!stream.Write(message)) {
        ok = false;
        break;
      }
    }
    if (!ok && sentUsage) {
      // Perhaps not sent: the usage goes out with the next Counters, on this stream or the next.
      lock.lock();
      usage_.restore(*sentUsage);
      lock.unlock();
    }
    if (!ok) {
      context.TryCancel();  // the call is broken: make sure the reader stops too
      return;
    }
    if (stopping) {
      // Everything queued is out: half-close, so controld ends the call and the reader returns.
      (void)stream.WritesDone();
      return;
    }
    lock.lock();
  }
}

}  // namespace ot::relayd
