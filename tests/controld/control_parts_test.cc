// The parts of controld's control service that need no server: record conversion, the bounded
// session outbox, hourly usage rows and the usage recorder.
#include <limits>
#include <thread>

#include "controld/relays/record_convert.h"
#include "controld/relays/session_outbox.h"
#include "controld/relays/usage_recorder.h"
#include "tests/controld/control_harness.h"

namespace ot::controld {
namespace {

using testing::kDayMs;
using testing::kNowMs;
using testing::readyTunnel;
using testing::sha256Bytes;

TEST_CASE("control: token hashes convert from hex to 32 bytes") {
  const std::string hex = testing::sha256Hex("token-alpha");
  REQUIRE(hex.size() == 64);
  CHECK(tokenHashBytes(hex) == sha256Bytes("token-alpha"));
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  CHECK(tokenHashBytes(upper) == sha256Bytes("token-alpha"));
  CHECK_FALSE(tokenHashBytes("").has_value());
  CHECK_FALSE(tokenHashBytes(hex.substr(0, 62)).has_value());
  CHECK_FALSE(tokenHashBytes(hex + "00").has_value());
  CHECK_FALSE(tokenHashBytes(std::string(63, 'a') + "g").has_value());
}

TEST_CASE("control: a certificate is usable while a chain exists and has not expired") {
  CertificateInfo info;
  CHECK_FALSE(certificateUsable(info, kNowMs));  // never issued
  info.chainPem = "chain";
  info.notAfterMs = kNowMs + 1;
  info.state = CertificateState::kReady;
  CHECK(certificateUsable(info, kNowMs));
  info.state = CertificateState::kIssuing;  // a renewal is running
  CHECK(certificateUsable(info, kNowMs));
  info.state = CertificateState::kFailed;  // the renewal gave up; the old chain still serves
  CHECK(certificateUsable(info, kNowMs));
  info.notAfterMs = kNowMs;  // expired at this very millisecond
  CHECK_FALSE(certificateUsable(info, kNowMs));
  info.notAfterMs = kNowMs + kDayMs;
  info.chainPem.clear();
  CHECK_FALSE(certificateUsable(info, kNowMs));
}

TEST_CASE("control: a stored record becomes the TunnelRecord relayd caches") {
  TunnelRecord record = readyTunnel("alpha");
  record.certificate.state = CertificateState::kIssuing;
  cv1::TunnelRecord proto = toProtoRecord(StoredTunnel{record, 42}, kNowMs);
  CHECK(proto.tunnel_id() == "alpha");
  CHECK(proto.revision() == 42);
  CHECK(proto.token_sha256() == sha256Bytes("token-alpha"));
  CHECK(proto.hostname() == "alpha.tunnels.test");
  CHECK(proto.certificate_state() == cv1::CERTIFICATE_STATE_ISSUING);
  CHECK(proto.cert_ready());
  CHECK(proto.max_conns_per_bridge() == 0);
  CHECK(proto.max_conns_per_tunnel() == 0);
  CHECK(proto.max_routes() == 0);
  CHECK(proto.origins_size() == 0);
  CHECK_FALSE(proto.deleted());

  CHECK_FALSE(toProtoRecord(record, 1, record.certificate.notAfterMs).cert_ready());
  record.tokenSha256Hex = "not hex";
  record.deletedAtMs = kNowMs;
  proto = toProtoRecord(record, -3, kNowMs);
  CHECK(proto.token_sha256().empty());  // matches no token
  CHECK(proto.deleted());
  CHECK(proto.revision() == 0);

  CHECK(toProtoState(CertificateState::kNone) == cv1::CERTIFICATE_STATE_NONE);
  CHECK(toProtoState(CertificateState::kReady) == cv1::CERTIFICATE_STATE_READY);
  CHECK(toProtoState(CertificateState::kFailed) == cv1::CERTIFICATE_STATE_FAILED);
}

TEST_CASE("control: the API certificate message carries the leaf's fingerprint") {
  const auto certificate = testing::selfSignedCertificate("api.tunnels.test");
  auto proto = toProtoCertificate(certificate.pem);
  REQUIRE(proto.ok());
  CHECK(proto->fingerprint_sha256() == certificate.fingerprint);
  CHECK(proto->fingerprint_sha256().size() == 64);
  CHECK(proto->certificate_chain_pem() == certificate.pem.chainPem);
  CHECK(proto->private_key_pem() == certificate.pem.keyPem);
  CHECK(proto->not_after_unix_ms() == certificate.pem.notAfterMs);

  // The leaf comes first: an intermediate after it does not change the fingerprint.
  const auto other = testing::selfSignedCertificate("intermediate.test");
  ApiCertificatePem chain = certificate.pem;
  chain.chainPem += other.pem.chainPem;
  auto withIntermediate = toProtoCertificate(chain);
  REQUIRE(withIntermediate.ok());
  CHECK(withIntermediate->fingerprint_sha256() == certificate.fingerprint);

  auto empty = toProtoCertificate(ApiCertificatePem{});
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().kind == ErrorKind::kInvalid);
  CHECK_FALSE(
      toProtoCertificate(ApiCertificatePem{"-----BEGIN CERTIFICATE-----\nAAAA\n", "", 0}).ok());
}

TEST_CASE("control: relay bridges convert into registry entries") {
  const cv1::Bridge bridge = testing::makeBridge("b1", "alpha", {"", "api"});
  const BridgeEntry entry = bridgeEntryFromProto(bridge);
  CHECK(entry.bridgeId == "b1");
  CHECK(entry.tunnelId == "alpha");
  CHECK(entry.routes == std::vector<std::string>{"", "api"});
  CHECK(entry.origin == "laptop");
  CHECK(entry.profile == "wss-443");
  CHECK(entry.maxConns == 64);
  CHECK(entry.attachedAtMs == kNowMs - 1000);
  CHECK(entry.peerAddress == "192.0.2.7:40000");
}

cv1::ControlMessage deletion(const std::string& id) {
  cv1::ControlMessage message;
  message.mutable_tunnel_deleted()->set_tunnel_id(id);
  return message;
}

TEST_CASE("control: a session outbox is bounded and closes itself when it overflows") {
  SessionOutbox outbox(3);
  CHECK(outbox.push(deletion("a")));
  CHECK(outbox.push(deletion("b")));
  CHECK(outbox.push(deletion("c")));
  CHECK(outbox.size() == 3);
  auto first = outbox.pop();
  REQUIRE(first.has_value());
  CHECK(first->tunnel_deleted().tunnel_id() == "a");
  CHECK(outbox.push(deletion("d")));
  CHECK_FALSE(outbox.overflowed());
  CHECK_FALSE(outbox.push(deletion("e")));  // the fourth queued message: over the limit
  CHECK(outbox.overflowed());
  CHECK(outbox.size() == 0);
  CHECK_FALSE(outbox.pop().has_value());  // closed: the writer stops at once
  CHECK_FALSE(outbox.push(deletion("f")));
}

TEST_CASE("control: closing a session outbox wakes its writer") {
  SessionOutbox outbox(10);
  std::optional<cv1::ControlMessage> got = deletion("unset");
  std::thread writer([&] { got = outbox.pop(); });
  outbox.close();
  writer.join();
  CHECK_FALSE(got.has_value());
  CHECK_FALSE(outbox.overflowed());
  CHECK_FALSE(outbox.push(deletion("late")));
}

TEST_CASE("control: counters become hourly usage rows") {
  CHECK(hourStart(0) == 0);
  CHECK(hourStart(kHourMs - 1) == 0);
  CHECK(hourStart(kHourMs) == kHourMs);
  CHECK(hourStart(kNowMs) == kNowMs - kNowMs % kHourMs);
  CHECK(hourStart(-1) == -kHourMs);

  cv1::Counters counters;
  counters.set_interval_start_unix_ms(5 * kHourMs - 30'000);
  counters.set_interval_end_unix_ms(5 * kHourMs + 30'000);  // ends in the next hour: counts there
  auto* alpha = counters.add_tunnels();
  alpha->set_tunnel_id("alpha");
  alpha->set_bytes_in(10);
  alpha->set_bytes_out(20);
  alpha->set_connections(1);
  counters.add_tunnels()->set_tunnel_id("idle");
  auto* huge = counters.add_tunnels();
  huge->set_tunnel_id("huge");
  huge->set_bytes_in(std::numeric_limits<uint64_t>::max());
  counters.add_tunnels()->set_bytes_in(5);  // no tunnel id

  auto rows = usageRows(counters, kNowMs);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0] == UsageRow{"alpha", 5 * kHourMs, 10, 20, 1});
  CHECK(rows[1] == UsageRow{"huge", 5 * kHourMs, std::numeric_limits<int64_t>::max(), 0, 0});

  counters.set_interval_end_unix_ms(0);  // no end: now
  rows = usageRows(counters, kNowMs);
  REQUIRE_FALSE(rows.empty());
  CHECK(rows[0].hourStartMs == hourStart(kNowMs));
}

TEST_CASE("control: the usage recorder sums per hour and keeps what it could not write") {
  testing::TempDir dir;
  auto real = testing::openTestStore(dir.path() / "store.db");
  testing::FlakyStore store(*real);
  UsageRecorder recorder(
      store, UsageRecorderOptions{std::chrono::milliseconds(60'000), 2, [] { return kNowMs; }});
  auto report = [](const std::string& tunnel, int64_t endMs, uint64_t bytes) {
    cv1::Counters counters;
    counters.set_interval_end_unix_ms(endMs);
    auto* entry = counters.add_tunnels();
    entry->set_tunnel_id(tunnel);
    entry->set_bytes_in(bytes);
    entry->set_bytes_out(2 * bytes);
    entry->set_connections(1);
    return counters;
  };
  const int64_t hour = hourStart(kNowMs);
  recorder.add(report("alpha", hour + 10, 100));
  recorder.add(report("alpha", hour + 20, 5));
  CHECK(recorder.pending() == 1);
  recorder.add(report("alpha", hour + kHourMs, 7));  // the next hour: its own row
  CHECK(recorder.pending() == 2);
  recorder.add(report("bravo", hour, 1));  // past max_pending rows: dropped, counted
  CHECK(recorder.pending() == 2);
  CHECK(recorder.droppedRows() == 1);

  store.down = true;
  const Status failed = recorder.flush();
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().kind == ErrorKind::kUnavailable);
  CHECK(recorder.pending() == 2);  // kept for the next try
  recorder.add(report("alpha", hour + 30, 1));
  CHECK(recorder.pending() == 2);

  store.down = false;
  REQUIRE(recorder.flush().ok());
  CHECK(recorder.pending() == 0);
  const auto file = dir.path() / "store.db";
  testing::UsageInDb usage = testing::usageInDb(file, "alpha", hour);
  CHECK(usage.bytesIn == 106);
  CHECK(usage.bytesOut == 212);
  CHECK(usage.connections == 3);
  usage = testing::usageInDb(file, "alpha", hour + kHourMs);
  CHECK(usage.bytesIn == 7);
  CHECK(usage.connections == 1);
  CHECK(testing::usageInDb(file, "bravo", hour).bytesIn == -1);

  // The background thread: its last round, when stopped, adds to the stored row.
  recorder.add(report("alpha", hour + 40, 1000));
  recorder.start();
  recorder.stop();
  CHECK(recorder.pending() == 0);
  usage = testing::usageInDb(file, "alpha", hour);
  CHECK(usage.bytesIn == 1106);
  CHECK(usage.bytesOut == 2212);
  CHECK(usage.connections == 4);
}

}  // namespace
}  // namespace ot::controld
