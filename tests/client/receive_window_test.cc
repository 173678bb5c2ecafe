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

TEST_CASE("client receive window: below the window, an allowance caps the relay's credit") {
  constexpr uint32_t kWindow = 512 * 1024;
  constexpr size_t kAllowance = 64 * 1024;
  ReceiveWindow window(kWindow);
  // The relay used its whole window; we took 128 KiB of it.
  CHECK(window.received(kWindow));
  window.taken(128 * 1024);
  // Alone it would get all 128 KiB back; beside another active stream at most the allowance.
  CHECK(window.grantNow(0, kAllowance) == kAllowance);
  CHECK(window.available() == kAllowance);
  CHECK(window.takenNotGranted() == 64 * 1024);
  CHECK(window.grantNow(0, kAllowance) == 0);  // the relay still has the allowance to send
  // It sent 15 KiB: less than a quarter of the allowance is free, no grant yet (no tiny credits).
  CHECK(window.received(15 * 1024));
  CHECK(window.grantNow(0, kAllowance) == 0);
  // Another KiB: a batch of a quarter allowance.
  CHECK(window.received(1024));
  CHECK(window.grantNow(0, kAllowance) == 16 * 1024);
  CHECK(window.available() == kAllowance);
  // Taken bytes below the smaller batch wait, as below the quarter window alone.
  ReceiveWindow fresh(kWindow);
  CHECK(fresh.received(kWindow));
  fresh.taken(16 * 1024 - 1);
  CHECK(fresh.grantNow(0, kAllowance) == 0);
  fresh.taken(1);
  CHECK(fresh.grantNow(0, kAllowance) == 16 * 1024);
  CHECK(fresh.grantNow(0) == 0);
  // The other stream went quiet: what was held back goes out in quarter-window batches again.
  CHECK(window.received(kAllowance));
  window.taken(80 * 1024);
  CHECK(window.grantNow(0) == 128 * 1024);  // 48 KiB held back + 80 KiB taken since
  CHECK(window.available() == 128 * 1024);
}
