// Errors as values: Result<T> holds either a T or an Error (a kind the caller can branch on and a
// message for logs). Used where code must decide what to do about a failure (storage, issuance,
// the API); pure codecs have their own small status enums instead.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace ot {

enum class ErrorKind {
  kUnavailable,  // a dependency (database, CA, controld) cannot be reached now: retry later
  kTimeout,      // the operation took longer than its bound
  kConflict,     // a lost race (a revision changed underneath): reload and retry
  kNotFound,
  kInvalid,      // the input is wrong; retrying the same input will fail again
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
// (controld's ACME steps use AcmeError).
template <typename T, typename E = Error>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(E error) : value_(std::move(error)) {}  // NOLINT

  [[nodiscard]] bool ok() const { return std::holds_alternative<T>(value_); }
  explicit operator bool() const { return ok(); }
  [[nodiscard]] T& value() & { return std::get<T>(value_); }
  [[nodiscard]] const T& value() const& { return std::get<T>(value_); }
  [[nodiscard]] T&& value() && { return std::get<T>(std::move(value_)); }
  [[nodiscard]] const E& error() const { return std::get<E>(value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, E> value_;
};

// Result<void>: success carries nothing.
struct Ok {};
using Status = Result<Ok>;

}  // namespace ot
