// Base64 (RFC 4648 section 4, with padding) and base64url (section 5, without padding).
// Pure codec: decoding is strict, so one byte string has exactly one accepted encoding. That
// matters where encoded values are compared or used as keys (tokens, JWS parts): anything that is
// not the canonical form (whitespace, bad padding, non-zero trailing bits) is rejected.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ot::base64 {

// Standard alphabet (+/), padded with '=' to a multiple of four characters.
[[nodiscard]] std::string encode(std::span<const uint8_t> data);
[[nodiscard]] std::string encode(std::string_view data);

// URL and filename safe alphabet (-_), no padding.
[[nodiscard]] std::string encodeUrl(std::span<const uint8_t> data);
[[nodiscard]] std::string encodeUrl(std::string_view data);

// std::nullopt on a character outside the alphabet (whitespace included), missing or misplaced
// padding, a length no encoder produces, or non-zero bits in the last character's unused part.
[[nodiscard]] std::optional<std::vector<uint8_t>> decode(std::string_view text);
// As decode, for the url alphabet; '=' is rejected (we never emit padding for base64url).
[[nodiscard]] std::optional<std::vector<uint8_t>> decodeUrl(std::string_view text);

}  // namespace ot::base64
