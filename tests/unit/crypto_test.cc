#include "common/crypto.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/base64.h"

using ot::crypto::asBytes;
using ot::crypto::toHex;

namespace {

constexpr std::string_view kFips448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";

std::vector<uint8_t> repeated(uint8_t byte, size_t count) {
  return std::vector<uint8_t>(count, byte);
}

}  // namespace

TEST_CASE("crypto: SHA-256 FIPS 180-2 vectors, one shot") {
  CHECK(toHex(ot::crypto::sha256("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(toHex(ot::crypto::sha256("")) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(toHex(ot::crypto::sha256(std::span<const uint8_t>())) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(toHex(ot::crypto::sha256(kFips448)) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(toHex(ot::crypto::sha256(std::string(1'000'000, 'a'))) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("crypto: SHA-256 incremental matches one shot however the input is split") {
  ot::crypto::Sha256 hasher;
  SUBCASE("byte by byte") {
    for (const char c : kFips448) hasher.update(std::string_view(&c, 1));
    CHECK(toHex(hasher.finish()) ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  }
  SUBCASE("every split point, with empty updates") {
    for (size_t split = 0; split <= kFips448.size(); ++split) {
      hasher.update(kFips448.substr(0, split));
      hasher.update(std::string_view());
      hasher.update(kFips448.substr(split));
      CAPTURE(split);
      CHECK(toHex(hasher.finish()) ==
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    }
  }
  SUBCASE("one million 'a' in odd chunks") {
    const std::string chunk(997, 'a');
    size_t left = 1'000'000;
    while (left > 0) {
      const size_t n = left < chunk.size() ? left : chunk.size();
      hasher.update(std::string_view(chunk).substr(0, n));
      left -= n;
    }
    CHECK(toHex(hasher.finish()) ==
          "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
  SUBCASE("finish resets the object for the next message") {
    hasher.update("abc");
    CHECK(toHex(hasher.finish()) ==
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(toHex(hasher.finish()) ==
          "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hasher.update("ab");
    hasher.update("c");
    CHECK(toHex(hasher.finish()) ==
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  }
  SUBCASE("moved-to object keeps the state") {
    hasher.update("ab");
    ot::crypto::Sha256 moved = std::move(hasher);
    moved.update("c");
    CHECK(toHex(moved.finish()) ==
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  }
}

TEST_CASE("crypto: HMAC-SHA256 RFC 4231 test cases 1-7") {
  SUBCASE("1: 20-byte key") {
    CHECK(toHex(ot::crypto::hmacSha256(repeated(0x0b, 20), asBytes("Hi There"))) ==
          "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  }
  SUBCASE("2: key shorter than the output") {
    CHECK(toHex(ot::crypto::hmacSha256("Jefe", "what do ya want for nothing?")) ==
          "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  }
  SUBCASE("3: 50 bytes of 0xdd") {
    CHECK(toHex(ot::crypto::hmacSha256(repeated(0xaa, 20), repeated(0xdd, 50))) ==
          "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  }
  SUBCASE("4: 25-byte key 0x01..0x19") {
    std::vector<uint8_t> key;
    for (uint8_t i = 1; i <= 25; ++i) key.push_back(i);
    CHECK(toHex(ot::crypto::hmacSha256(key, repeated(0xcd, 50))) ==
          "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  }
  SUBCASE("5: first 128 bits (the RFC lists only the truncated output)") {
    const auto mac = ot::crypto::hmacSha256(repeated(0x0c, 20), asBytes("Test With Truncation"));
    CHECK(toHex(std::span<const uint8_t>(mac).first(16)) == "a3b6167473100ee06e0c796c2955552b");
  }
  SUBCASE("6: 131-byte key, hashed first") {
    CHECK(toHex(ot::crypto::hmacSha256(
              repeated(0xaa, 131),
              asBytes("Test Using Larger Than Block-Size Key - Hash Key First"))) ==
          "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  }
  SUBCASE("7: 131-byte key and data longer than a block") {
    CHECK(toHex(ot::crypto::hmacSha256(
              repeated(0xaa, 131),
              asBytes("This is a test using a larger than block-size key and a larger than "
                      "block-size data. The key needs to be hashed before being used by the "
                      "HMAC algorithm."))) ==
          "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  }
  SUBCASE("empty key and empty message") {
    CHECK(toHex(ot::crypto::hmacSha256("", "")) ==
          "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  }
}

TEST_CASE("crypto: hashing from several threads at once") {
  // The algorithm objects are fetched lazily; racing first uses must all see the same one.
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&results, i] {
      std::string last;
      for (int round = 0; round < 200; ++round) {
        last = toHex(ot::crypto::hmacSha256("Jefe", "what do ya want for nothing?")) +
               toHex(ot::crypto::sha256("abc"));
      }
      results[i] = last;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    CHECK(r ==
          "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  }
}

TEST_CASE("crypto: constant-time compare") {
  CHECK(ot::crypto::constantTimeEqual("", ""));
  CHECK(ot::crypto::constantTimeEqual("abc", "abc"));
  CHECK_FALSE(ot::crypto::constantTimeEqual("abc", "abd"));
  CHECK_FALSE(ot::crypto::constantTimeEqual("abc", "bbc"));
  CHECK_FALSE(ot::crypto::constantTimeEqual("abc", "ab"));
  CHECK_FALSE(ot::crypto::constantTimeEqual("", "a"));
  const auto a = ot::crypto::sha256("x");
  auto b = a;
  CHECK(ot::crypto::constantTimeEqual(a, b));
  b[31] ^= 1;
  CHECK_FALSE(ot::crypto::constantTimeEqual(a, b));
}

TEST_CASE("crypto: random bytes and tokens") {
  const auto empty = ot::crypto::randomBytes(0);
  REQUIRE(empty.has_value());
  CHECK(empty->empty());

  const auto bytes = ot::crypto::randomBytes(64);
  REQUIRE(bytes.has_value());
  CHECK(bytes->size() == 64);
  CHECK(*bytes != std::vector<uint8_t>(64, 0));

  CHECK_FALSE(ot::crypto::randomBytes(size_t{1} << 31).has_value());

  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const auto token = ot::crypto::randomToken(32);
    REQUIRE(token.has_value());
    CHECK(token->size() == 43);
    CHECK(token->find_first_not_of(
              "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
          std::string::npos);
    const auto decoded = ot::base64::decodeUrl(*token);
    REQUIRE(decoded.has_value());
    CHECK(decoded->size() == 32);
    seen.insert(*token);
  }
  CHECK(seen.size() == 100);
  CHECK(ot::crypto::randomToken(16)->size() == 22);
  CHECK(ot::crypto::randomToken(0) == std::string());
}

TEST_CASE("crypto: hex encoding") {
  const std::vector<uint8_t> data = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
  CHECK(toHex(data) == "00017f80abff");
  CHECK(toHex(std::span<const uint8_t>()) == "");
  CHECK(ot::crypto::fromHex("00017f80abff") == data);
  CHECK(ot::crypto::fromHex("00017F80ABFF") == data);
  CHECK(ot::crypto::fromHex("") == std::vector<uint8_t>());
  CHECK_FALSE(ot::crypto::fromHex("0").has_value());
  CHECK_FALSE(ot::crypto::fromHex("abc").has_value());
  CHECK_FALSE(ot::crypto::fromHex("0g").has_value());
  CHECK_FALSE(ot::crypto::fromHex("g0").has_value());
  CHECK_FALSE(ot::crypto::fromHex(" 00").has_value());
  CHECK_FALSE(ot::crypto::fromHex("0x00").has_value());
  std::vector<uint8_t> all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<uint8_t>(i));
  CHECK(ot::crypto::fromHex(toHex(all)) == all);
}
