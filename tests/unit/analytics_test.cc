// Analytics (common/analytics/): the envelope and batch encoding, the batching and retry rules,
// the bounded queue, and the sender with a fake poster (batches, drops, retries, failures, the
// shutdown flush) and once with libcurl against a local server (the bearer token, the JSON body).
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/analytics/analytics_event.h"
#include "common/analytics/analytics_policy.h"
#include "common/analytics/analytics_queue.h"
#include "common/analytics/analytics_sender.h"
#include "common/metrics.h"
#include "tests/unit/canned_http_server.h"

namespace {

using namespace ot::analytics;
using nlohmann::json;

const Origin kOrigin{"m-1", "iad", "relayd"};

Event visitorEvent(std::string tunnel, int64_t bytes) {
  return Event{type::kVisitorConnection,
               1'764'700'000'123,
               std::move(tunnel),
               {{"outcome", std::string("served")}, {"bytes_in", bytes}, {"forwarded", false}}};
}

// A poster that records each body and answers from a script (the last answer repeats).
struct FakePoster {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> bodies;
  std::vector<int> answers{200};

  Poster poster() {
    return [this](const std::string& body, int64_t, std::string& error) {
      const std::lock_guard lock(mutex);
      bodies.push_back(body);
      const size_t i = std::min(bodies.size() - 1, answers.size() - 1);
      if (answers[i] == 0) error = "connection refused";
      changed.notify_all();
      return answers[i];
    };
  }
  bool waitForPosts(size_t n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(10), [&] { return bodies.size() >= n; });
  }
  size_t posts() {
    const std::lock_guard lock(mutex);
    return bodies.size();
  }
};

AnalyticsSettings fastSettings() {
  AnalyticsSettings settings;
  settings.url = "http://127.0.0.1:9/events";
  settings.flushMs = 50;
  settings.retryDelayMs = 5;
  settings.shutdownFlushMs = 2'000;
  return settings;
}

bool waitUntil(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace

TEST_CASE("analytics: an envelope carries the schema version, origin, tunnel and fields") {
  const json envelope = json::parse(encodeEvent(visitorEvent("abc", 42), kOrigin, "p-7"));
  CHECK(envelope["v"] == kSchemaVersion);
  CHECK(envelope["id"] == "p-7");
  CHECK(envelope["type"] == "visitor.connection");
  CHECK(envelope["time"] == "2025-12-02T18:26:40.123Z");
  CHECK(envelope["machine"] == "m-1");
  CHECK(envelope["region"] == "iad");
  CHECK(envelope["source"] == "relayd");
  CHECK(envelope["tunnel"] == "abc");
  CHECK(envelope["data"] == json{{"outcome", "served"}, {"bytes_in", 42}, {"forwarded", false}});
  // The envelope's keys come first, in a fixed order.
  CHECK(encodeEvent(visitorEvent("abc", 1), kOrigin, "x").starts_with(R"({"v":1,"id":"x",)"));
}

TEST_CASE("analytics: an event about no tunnel has no tunnel key, and bad UTF-8 is replaced") {
  Event event{type::kCertificateFailed, 0, "", {{"error", std::string("bad \xff byte")}}};
  const json envelope = json::parse(encodeEvent(event, kOrigin, "x"));
  CHECK_FALSE(envelope.contains("tunnel"));
  CHECK(envelope["time"] == "1970-01-01T00:00:00.000Z");
  CHECK(envelope["data"]["error"] == "bad \xef\xbf\xbd byte");
  CHECK(json::parse(encodeEvent(Event{type::kTunnelDeleted, 5, "t", {}}, kOrigin, "x"))["data"] ==
        json::object());
}

TEST_CASE("analytics: a batch is a JSON array with consecutive ids") {
  const std::vector<Event> events{visitorEvent("a", 1), visitorEvent("b", 2), visitorEvent("c", 3)};
  const json batch = json::parse(encodeBatch(events, kOrigin, "f00d", 41));
  REQUIRE(batch.is_array());
  REQUIRE(batch.size() == 3);
  CHECK(batch[0]["id"] == "f00d-41");
  CHECK(batch[2]["id"] == "f00d-43");
  CHECK(batch[1]["tunnel"] == "b");
  CHECK(json::parse(encodeBatch({}, kOrigin, "f", 0)) == json::array());
}

TEST_CASE("analytics: a batch goes when full, when the interval is over, or at stop") {
  const BatchPolicy policy{.maxEvents = 100, .intervalMs = 5'000};
  CHECK(sendDelayMs(policy, 0, 99'999, false) == 5'000);  // nothing queued: nothing due
  CHECK(sendDelayMs(policy, 0, 0, true) == 5'000);
  CHECK(sendDelayMs(policy, 100, 0, false) == 0);  // a full batch
  CHECK(sendDelayMs(policy, 250, 0, false) == 0);
  CHECK(sendDelayMs(policy, 1, 1'000, false) == 4'000);  // a partial one waits out the interval
  CHECK(sendDelayMs(policy, 1, 5'000, false) == 0);
  CHECK(sendDelayMs(policy, 1, 0, true) == 0);  // stopping: whatever is queued goes now
}

TEST_CASE("analytics: 2xx is sent, 5xx/408/429/no answer retried, other answers fail") {
  CHECK(judgePost(200) == PostVerdict::kSent);
  CHECK(judgePost(204) == PostVerdict::kSent);
  CHECK(judgePost(0) == PostVerdict::kRetry);
  CHECK(judgePost(500) == PostVerdict::kRetry);
  CHECK(judgePost(503) == PostVerdict::kRetry);
  CHECK(judgePost(408) == PostVerdict::kRetry);
  CHECK(judgePost(429) == PostVerdict::kRetry);
  CHECK(judgePost(400) == PostVerdict::kFailed);
  CHECK(judgePost(401) == PostVerdict::kFailed);
  CHECK(judgePost(301) == PostVerdict::kFailed);
  const RetryPolicy retry{.maxRetries = 5, .baseDelayMs = 500, .maxDelayMs = 3'000};
  CHECK(retryDelayMs(retry, 1) == 500);
  CHECK(retryDelayMs(retry, 2) == 1'000);
  CHECK(retryDelayMs(retry, 3) == 2'000);
  CHECK(retryDelayMs(retry, 4) == 3'000);  // capped
  CHECK(retryDelayMs(retry, 60) == 3'000);
}

TEST_CASE("analytics: the queue keeps order, refuses past its capacity and counts it") {
  EventQueue queue(3, 2);
  CHECK(queue.push(visitorEvent("a", 1)));
  CHECK(queue.push(visitorEvent("b", 2)));
  CHECK(queue.push(visitorEvent("c", 3)));
  CHECK_FALSE(queue.push(visitorEvent("d", 4)));
  CHECK_FALSE(queue.push(visitorEvent("e", 5)));
  CHECK(queue.size() == 3);
  CHECK(queue.refused() == 2);
  std::vector<Event> out;
  CHECK(queue.take(2, out) == 2);
  // Room again, and the ring wraps around.
  CHECK(queue.push(visitorEvent("f", 6)));
  CHECK(queue.push(visitorEvent("g", 7)));
  CHECK(queue.take(10, out) == 3);
  REQUIRE(out.size() == 5);
  CHECK(out[0].tunnel == "a");
  CHECK(out[1].tunnel == "b");
  CHECK(out[2].tunnel == "c");
  CHECK(out[3].tunnel == "f");
  CHECK(out[4].tunnel == "g");
  CHECK(queue.size() == 0);
  // A waiter wakes when a batch is complete, not before.
  CHECK(queue.waitFor(2, 0) == 0);
  queue.close();
  CHECK_FALSE(queue.push(visitorEvent("h", 8)));
  CHECK(queue.refused() == 3);
  CHECK(queue.waitFor(2, 10'000) == 0);  // closed: no wait
}

TEST_CASE("analytics: the sender posts full batches and the rest after the interval") {
  FakePoster fake;
  AnalyticsSettings settings = fastSettings();
  settings.batchSize = 100;
  settings.flushMs = 200;
  ot::metrics::Metrics metrics;
  Analytics analytics(settings, kOrigin, &metrics, fake.poster());
  // Queued before the thread starts, so the split does not depend on timing.
  for (int i = 0; i < 250; ++i) REQUIRE(analytics.emit(visitorEvent("t" + std::to_string(i), i)));
  analytics.start();
  REQUIRE(fake.waitForPosts(3));
  REQUIRE(waitUntil([&] { return analytics.counts().sent == 250; }));
  std::vector<size_t> sizes;
  std::vector<std::string> ids;
  {
    const std::lock_guard lock(fake.mutex);
    for (const std::string& body : fake.bodies) {
      const json batch = json::parse(body);
      sizes.push_back(batch.size());
      for (const json& event : batch) ids.push_back(event["id"]);
    }
  }
  CHECK(sizes == std::vector<size_t>{100, 100, 50});
  CHECK(ids.front().ends_with("-0"));
  CHECK(ids.back().ends_with("-249"));
  CHECK(metrics.render().find(R"(opentunnel_analytics_events_total{result="sent"} 250)") !=
        std::string::npos);
  analytics.stop();
  CHECK(analytics.counts().dropped == 0);
  CHECK(analytics.counts().failed == 0);
}

TEST_CASE("analytics: a full queue drops and counts, and the sender keeps going") {
  FakePoster fake;
  AnalyticsSettings settings = fastSettings();
  settings.queueSize = 5;
  ot::metrics::Metrics metrics;
  Analytics analytics(settings, kOrigin, &metrics, fake.poster());
  int accepted = 0;
  for (int i = 0; i < 8; ++i) accepted += analytics.emit(visitorEvent("t", i)) ? 1 : 0;
  CHECK(accepted == 5);
  CHECK(analytics.counts().dropped == 3);
  CHECK(metrics.render().find(R"(opentunnel_analytics_events_total{result="dropped"} 3)") !=
        std::string::npos);
  analytics.start();
  REQUIRE(waitUntil([&] { return analytics.counts().sent == 5; }));
  CHECK(analytics.emit(visitorEvent("later", 9)));  // room again
  REQUIRE(waitUntil([&] { return analytics.counts().sent == 6; }));
  analytics.stop();
}

TEST_CASE("analytics: 5xx is retried up to the cap, then the batch counts as failed") {
  FakePoster fake;
  fake.answers = {500};
  AnalyticsSettings settings = fastSettings();
  settings.maxRetries = 2;
  ot::metrics::Metrics metrics;
  Analytics analytics(settings, kOrigin, &metrics, fake.poster());
  analytics.start();
  analytics.emit(visitorEvent("a", 1));
  analytics.emit(visitorEvent("b", 2));
  REQUIRE(waitUntil([&] { return analytics.counts().failed == 2; }));
  CHECK(fake.posts() == 3);  // the first try and two retries, the same body each time
  {
    const std::lock_guard lock(fake.mutex);
    CHECK(fake.bodies[0] == fake.bodies[2]);
  }
  CHECK(metrics.render().find(R"(opentunnel_analytics_events_total{result="failed"} 2)") !=
        std::string::npos);
  // A receiver that recovers gets the next batch.
  {
    const std::lock_guard lock(fake.mutex);
    fake.answers = {200};
  }
  analytics.emit(visitorEvent("c", 3));
  REQUIRE(waitUntil([&] { return analytics.counts().sent == 1; }));
  analytics.stop();
}

TEST_CASE("analytics: a connection error then 200 is one retry, and a 400 is not retried") {
  FakePoster fake;
  fake.answers = {0, 200, 400};
  Analytics analytics(fastSettings(), kOrigin, nullptr, fake.poster());
  analytics.start();
  analytics.emit(visitorEvent("a", 1));
  REQUIRE(waitUntil([&] { return analytics.counts().sent == 1; }));
  CHECK(fake.posts() == 2);
  analytics.emit(visitorEvent("b", 2));
  REQUIRE(waitUntil([&] { return analytics.counts().failed == 1; }));
  analytics.stop();
  CHECK(fake.posts() == 3);
}

TEST_CASE("analytics: stop posts what is queued, within its bound") {
  FakePoster fake;
  AnalyticsSettings settings = fastSettings();
  settings.flushMs = 3'600'000;  // only the stop sends the partial batch
  Analytics analytics(settings, kOrigin, nullptr, fake.poster());
  analytics.start();
  for (int i = 0; i < 7; ++i) analytics.emit(visitorEvent("t", i));
  const auto started = std::chrono::steady_clock::now();
  analytics.stop();
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(2));
  CHECK(analytics.counts().sent == 7);
  CHECK_FALSE(analytics.emit(visitorEvent("after", 0)));  // stopped: dropped and counted
  CHECK(analytics.counts().dropped == 1);
}

TEST_CASE("analytics: a stop that lands before the retry wait begins also cuts it short") {
  // The first post itself asks for the stop and answers only once the stop is recorded, so the
  // sender meets the stop before its minute-long wait (the ordering CI once hit by chance).
  FakePoster fake;
  fake.answers = {503, 200};
  AnalyticsSettings settings = fastSettings();
  settings.retryDelayMs = 60'000;
  std::thread stopper;
  std::mutex stopMutex;
  std::condition_variable stopAsked;
  bool asked = false;
  Analytics* self = nullptr;
  Poster inner = fake.poster();
  Poster poster = [&](const std::string& body, int64_t timeoutMs, std::string& error) {
    const int status = inner(body, timeoutMs, error);
    if (status == 503) {
      // The thread is stored under the lock the test takes before it joins: the stopper can run
      // (and the test see the stop) before this move-assignment would otherwise be visible.
      std::unique_lock lock(stopMutex);
      stopper = std::thread([&] { self->stop(); });
      stopAsked.wait_for(lock, std::chrono::seconds(10), [&] { return asked; });
    }
    return status;
  };
  Analytics analytics(settings, kOrigin, nullptr, poster);
  self = &analytics;
  analytics.start();
  analytics.emit(visitorEvent("a", 1));
  REQUIRE(fake.waitForPosts(1));
  // stop() sets its flag before it joins the sender; poll for the flag through a later emit,
  // which the closed queue refuses.
  REQUIRE(waitUntil([&] { return !analytics.emit(visitorEvent("late", 0)); }));
  {
    const std::lock_guard lock(stopMutex);
    asked = true;
  }
  stopAsked.notify_all();
  const auto started = std::chrono::steady_clock::now();
  stopper.join();
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(2));
  // The refused batch was posted again (the late events accepted before the close follow it).
  REQUIRE(fake.posts() >= 2);
  CHECK(fake.bodies[1] == fake.bodies[0]);
  CHECK(analytics.counts().failed == 0);
  CHECK(analytics.counts().sent >= 1);
}

TEST_CASE("analytics: a receiver that keeps failing does not hold the stop past its bound") {
  FakePoster fake;
  fake.answers = {503};
  AnalyticsSettings settings = fastSettings();
  settings.flushMs = 3'600'000;
  settings.maxRetries = 100;
  settings.retryDelayMs = 50;
  settings.shutdownFlushMs = 300;
  Analytics analytics(settings, kOrigin, nullptr, fake.poster());
  analytics.start();
  for (int i = 0; i < 3; ++i) analytics.emit(visitorEvent("t", i));
  const auto started = std::chrono::steady_clock::now();
  analytics.stop();
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(took < std::chrono::milliseconds(1'500));
  CHECK(analytics.counts().failed == 3);
  CHECK(fake.posts() >= 2);
}

TEST_CASE("analytics: without a URL nothing runs, nothing is posted or counted") {
  FakePoster fake;
  AnalyticsSettings settings = fastSettings();
  settings.url.clear();
  ot::metrics::Metrics metrics;
  Analytics analytics(settings, kOrigin, &metrics, fake.poster());
  CHECK_FALSE(analytics.enabled());
  analytics.start();
  CHECK_FALSE(analytics.emit(visitorEvent("a", 1)));
  analytics.stop();
  CHECK(fake.posts() == 0);
  CHECK(analytics.counts().sent == 0);
  CHECK(analytics.counts().dropped == 0);
  // The family is exported all the same, at 0.
  CHECK(metrics.render().find(R"(opentunnel_analytics_events_total{result="dropped"} 0)") !=
        std::string::npos);
}

TEST_CASE("analytics: libcurl posts the batch as JSON with the bearer token") {
  ot::testing::CannedServer server({ot::testing::answer(200, "{}")});
  AnalyticsSettings settings = fastSettings();
  settings.url = "http://127.0.0.1:" + std::to_string(server.port()) + "/ingest";
  settings.token = "s3cret-token";
  Analytics analytics(settings, kOrigin, nullptr);
  analytics.start();
  analytics.emit(visitorEvent("abc", 5));
  REQUIRE(waitUntil([&] { return analytics.counts().sent == 1; }));
  analytics.stop();
  const std::vector<std::string> requests = server.requests();
  REQUIRE(requests.size() == 1);
  const std::string& request = requests[0];
  CHECK(request.starts_with("POST /ingest HTTP/1.1\r\n"));
  CHECK(request.find("Authorization: Bearer s3cret-token\r\n") != std::string::npos);
  CHECK(request.find("Content-Type: application/json\r\n") != std::string::npos);
  const json batch = json::parse(request.substr(request.find("\r\n\r\n") + 4));
  REQUIRE(batch.size() == 1);
  CHECK(batch[0]["tunnel"] == "abc");
}

TEST_CASE("analytics: a stop cuts a long retry wait short and tries once more at once") {
  FakePoster fake;
  fake.answers = {503, 200};
  AnalyticsSettings settings = fastSettings();
  settings.retryDelayMs = 60'000;
  Analytics analytics(settings, kOrigin, nullptr, fake.poster());
  analytics.start();
  analytics.emit(visitorEvent("a", 1));
  REQUIRE(fake.waitForPosts(1));  // the first try failed: the sender now waits a minute
  const auto started = std::chrono::steady_clock::now();
  analytics.stop();
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(2));
  CHECK(fake.posts() == 2);
  CHECK(analytics.counts().sent == 1);
}
