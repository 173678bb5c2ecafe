#include "common/base64.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

std::vector<uint8_t> bytes(std::string_view text) {
  return {text.begin(), text.end()};
}

struct Vector {
  std::string_view plain;
  std::string_view standard;
  std::string_view url;
};

// RFC 4648 section 10; the url column is the same text without padding (the alphabets differ
// only in characters 62 and 63, which none of these vectors use).
constexpr Vector kRfc4648[] = {
    {"", "", ""},
    {"f", "Zg==", "Zg"},
    {"fo", "Zm8=", "Zm8"},
    {"foo", "Zm9v", "Zm9v"},
    {"foob", "Zm9vYg==", "Zm9vYg"},
    {"fooba", "Zm9vYmE=", "Zm9vYmE"},
    {"foobar", "Zm9vYmFy", "Zm9vYmFy"},
};

}  // namespace

TEST_CASE("base64: RFC 4648 section 10 vectors, standard alphabet") {
  for (const auto& v : kRfc4648) {
    CAPTURE(v.plain);
    CHECK(ot::base64::encode(v.plain) == v.standard);
    const auto decoded = ot::base64::decode(v.standard);
    REQUIRE(decoded.has_value());
    CHECK(*decoded == bytes(v.plain));
  }
}

TEST_CASE("base64: RFC 4648 section 10 vectors, url alphabet without padding") {
  for (const auto& v : kRfc4648) {
    CAPTURE(v.plain);
    CHECK(ot::base64::encodeUrl(v.plain) == v.url);
    const auto decoded = ot::base64::decodeUrl(v.url);
    REQUIRE(decoded.has_value());
    CHECK(*decoded == bytes(v.plain));
  }
}

TEST_CASE("base64: the two alphabets differ in characters 62 and 63") {
  const std::vector<uint8_t> data = {0xfb, 0xff, 0xbf};  // 111110 111111 111110 111111
  CHECK(ot::base64::encode(data) == "+/+/");
  CHECK(ot::base64::encodeUrl(data) == "-_-_");
  CHECK(ot::base64::decode("+/+/") == data);
  CHECK(ot::base64::decodeUrl("-_-_") == data);
  CHECK_FALSE(ot::base64::decode("-_-_").has_value());
  CHECK_FALSE(ot::base64::decodeUrl("+/+/").has_value());

  const std::vector<uint8_t> one = {0xff};
  CHECK(ot::base64::encode(one) == "/w==");
  CHECK(ot::base64::encodeUrl(one) == "_w");
}

TEST_CASE("base64: every byte value round trips at every length remainder") {
  std::vector<uint8_t> all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<uint8_t>(i));
  for (size_t len = 0; len <= all.size(); ++len) {
    const std::vector<uint8_t> prefix(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(len));
    const std::string standard = ot::base64::encode(prefix);
    const std::string url = ot::base64::encodeUrl(prefix);
    CHECK(standard.size() == (len + 2) / 3 * 4);
    CHECK(url.size() == (len * 4 + 2) / 3);
    CHECK(ot::base64::decode(standard) == prefix);
    CHECK(ot::base64::decodeUrl(url) == prefix);
  }
}

TEST_CASE("base64: strict decode rejects malformed standard input") {
  const char* const bad[] = {
      "Zg",        // missing padding
      "Zg=",       // short padding
      "Zg===",     // too much padding
      "Z===",      // a lone 6-bit character
      "====",      // only padding
      "=",         //
      "Zm9v=",     // padding after a full group
      "Zm=v",      // padding in the middle
      "Zg==Zm9v",  // data after padding
      "Zm9",       // length not a multiple of four
      "Zh==",      // non-zero trailing bits (canonical is Zg==)
      "Zm9=",      // non-zero trailing bits (canonical is Zm8=)
      "Zm9v\n",    // whitespace
      " Zm9v",     //
      "Zm 9v",     //
      "Zm9v\r\n",  //
      "Zm9v\t",    //
      "Zm9-",      // url alphabet
      "Zm9_",      //
      "Zm9*",      // not in any alphabet
      "Zm9\x80",   // high byte
  };
  for (const char* text : bad) {
    CAPTURE(text);
    CHECK_FALSE(ot::base64::decode(text).has_value());
  }
  CHECK_FALSE(ot::base64::decode(std::string_view("Zm9\0", 4)).has_value());
}

TEST_CASE("base64: strict decode rejects malformed url input") {
  const char* const bad[] = {
      "Zg==",    // padding is never accepted
      "Zm8=",    //
      "Z",       // a lone 6-bit character
      "Zm9vY",   // five characters: 4 + 1
      "Zh",      // non-zero trailing bits (canonical is Zg)
      "Zm9",     // non-zero trailing bits (canonical is Zm8)
      "Zm9v ",   // whitespace
      "Zm\n9v",  //
      "Zm9+",    // standard alphabet
      "Zm9/",    //
      "Zm9.",    //
  };
  for (const char* text : bad) {
    CAPTURE(text);
    CHECK_FALSE(ot::base64::decodeUrl(text).has_value());
  }
}

TEST_CASE("base64: decoding fails on every truncation of a padded encoding") {
  const std::string full = ot::base64::encode(std::string_view("hello, world"));  // 12 -> 16
  REQUIRE(full == "aGVsbG8sIHdvcmxk");
  for (size_t len = 1; len < full.size(); ++len) {
    CAPTURE(len);
    CHECK(ot::base64::decode(full.substr(0, len)).has_value() == (len % 4 == 0));
  }
}
