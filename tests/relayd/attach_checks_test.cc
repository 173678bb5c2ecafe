// The order of an attach's checks after the parse (relayd/attach_checks.h): from the cached
// record and from controld's answer, the token always comes before the routes, and the routes
// before the certificate.
#include "relayd/attach_checks.h"

#include <doctest/doctest.h>

#include <string>

#include "common/bridge_control.h"
#include "common/crypto.h"

namespace {

namespace v1 = ::opentunnel::control::v1;
using ot::bridge::AttachErrorCode;
using ot::relayd::AttachOutcome;
using ot::relayd::CachedRecord;
using ot::relayd::checkCachedAttach;
using ot::relayd::controlVerdict;
using Kind = ot::relayd::ControlVerdict::Kind;

CachedRecord cachedRecord(bool certReady = true) {
  CachedRecord record;
  const auto digest = ot::crypto::sha256("right-token");
  std::copy(digest.begin(), digest.end(), record.tokenSha256.begin());
  record.certReady = certReady;
  return record;
}

// An attach as the parse leaves it; with badRoutes, its routes were invalid.
ot::bridge::AttachRequest attachWith(const std::string& token, bool badRoutes) {
  std::string text = R"({"type":"attach","token":")" + token + R"(","routes":)";
  text += badRoutes ? R"(["ok","a.b"]})" : R"(["ok"]})";
  auto parsed = ot::bridge::parseClientMessage(text);
  REQUIRE(parsed.ok());
  CHECK(parsed.value().routeError.empty() == !badRoutes);
  return parsed.value();
}

v1::AuthorizeAttachResponse answer(v1::AttachResult result, const std::string& message = "") {
  v1::AuthorizeAttachResponse response;
  response.set_result(result);
  response.set_message(message);
  return response;
}

}  // namespace

TEST_CASE("attach checks: from the cache, the token before the routes before the certificate") {
  const CachedRecord ready = cachedRecord();
  const CachedRecord notReady = cachedRecord(false);

  // A wrong token with invalid routes is a bad token (a failed attach), not invalid_route.
  auto refused = checkCachedAttach(&ready, attachWith("wrong-token", true));
  REQUIRE(refused);
  CHECK(refused->code == AttachErrorCode::kBadToken);
  CHECK(refused->outcome == AttachOutcome::kBadToken);

  // The right token: now the routes are answered, with the parse's reason.
  refused = checkCachedAttach(&notReady, attachWith("right-token", true));
  REQUIRE(refused);
  CHECK(refused->code == AttachErrorCode::kInvalidRoute);
  CHECK(refused->outcome == AttachOutcome::kInvalidRoute);
  CHECK(refused->message.find("routes[1]") != std::string::npos);

  // Valid routes: the certificate.
  refused = checkCachedAttach(&notReady, attachWith("right-token", false));
  REQUIRE(refused);
  CHECK(refused->code == AttachErrorCode::kCertNotReady);

  CHECK_FALSE(checkCachedAttach(&ready, attachWith("right-token", false)));

  // Nothing cached: nobody can check the token, so nothing else is answered either.
  refused = checkCachedAttach(nullptr, attachWith("right-token", true));
  REQUIRE(refused);
  CHECK(refused->code == AttachErrorCode::kError);
  CachedRecord deleted = ready;
  deleted.deleted = true;
  CHECK(checkCachedAttach(&deleted, attachWith("right-token", false))->code ==
        AttachErrorCode::kError);
}

TEST_CASE("attach checks: controld's answer, with the routes relayd found invalid") {
  const auto badRoutes = attachWith("whatever", true);
  const auto goodRoutes = attachWith("whatever", false);

  // controld says the token is wrong: bad_token, whatever the routes.
  auto verdict = controlVerdict(answer(v1::ATTACH_RESULT_BAD_TOKEN), badRoutes);
  CHECK(verdict.kind == Kind::kRefused);
  CHECK(verdict.refusal.code == AttachErrorCode::kBadToken);
  CHECK(verdict.refusal.message == "bad token");

  // Any answer that means the token matched: invalid_route comes first.
  for (const auto result : {v1::ATTACH_RESULT_OK, v1::ATTACH_RESULT_CERT_NOT_READY,
                            v1::ATTACH_RESULT_TOO_MANY_ROUTES, v1::ATTACH_RESULT_ROUTE_CONFLICT}) {
    CAPTURE(result);
    verdict = controlVerdict(answer(result), badRoutes);
    CHECK(verdict.kind == Kind::kRefused);
    CHECK(verdict.refusal.code == AttachErrorCode::kInvalidRoute);
    CHECK(verdict.refusal.outcome == AttachOutcome::kInvalidRoute);
  }

  // controld could not decide: the cache will, in the same order.
  CHECK(controlVerdict(answer(v1::ATTACH_RESULT_ERROR), badRoutes).kind == Kind::kUseCache);
  CHECK(controlVerdict(answer(v1::ATTACH_RESULT_UNSPECIFIED), goodRoutes).kind == Kind::kUseCache);

  // Valid routes: controld's answer as it is, with its message.
  CHECK(controlVerdict(answer(v1::ATTACH_RESULT_OK), goodRoutes).kind == Kind::kAllowed);
  verdict = controlVerdict(answer(v1::ATTACH_RESULT_CERT_NOT_READY), goodRoutes);
  CHECK(verdict.refusal.code == AttachErrorCode::kCertNotReady);
  verdict = controlVerdict(answer(v1::ATTACH_RESULT_ROUTE_CONFLICT, "api is held"), goodRoutes);
  CHECK(verdict.refusal.code == AttachErrorCode::kRouteConflict);
  CHECK(verdict.refusal.message == "api is held");
  verdict = controlVerdict(answer(v1::ATTACH_RESULT_TOO_MANY_ROUTES), goodRoutes);
  CHECK(verdict.refusal.code == AttachErrorCode::kTooManyRoutes);
  CHECK(verdict.refusal.outcome == AttachOutcome::kTooManyRoutes);
}
