#include "common/base64.h"

#include <array>

namespace ot::base64 {
namespace {

constexpr std::string_view kStandard =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr std::string_view kUrl =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

constexpr uint8_t kInvalid = 0xff;

using DecodeTable = std::array<uint8_t, 256>;

constexpr DecodeTable makeDecodeTable(std::string_view alphabet) {
  DecodeTable table{};
  table.fill(kInvalid);
  for (size_t i = 0; i < alphabet.size(); ++i) {
    table[static_cast<unsigned char>(alphabet[i])] = static_cast<uint8_t>(i);
  }
  return table;
}

constexpr DecodeTable kStandardTable = makeDecodeTable(kStandard);
constexpr DecodeTable kUrlTable = makeDecodeTable(kUrl);

std::span<const uint8_t> asBytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

std::string encodeWith(std::span<const uint8_t> data, std::string_view alphabet, bool pad) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    const uint32_t group = (uint32_t{data[i]} << 16) | (uint32_t{data[i + 1]} << 8) | data[i + 2];
    out.push_back(alphabet[(group >> 18) & 0x3f]);
    out.push_back(alphabet[(group >> 12) & 0x3f]);
    out.push_back(alphabet[(group >> 6) & 0x3f]);
    out.push_back(alphabet[group & 0x3f]);
  }
  const size_t rest = data.size() - i;
  if (rest == 1) {
    const uint32_t group = uint32_t{data[i]} << 16;
    out.push_back(alphabet[(group >> 18) & 0x3f]);
    out.push_back(alphabet[(group >> 12) & 0x3f]);
    if (pad) out.append("==");
  } else if (rest == 2) {
    const uint32_t group = (uint32_t{data[i]} << 16) | (uint32_t{data[i + 1]} << 8);
    out.push_back(alphabet[(group >> 18) & 0x3f]);
    out.push_back(alphabet[(group >> 12) & 0x3f]);
    out.push_back(alphabet[(group >> 6) & 0x3f]);
    if (pad) out.push_back('=');
  }
  return out;
}

// `text` holds only the significant characters (padding already removed and checked).
std::optional<std::vector<uint8_t>> decodeWith(std::string_view text, const DecodeTable& table) {
  // A final group of one character carries only 6 bits: no encoder produces it.
  if (text.size() % 4 == 1) return std::nullopt;
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3 + 2);
  uint32_t group = 0;
  size_t count = 0;
  for (const char c : text) {
    const uint8_t value = table[static_cast<unsigned char>(c)];
    if (value == kInvalid) return std::nullopt;
    group = (group << 6) | value;
    if (++count == 4) {
      out.push_back(static_cast<uint8_t>(group >> 16));
      out.push_back(static_cast<uint8_t>(group >> 8));
      out.push_back(static_cast<uint8_t>(group));
      group = 0;
      count = 0;
    }
  }
  if (count == 2) {
    // 12 bits for one byte: the low 4 must be zero for the encoding to be canonical.
    if ((group & 0x0f) != 0) return std::nullopt;
    out.push_back(static_cast<uint8_t>(group >> 4));
  } else if (count == 3) {
    // 18 bits for two bytes: the low 2 must be zero.
    if ((group & 0x03) != 0) return std::nullopt;
    out.push_back(static_cast<uint8_t>(group >> 10));
    out.push_back(static_cast<uint8_t>(group >> 2));
  }
  return out;
}

}  // namespace

std::string encode(std::span<const uint8_t> data) {
  return encodeWith(data, kStandard, true);
}
std::string encode(std::string_view data) {
  return encode(asBytes(data));
}

std::string encodeUrl(std::span<const uint8_t> data) {
  return encodeWith(data, kUrl, false);
}
std::string encodeUrl(std::string_view data) {
  return encodeUrl(asBytes(data));
}

std::optional<std::vector<uint8_t>> decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  size_t padding = 0;
  while (padding < 2 && padding < text.size() && text[text.size() - 1 - padding] == '=') {
    ++padding;
  }
  // Any other '=' (a third one, or one mid-string) fails the alphabet check in decodeWith.
  return decodeWith(text.substr(0, text.size() - padding), kStandardTable);
}

std::optional<std::vector<uint8_t>> decodeUrl(std::string_view text) {
  return decodeWith(text, kUrlTable);
}

}  // namespace ot::base64
