// The receive window's grant policy (docs/protocol.md section 7), as pure logic.
#include "client/receive_window.h"

#include <doctest/doctest.h>

using ot::client::ReceiveWindow;

TEST_CASE("client receive window: grants in quarter batches and refuses data past credit") {
  ReceiveWindow window(65536);
  CHECK(window.received(65536));
  CHECK_FALSE(window.received(1));  // nothing granted yet: a violation
  window.taken(16383);
  CHECK(window.grantNow(0) == 0);  // below a quarter
  window.taken(1);
  CHECK(window.grantNow(0) == 16384);
  CHECK(window.available() == 16384);
  CHECK(window.grantNow(0) == 0);
  CHECK(window.received(16384));
  CHECK_FALSE(window.received(1));
}

TEST_CASE("client receive window: a full local backlog holds the grant back") {
  ReceiveWindow window(65536);
  CHECK(window.received(40000));
  window.taken(40000);
  CHECK(window.grantNow(16385) == 0);  // more than a quarter still on its way out
  CHECK(window.grantNow(16384) == 40000);
  CHECK(window.available() == 65536);
}
