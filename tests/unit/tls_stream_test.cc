// TlsStream: two real OpenSSL engines (a client and a server on the test PKI) joined by queues the
// test moves by hand, so each step (handshake, data, a pause, close_notify, a failure) is seen in
// order.
#include "common/tls_stream.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/unit/test_certs.h"

namespace {

using ot::tls::TlsEngine;
using ot::tls::TlsStream;

struct StreamPki {
  ot::test::TestCert ca = ot::test::makeCa("TlsStream Test CA");
  ot::test::TestCert leaf = ot::test::makeLeaf(ca, "stream.test", 2);
};

const StreamPki& streamPki() {
  static const StreamPki instance;
  return instance;
}

ot::tls::SslCtxPtr serverContext() {
  auto ctx = ot::tls::makeServerContext(streamPki().leaf.certPem + streamPki().ca.certPem,
                                        streamPki().leaf.keyPem, {});
  REQUIRE(ctx.ok());
  return ctx.value();
}

// The client verifies the server's chain against the test CA (written to a file: the client
// context takes a path) and its name.
ot::tls::SslCtxPtr clientContext() {
  static const ot::test::CaFile caFile(streamPki().ca, "tls-stream-test");
  auto ctx = ot::tls::makeClientContext(caFile.string(), {});
  REQUIRE(ctx.ok());
  return ctx.value();
}

std::span<const uint8_t> asBytes(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// One side: records what the stream told it and queues its ciphertext for the other side.
struct StreamSide final : TlsStream::Owner {
  explicit StreamSide(std::unique_ptr<TlsEngine> engine, size_t plainBufferBytes = 16 * 1024)
      : buffer(plainBufferBytes), tls(std::move(engine), *this, buffer) {}

  bool sendCiphertext(std::vector<uint8_t> bytes) override {
    outbox.push_back(std::move(bytes));
    return transportOpen;
  }
  void onTlsHandshakeDone() override {
    ++handshakes;
    if (!sendOnHandshake.empty()) REQUIRE(tls.write(asBytes(sendOnHandshake)));
  }
  void onTlsPlaintext(std::span<uint8_t> bytes) override {
    received.append(bytes.begin(), bytes.end());
    ++deliveries;
    if (pauseAfterDelivery) wants = false;
    if (!answer.empty()) REQUIRE(tls.write(asBytes(std::exchange(answer, {}))));
  }
  void onTlsCloseNotify() override { ++closeNotifies; }
  void onTlsFailed() override { ++failures; }
  [[nodiscard]] bool wantsTlsPlaintext() const override { return wants && tls.handshakeDone(); }
  [[nodiscard]] bool holdsTlsOutput() const override { return holds; }
  void onTlsStepDelivered() override { ++stepsDelivered; }

  std::vector<uint8_t> buffer;
  TlsStream tls;
  std::deque<std::vector<uint8_t>> outbox;
  std::string received;
  int handshakes = 0;
  int deliveries = 0;
  int closeNotifies = 0;
  int failures = 0;
  int stepsDelivered = 0;
  bool wants = true;
  bool pauseAfterDelivery = false;
  bool transportOpen = true;
  std::string sendOnHandshake;  // written as soon as the handshake is done
  std::string answer;           // written once, on the first plaintext
  bool holds = false;           // holdsTlsOutput(): an answer will come later
};

// Moves queued ciphertext both ways until neither side has any.
void exchange(StreamSide& a, StreamSide& b) {
  while (!a.outbox.empty() || !b.outbox.empty()) {
    while (!a.outbox.empty()) {
      std::vector<uint8_t> bytes = std::move(a.outbox.front());
      a.outbox.pop_front();
      b.tls.receive(bytes);
    }
    while (!b.outbox.empty()) {
      std::vector<uint8_t> bytes = std::move(b.outbox.front());
      b.outbox.pop_front();
      a.tls.receive(bytes);
    }
  }
}

// A well-framed handshake record whose ClientHello is two bytes long: the server answers it
// with a decode_error alert.
const std::vector<uint8_t> kBrokenHello = {0x16, 0x03, 0x01, 0x00, 0x06, 0x01,
                                           0x00, 0x00, 0x02, 0xff, 0xff};

struct StreamPair {
  StreamSide client{TlsEngine::client(clientContext(), "stream.test", true)};
  StreamSide server{TlsEngine::server(serverContext())};

  void handshake() {
    REQUIRE(client.tls.startHandshake());
    exchange(client, server);
    REQUIRE(client.tls.handshakeDone());
    REQUIRE(server.tls.handshakeDone());
  }
};

}  // namespace

TEST_CASE("TlsStream: the handshake completes once on each side, then data flows both ways") {
  StreamPair pair;
  REQUIRE(pair.client.tls.valid());
  pair.handshake();
  CHECK(pair.client.handshakes == 1);
  CHECK(pair.server.handshakes == 1);

  const std::string request(100'000, 'q');  // several records, more than one plaintext buffer
  REQUIRE(pair.client.tls.write(asBytes(request)));
  CHECK_FALSE(pair.client.outbox.empty());  // write sends at once
  exchange(pair.client, pair.server);
  CHECK(pair.server.received == request);

  REQUIRE(pair.server.tls.write(asBytes("answer")));
  exchange(pair.client, pair.server);
  CHECK(pair.client.received == "answer");
  CHECK(pair.client.failures + pair.server.failures == 0);
}

TEST_CASE("TlsStream: an owner that stops wanting plaintext gets no more until it resumes") {
  StreamPair pair;
  // A fresh server side on a small buffer: deliveries come 1000 bytes at a time.
  StreamSide server{TlsEngine::server(serverContext()), 1000};
  REQUIRE(pair.client.tls.startHandshake());
  exchange(pair.client, server);
  REQUIRE(server.tls.handshakeDone());

  server.pauseAfterDelivery = true;
  REQUIRE(pair.client.tls.write(asBytes(std::string(5000, 'x'))));
  exchange(pair.client, server);
  CHECK(server.deliveries == 1);
  CHECK(server.received.size() == 1000);
  CHECK(server.tls.pendingPlaintext() > 0);

  server.pauseAfterDelivery = false;
  server.wants = true;
  server.tls.resume();
  CHECK(server.received == std::string(5000, 'x'));
  CHECK(server.tls.pendingPlaintext() == 0);
}

TEST_CASE("TlsStream: close_notify reaches the peer as the end of its plaintext") {
  StreamPair pair;
  pair.handshake();
  REQUIRE(pair.client.tls.writeThenCloseNotify(asBytes("last words")));
  CHECK(pair.client.outbox.size() == 1);  // the answer and the alert leave as one piece
  exchange(pair.client, pair.server);
  CHECK(pair.server.received == "last words");
  CHECK(pair.server.closeNotifies == 1);
  CHECK(pair.server.failures == 0);

  pair.server.tls.closeNotify();
  exchange(pair.client, pair.server);
  CHECK(pair.client.closeNotifies == 1);
}

TEST_CASE(
    "TlsStream: a peer that sends a broken hello fails the handshake, and the alert goes out") {
  StreamSide server{TlsEngine::server(serverContext())};
  server.tls.receive(kBrokenHello);
  CHECK(server.failures == 1);
  CHECK(server.handshakes == 0);
  CHECK_FALSE(server.tls.errorText().empty());
  CHECK_FALSE(server.outbox.empty());  // the alert
}

TEST_CASE(
    "TlsStream: a transport that closed while the handshake output went out stops the stream") {
  StreamSide server{TlsEngine::server(serverContext())};
  server.transportOpen = false;
  server.tls.receive(kBrokenHello);
  CHECK(server.failures == 0);  // the owner is closing; nobody is told twice

  StreamPair pair;
  REQUIRE(pair.client.tls.startHandshake());
  pair.client.transportOpen = false;
  exchange(pair.client, pair.server);
  CHECK(pair.client.tls.handshakeDone());
  // The owner heard of the handshake before its Finished went (with whatever it wrote then); the
  // failed flush reports nothing more: the owner is closing.
  CHECK(pair.client.handshakes == 1);
  CHECK(pair.client.failures == 0);
  CHECK(pair.client.stepsDelivered == 0);
}

TEST_CASE("TlsStream: records left unread while paused survive the reuse of the read buffer") {
  StreamPair pair;
  StreamSide server{TlsEngine::server(serverContext()), 1000};
  REQUIRE(pair.client.tls.startHandshake());
  exchange(pair.client, server);
  REQUIRE(server.tls.handshakeDone());

  // Several records in one "socket read", received from a buffer that is scribbled over as soon
  // as receive() returns (the shared read buffer of a loop); the owner pauses after the first
  // 1000 bytes, so most of the records are still unread then.
  const std::string text(40'000, 'z');
  REQUIRE(pair.client.tls.write(asBytes(text)));
  std::vector<uint8_t> wire;
  for (const auto& piece : pair.client.outbox) wire.insert(wire.end(), piece.begin(), piece.end());
  pair.client.outbox.clear();
  std::vector<uint8_t> readBuffer = wire;
  server.pauseAfterDelivery = true;
  server.tls.receive(readBuffer);
  std::fill(readBuffer.begin(), readBuffer.end(), uint8_t{0x5A});
  CHECK(server.received.size() == 1000);

  server.pauseAfterDelivery = false;
  server.wants = true;
  server.tls.resume();
  // resume() delivers what the engine holds decrypted; the rest comes with the next read.
  const std::vector<uint8_t> nothing;
  server.tls.receive(nothing);
  CHECK(server.failures == 0);
  CHECK(server.received == text);
}

// ---- handshake steps on a runner -------------------------------------------------------------

namespace {

// Runs the steps when the test says, the way a worker thread and then the loop would.
struct ManualRunner final : ot::tls::HandshakeRunner {
  std::deque<std::unique_ptr<Job>> jobs;
  void submit(std::unique_ptr<Job> job) override { jobs.push_back(std::move(job)); }
  size_t runAll() {
    size_t ran = 0;
    while (!jobs.empty()) {
      std::unique_ptr<Job> job = std::move(jobs.front());
      jobs.pop_front();
      job->status = job->engine->handshake();
      TlsStream::handshakeStepDone(std::move(job));
      ++ran;
    }
    return ran;
  }
};

// exchange(), running the server's steps whenever nothing else moves.
void exchangeWithSteps(StreamSide& client, StreamSide& server, ManualRunner& runner) {
  do {
    exchange(client, server);
  } while (runner.runAll() > 0 || !server.outbox.empty());
}

std::vector<uint8_t> joined(std::deque<std::vector<uint8_t>>& outbox) {
  std::vector<uint8_t> all;
  for (const auto& bytes : outbox) all.insert(all.end(), bytes.begin(), bytes.end());
  outbox.clear();
  return all;
}

}  // namespace

TEST_CASE("TlsStream on a runner: each handshake step runs there, and the engine waits for it") {
  StreamPair pair;
  ManualRunner runner;
  pair.server.tls.runHandshakeOn(&runner);
  REQUIRE(pair.client.tls.startHandshake());
  const std::vector<uint8_t> hello = joined(pair.client.outbox);
  pair.server.tls.receive(hello);
  CHECK(pair.server.tls.stepRunning());
  CHECK(runner.jobs.size() == 1);
  CHECK(pair.server.outbox.empty());  // nothing ran on the caller's thread
  CHECK_FALSE(pair.server.tls.handshakeDone());
  CHECK(pair.server.tls.errorText().empty());
  CHECK(pair.server.tls.flush());                      // no engine access while it runs
  CHECK(pair.server.tls.write(asBytes("too early")));  // taken as before a handshake: nothing
  CHECK(pair.server.outbox.empty());

  CHECK(runner.runAll() == 1);
  CHECK_FALSE(pair.server.tls.stepRunning());
  CHECK_FALSE(pair.server.outbox.empty());  // the server's flight, sent once the step was back
  exchangeWithSteps(pair.client, pair.server, runner);
  REQUIRE(pair.client.tls.handshakeDone());
  REQUIRE(pair.server.tls.handshakeDone());
  CHECK(pair.server.handshakes == 1);
  CHECK(pair.server.stepsDelivered == 1);

  // Past the handshake the records never go to the runner.
  REQUIRE(pair.client.tls.write(asBytes("after")));
  exchange(pair.client, pair.server);
  CHECK(runner.jobs.empty());
  CHECK(pair.server.received == "after");
}

TEST_CASE("TlsStream on a runner: bytes that arrive during a step wait for it, then go on") {
  StreamPair pair;
  ManualRunner runner;
  pair.server.tls.runHandshakeOn(&runner);
  REQUIRE(pair.client.tls.startHandshake());
  const std::vector<uint8_t> hello = joined(pair.client.outbox);
  REQUIRE(hello.size() > 20);
  // A ClientHello cut in two: the first step wants more, and the rest arrives while it runs.
  pair.server.tls.receive(std::span<const uint8_t>(hello).first(20));
  pair.server.tls.receive(std::span<const uint8_t>(hello).subspan(20));
  CHECK(runner.jobs.size() == 1);
  CHECK(runner.runAll() == 2);  // the held rest went into a second step
  REQUIRE_FALSE(pair.server.outbox.empty());

  // The client's Finished, then its first data in a read of its own while the Finished's step
  // runs: the data waits beside the step and is read once the handshake is done.
  const std::vector<uint8_t> serverFlight = joined(pair.server.outbox);
  pair.client.tls.receive(serverFlight);
  REQUIRE(pair.client.tls.handshakeDone());
  REQUIRE(pair.client.outbox.size() == 1);  // the Finished
  REQUIRE(pair.client.tls.write(asBytes("right behind the Finished")));
  REQUIRE(pair.client.outbox.size() == 2);
  pair.server.tls.receive(pair.client.outbox[0]);
  CHECK(pair.server.tls.stepRunning());
  pair.server.tls.receive(pair.client.outbox[1]);
  pair.client.outbox.clear();
  CHECK(runner.jobs.size() == 1);
  CHECK(pair.server.received.empty());
  CHECK(runner.runAll() == 1);
  CHECK(pair.server.tls.handshakeDone());
  CHECK(pair.server.received == "right behind the Finished");
  CHECK(pair.server.stepsDelivered == 1);
}

TEST_CASE("TlsStream on a runner: a failed step reports the failure and its alert") {
  ManualRunner runner;
  StreamSide server{TlsEngine::server(serverContext())};
  server.tls.runHandshakeOn(&runner);
  server.tls.receive(kBrokenHello);
  CHECK(server.failures == 0);
  CHECK(runner.runAll() == 1);
  CHECK(server.failures == 1);
  CHECK_FALSE(server.outbox.empty());  // the alert
  CHECK_FALSE(server.tls.errorText().empty());
}

TEST_CASE("TlsStream on a runner: a stream gone during its step leaves the engine to the step") {
  StreamSide client{TlsEngine::client(clientContext(), "stream.test", true)};
  ManualRunner runner;
  auto server = std::make_unique<StreamSide>(TlsEngine::server(serverContext()));
  server->tls.runHandshakeOn(&runner);
  REQUIRE(client.tls.startHandshake());
  const std::vector<uint8_t> hello = joined(client.outbox);
  server->tls.receive(hello);
  REQUIRE(runner.jobs.size() == 1);
  server.reset();  // the job keeps the engine: the step still runs on it
  REQUIRE(runner.jobs.front()->orphan != nullptr);
  CHECK(runner.runAll() == 1);  // ran, then freed with the job (ASan checks both)
}

TEST_CASE("TlsStream on a runner: a dropped step gives the engine back and delivers nothing") {
  StreamPair pair;
  ManualRunner runner;
  pair.server.tls.runHandshakeOn(&runner);
  REQUIRE(pair.client.tls.startHandshake());
  const std::vector<uint8_t> hello = joined(pair.client.outbox);
  pair.server.tls.receive(std::span<const uint8_t>(hello).first(20));
  pair.server.tls.receive(std::span<const uint8_t>(hello).subspan(20));  // held
  REQUIRE(runner.jobs.size() == 1);
  std::unique_ptr<ot::tls::HandshakeRunner::Job> job = std::move(runner.jobs.front());
  runner.jobs.clear();
  TlsStream::handshakeStepDropped(std::move(job));
  CHECK_FALSE(pair.server.tls.stepRunning());
  CHECK(pair.server.outbox.empty());
  CHECK(pair.server.handshakes == 0);
  CHECK(pair.server.failures == 0);
  pair.server.tls.closeNotify();  // usable again on this thread (nothing to send mid-handshake)
}

TEST_CASE(
    "TlsStream: a server's session ticket leaves in one write with its answer to the request") {
  StreamPair pair;
  pair.client.sendOnHandshake = "GET / HTTP/1.1";
  pair.server.answer = "HTTP/1.1 101";
  REQUIRE(pair.client.tls.startHandshake());
  const auto deliver = [](StreamSide& from, StreamSide& to) {
    while (!from.outbox.empty()) {
      std::vector<uint8_t> bytes = std::move(from.outbox.front());
      from.outbox.pop_front();
      to.tls.receive(bytes);
    }
  };
  deliver(pair.client, pair.server);  // the ClientHello
  deliver(pair.server, pair.client);  // the server's flight
  REQUIRE(pair.client.tls.handshakeDone());
  REQUIRE_FALSE(pair.server.tls.handshakeDone());
  // The client's Finished and its request leave in one write, so reach the server in one read.
  REQUIRE(pair.client.outbox.size() == 1);
  deliver(pair.client, pair.server);
  CHECK(pair.server.handshakes == 1);
  CHECK(pair.server.received == "GET / HTTP/1.1");
  CHECK(pair.server.outbox.size() == 1);  // the ticket and the answer together
  exchange(pair.client, pair.server);
  CHECK(pair.client.received == "HTTP/1.1 101");
  CHECK(pair.client.failures + pair.server.failures == 0);
}

TEST_CASE("TlsStream: a server's session ticket goes out alone when nothing came to answer") {
  StreamPair pair;
  pair.handshake();
  CHECK(pair.server.outbox.empty());  // sent when the handshake ended, not held back
  REQUIRE(pair.client.tls.write(asBytes("late")));
  pair.server.answer = "ok";
  exchange(pair.client, pair.server);
  CHECK(pair.client.received == "ok");
}

TEST_CASE("TlsStream: an owner about to answer holds the session ticket for its answer") {
  StreamPair pair;
  pair.client.sendOnHandshake = "GET / HTTP/1.1";
  pair.server.holds = true;  // the answer waits for something (a record fetch)
  REQUIRE(pair.client.tls.startHandshake());
  exchange(pair.client, pair.server);
  REQUIRE(pair.server.tls.handshakeDone());
  CHECK(pair.server.received == "GET / HTTP/1.1");
  CHECK(pair.server.outbox.empty());  // the ticket waits

  pair.server.holds = false;
  REQUIRE(pair.server.tls.write(asBytes("HTTP/1.1 101")));
  CHECK(pair.server.outbox.size() == 1);  // the ticket and the answer together
  exchange(pair.client, pair.server);
  CHECK(pair.client.received == "HTTP/1.1 101");
  CHECK(pair.client.failures + pair.server.failures == 0);
}
