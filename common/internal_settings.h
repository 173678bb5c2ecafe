// The region mesh's settings both daemons read (docs/mesh.md): INTERNAL_LISTEN (relayd listens on
// it; controld takes it as INTERNAL_ADDRESS's default), INTERNAL_TOKEN (the secret every machine
// proves) and INTERNAL_ADDRESS (where peers reach this machine; links and forwards leave from its
// IP), with the checks they share. Each daemon adds its own settings beside them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/cli_fwd.h"
#include "common/config.h"

namespace ot::mesh {

// INTERNAL_TOKEN's shortest accepted length: it keys every proof between machines, and a short
// shared secret would make the HMAC proofs guessable offline.
inline constexpr size_t kMinInternalTokenBytes = 32;

// --internal-listen / --internal-token / --internal-address and their environment variables.
void addInternalOptions(CLI::App& app, config::ListenAddress& listen, std::string& token,
                        std::string& address);

// What is wrong with INTERNAL_LISTEN and INTERNAL_TOKEN together ("" when nothing: either the
// listener is off, or it is a TCP address with a token of at least kMinInternalTokenBytes). The
// text never contains the token.
[[nodiscard]] std::string checkInternalListen(const config::ListenAddress& listen,
                                              std::string_view token);

}  // namespace ot::mesh
