#include "common/write_backlog.h"

#include <doctest/doctest.h>

#include "relayd/relay_context.h"

using ot::WriteBacklogGate;
using ot::WriteBacklogMarks;

TEST_CASE("write backlog: reading pauses above the high mark and resumes at the low mark") {
  WriteBacklogGate gate(WriteBacklogMarks{100, 40, 1000});
  CHECK_FALSE(gate.paused());
  CHECK_FALSE(gate.update(100));  // at the mark: still reading
  CHECK_FALSE(gate.paused());
  CHECK(gate.update(101));  // above: paused, a change
  CHECK(gate.paused());
  CHECK_FALSE(gate.update(500));  // still paused: no change to report
  CHECK_FALSE(gate.update(41));   // between the marks: stays paused (hysteresis)
  CHECK(gate.paused());
  CHECK(gate.update(40));  // at the low mark: reading again
  CHECK_FALSE(gate.paused());
  CHECK_FALSE(gate.update(99));  // between the marks while reading: stays reading
  CHECK_FALSE(gate.paused());
}

TEST_CASE("write backlog: a write that would pass the hard limit is refused") {
  const WriteBacklogGate gate(WriteBacklogMarks{100, 40, 1000});
  CHECK(gate.admits(0, 1000));
  CHECK(gate.admits(999, 1));
  CHECK_FALSE(gate.admits(999, 2));
  CHECK_FALSE(gate.admits(0, 1001));
  CHECK_FALSE(gate.admits(1001, 0));  // already past (cannot happen, still refused)
  CHECK_FALSE(gate.admits(10, static_cast<size_t>(-1)));  // no overflow in the sum
}

TEST_CASE("write backlog: otunnel's marks never pause reading nor refuse a write") {
  WriteBacklogGate gate(ot::kNoWriteBacklog);
  CHECK(gate.admits(1u << 30, 1u << 30));
  CHECK_FALSE(gate.update(static_cast<size_t>(1) << 40));
  CHECK_FALSE(gate.paused());
}

TEST_CASE("write backlog: relayd's marks leave room for its largest single answer") {
  constexpr auto marks = ot::relayd::kPeerWriteBacklog;
  static_assert(marks.low < marks.high && marks.high < marks.hardLimit);
  // A bridge pauses its visitors at 1 MiB queued: the peer's own pause comes later.
  CHECK(marks.high > 1024 * 1024 + 64 * 1024);
  // An API answer is at most 16 MiB (api_proxy): it fits above a full high mark.
  CHECK(marks.hardLimit >= marks.high + 16 * 1024 * 1024 + ot::kWriteOverheadBytes);
}
