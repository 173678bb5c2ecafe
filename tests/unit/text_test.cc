// common/text.h: ASCII case folding and trimming, whatever the locale.
#include "common/text.h"

#include <doctest/doctest.h>

#include <string>

namespace ot {

TEST_CASE("equalsIgnoreCase folds ASCII letters only") {
  CHECK(equalsIgnoreCase("WebSocket", "websocket"));
  CHECK(equalsIgnoreCase("", ""));
  CHECK_FALSE(equalsIgnoreCase("websocket", "websockets"));
  CHECK_FALSE(equalsIgnoreCase("json", "jsox"));
  // '@' and '`' sit next to 'A' and 'a'; '[' is 'Z' + 1: none of them fold.
  CHECK_FALSE(equalsIgnoreCase("@", "`"));
  CHECK_FALSE(equalsIgnoreCase("[", "{"));
  // Bytes above 0x7f are compared as they are.
  CHECK_FALSE(equalsIgnoreCase("\xc3\x89", "\xc3\xa9"));
}

TEST_CASE("startsWithIgnoreCase") {
  CHECK(startsWithIgnoreCase("Bearer abc", "bearer "));
  CHECK(startsWithIgnoreCase("abc", ""));
  CHECK_FALSE(startsWithIgnoreCase("Bear", "bearer"));
  CHECK_FALSE(startsWithIgnoreCase("Basic abc", "bearer"));
}

TEST_CASE("toLower folds A-Z and keeps every other byte") {
  CHECK(toLower("Tunnel.EXAMPLE.com-9_Z") == "tunnel.example.com-9_z");
  CHECK(toLower("") == "");
  const std::string mixed("A\xc3\x89z\0Q", 6);
  CHECK(toLower(mixed) == std::string("a\xc3\x89z\0q", 6));
}

TEST_CASE("trim strips ASCII whitespace at both ends only") {
  CHECK(trim(" \t\r\n\v\fa b\f\v\n\r\t ") == "a b");
  CHECK(trim("   ") == "");
  CHECK(trim("") == "");
  CHECK(trim("x") == "x");
}

TEST_CASE("trimOws strips spaces and tabs, not line breaks") {
  CHECK(trimOws(" \ttext\t ") == "text");
  CHECK(trimOws("\r\ntext\r\n") == "\r\ntext\r\n");
  CHECK(trimOws(" \t ") == "");
}

}  // namespace ot
