#include "client/status_line.h"

#include <doctest/doctest.h>

using ot::client::formatSeconds;
using ot::client::PoolStatus;
using ot::client::statusKey;
using ot::client::statusLine;

TEST_CASE("client status line: what people see as the bridges change") {
  PoolStatus status;
  status.links = 2;
  CHECK_FALSE(statusLine(status).has_value());  // the first attempts are still running

  status.attached = 2;
  CHECK(statusLine(status) == "otunnel: connected (2/2 links)");

  status.attached = 1;
  CHECK(statusLine(status) == "otunnel: connected (1/2 links)");
  status.nextRetryMs = 1250;
  status.lastError = "connection refused";
  CHECK(statusLine(status) ==
        "otunnel: connected (1/2 links); reconnecting in 1.3 s: connection refused");

  status.attached = 0;
  CHECK(statusLine(status) == "otunnel: reconnecting in 1.3 s: connection refused");

  status.fatal = true;
  status.lastError = "bad_token: the token is not valid";
  CHECK(statusLine(status) == "otunnel: bad_token: the token is not valid");
}

TEST_CASE("client status line: seconds with one decimal, rounded") {
  CHECK(formatSeconds(0) == "0.0");
  CHECK(formatSeconds(49) == "0.0");
  CHECK(formatSeconds(50) == "0.1");
  CHECK(formatSeconds(1250) == "1.3");
  CHECK(formatSeconds(30'000) == "30.0");
}

TEST_CASE("client status line: a new retry delay alone is not a new state") {
  PoolStatus status;
  status.links = 2;
  status.nextRetryMs = 300;
  status.lastError = "connection refused";
  const std::string first = statusKey(status);
  status.nextRetryMs = 900;
  CHECK(statusKey(status) == first);
  status.lastError = "timed out";
  CHECK(statusKey(status) != first);
  const std::string timedOut = statusKey(status);
  status.attached = 1;
  CHECK(statusKey(status) != timedOut);
  PoolStatus connected;
  connected.links = 2;
  connected.attached = 2;
  connected.lastError = "old error";
  PoolStatus connectedClean = connected;
  connectedClean.lastError.clear();
  CHECK(statusKey(connected) == statusKey(connectedClean));  // the error only matters when retrying
  connected.fatal = true;
  CHECK(statusKey(connected) != statusKey(connectedClean));
}
