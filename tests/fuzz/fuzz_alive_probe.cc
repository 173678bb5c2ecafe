// Fuzzes the liveness question a peer sends relayd before it is trusted (verifyAliveQuestion) and
// the answer an asker reads (verifyAliveAnswer). Whatever verifies under the fuzz secret must
// rebuild to the same line; nothing may verify under another secret.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/alive_probe.h"

namespace {

using namespace ot::mesh;

constexpr std::string_view kSecret = "fuzz-secret";
constexpr int64_t kNow = 1'800'000'000'000;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  const auto question = verifyAliveQuestion(line, kSecret, "machine-a", kNow);
  if (question) {
    const auto rebuilt = buildAliveQuestion(kSecret, *question);
    check(rebuilt.has_value() && std::string_view(*rebuilt).substr(0, rebuilt->size() - 1) == line);
  }
  check(!verifyAliveQuestion(line, "other-secret", "machine-a", kNow).ok() || !question.ok());

  SignedEnvelope asked;
  asked.sender = "machine-b";
  asked.receiver = "machine-a";
  asked.timeMs = kNow;
  asked.nonce.fill(7);
  const auto answer = verifyAliveAnswer(line, kSecret, asked, kNow);
  if (answer) check(!verifyAliveAnswer(line, "other-secret", asked, kNow).ok());
  return 0;
}
