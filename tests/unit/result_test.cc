// common/result.h: one Result for the tree. A value or an error, and a wrong access aborts the
// process (with a message) rather than throwing: the data plane never throws.
#include "common/result.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <functional>
#include <string>

namespace ot {
namespace {

// Runs `access` in a child process. Returns how the child ended: "abort" (SIGABRT), "threw" (the
// access threw and was caught), "returned" (no failure at all), or "other".
std::string howItEnds(const std::function<void()>& access) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGABRT, SIG_DFL);  // doctest's crash report belongs to the parent
    try {
      access();
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) return "abort";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) return "threw";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "returned";
  return "other";
}

enum class CodecError { kTruncated };

}  // namespace

TEST_CASE("result: holds a value or an error") {
  Result<int> value = 7;
  CHECK(value.ok());
  CHECK(static_cast<bool>(value));
  CHECK(*value == 7);
  CHECK(value.value() == 7);

  Result<int> error = Error{ErrorKind::kNotFound, "none"};
  CHECK_FALSE(error.ok());
  CHECK(error.error().kind == ErrorKind::kNotFound);

  // Any error type (the bridge decoder's is an enum).
  Result<std::string, CodecError> decoded = CodecError::kTruncated;
  CHECK(decoded.error() == CodecError::kTruncated);
  Result<std::string, CodecError> text = std::string("value");
  CHECK(text->size() == 5);
}

TEST_CASE("result: a wrong access aborts instead of throwing") {
  CHECK(howItEnds([] {
          Result<int> error = Error{ErrorKind::kInternal, "x"};
          (void)error.value();
        }) == "abort");
  CHECK(howItEnds([] {
          Result<int, CodecError> error = CodecError::kTruncated;
          (void)*error;
        }) == "abort");
  CHECK(howItEnds([] {
          Result<int> value = 1;
          (void)value.error();
        }) == "abort");
  CHECK(howItEnds([] {
          Result<int> value = 1;
          (void)value.value();
        }) == "returned");
}

}  // namespace ot
