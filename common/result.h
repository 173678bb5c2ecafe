// Errors as values: Result<T> holds either a T or an Error (a kind the caller can branch on and a
// message for logs). Used where code must decide what to do about a failure (storage, issuance,
// the API); pure codecs have their own small status enums instead.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace ot {

enum class ErrorKind {
  kUnavailable,  // a dependency (database, CA, controld) cannot be reached now: retry later
  kTimeout,      // the operation took longer than its bound
  kConflict,     // a lost race (a revision changed underneath): reload and retry
  kNotFound,
  kInvalid,  // the input is wrong; retrying the same input will fail again
  kInternal,
};

[[nodiscard]] constexpr const char* errorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUnavailable:
      return "unavailable";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kConflict:
      return "conflict";
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kInvalid:
      return "invalid";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "internal";
}

struct Error {
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;
};

// A value or an error. E is Error everywhere but where a richer error must travel up unchanged
// (controld's ACME steps use AcmeError, the HTTP API ServiceError, otunnel's API client ApiError,
// the bridge codecs their protocol error enums: see the aliases beside each).
//
// Asking for the alternative that is not there (value() on an error, error() on a value) is a bug:
// it prints what was asked and aborts rather than throwing, because the data plane never throws.
// The check is one index compare, so the frame decoder on relayd's hot path pays nothing more.
template <typename T, typename E = Error>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit
  Result(E error) : value_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  [[nodiscard]] bool ok() const { return value_.index() == 0; }
  explicit operator bool() const { return ok(); }
  [[nodiscard]] T& value() & { return *valuePtr(); }
  [[nodiscard]] const T& value() const& { return *valuePtr(); }
  [[nodiscard]] T&& value() && { return std::move(*valuePtr()); }
  [[nodiscard]] const E& error() const { return *errorPtr(); }
  T* operator->() { return valuePtr(); }
  const T* operator->() const { return valuePtr(); }
  T& operator*() & { return *valuePtr(); }
  const T& operator*() const& { return *valuePtr(); }

 private:
  T* valuePtr() { return const_cast<T*>(std::as_const(*this).valuePtr()); }
  const T* valuePtr() const {
    const T* p = std::get_if<0>(&value_);
    if (p == nullptr) [[unlikely]] {
      wrongAccess("value() on an error");
    }
    return p;
  }
  const E* errorPtr() const {
    const E* p = std::get_if<1>(&value_);
    if (p == nullptr) [[unlikely]] {
      wrongAccess("error() on a value");
    }
    return p;
  }
  [[noreturn]] static void wrongAccess(const char* what) {
    std::fprintf(stderr, "ot::Result: %s\n", what);
    std::abort();
  }

  std::variant<T, E> value_;
};

// Result<void>: success carries nothing.
struct Ok {};
using Status = Result<Ok>;

}  // namespace ot
