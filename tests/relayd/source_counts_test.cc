#include "relayd/source_counts.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using ot::relayd::peerSourceKey;
using ot::relayd::SourceCounts;
using ot::relayd::SourceSlot;

TEST_CASE("source counts: each key counts up to its limit, independently") {
  SourceCounts counts;
  CHECK(counts.tryAcquire("192.0.2.1", 2));
  CHECK(counts.tryAcquire("192.0.2.1", 2));
  CHECK_FALSE(counts.tryAcquire("192.0.2.1", 2));
  CHECK(counts.count("192.0.2.1") == 2);
  CHECK(counts.tryAcquire("192.0.2.2", 2));
  CHECK(counts.sources() == 2);
  counts.release("192.0.2.1");
  CHECK(counts.tryAcquire("192.0.2.1", 2));
  CHECK_FALSE(counts.tryAcquire("any", 0));
  CHECK(counts.count("any") == 0);
}

TEST_CASE("source counts: an entry is freed when its count reaches zero") {
  SourceCounts counts;
  for (int i = 0; i < 1000; ++i) {
    const std::string key = "10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256);
    REQUIRE(counts.tryAcquire(key, 4));
    counts.release(key);
  }
  CHECK(counts.sources() == 0);
  counts.release("never-held");  // ignored
  CHECK(counts.sources() == 0);
}

TEST_CASE("source slot: gives its unit back once, when released, moved over or destroyed") {
  SourceCounts counts;
  {
    SourceSlot first = SourceSlot::acquire(counts, "k", 2);
    SourceSlot second = SourceSlot::acquire(counts, "k", 2);
    SourceSlot third = SourceSlot::acquire(counts, "k", 2);
    CHECK(first.held());
    CHECK(second.held());
    CHECK_FALSE(third.held());
    CHECK(counts.count("k") == 2);
    first.release();
    first.release();
    CHECK(counts.count("k") == 1);
    SourceSlot moved = std::move(second);
    CHECK(counts.count("k") == 1);
    std::vector<SourceSlot> slots;
    slots.push_back(std::move(moved));
    slots.push_back(SourceSlot::acquire(counts, "k", 2));
    CHECK(counts.count("k") == 2);
    slots.front() = SourceSlot();  // move-assigning releases what it held
    CHECK(counts.count("k") == 1);
  }
  CHECK(counts.sources() == 0);
}

TEST_CASE("source key of a peer: its address, IPv6 by /64; endpoints are not addresses") {
  CHECK(peerSourceKey("192.0.2.1") == "192.0.2.1");
  CHECK(peerSourceKey("2001:db8:1:2::5") == "2001:db8:1:2::/64");
  CHECK(peerSourceKey("::ffff:192.0.2.7") == "192.0.2.7");
  CHECK(peerSourceKey("").empty());
  CHECK(peerSourceKey("not an address").empty());
  CHECK(peerSourceKey("192.0.2.1:40000").empty());
  CHECK(peerSourceKey("[2001:db8::1]:443").empty());
}
