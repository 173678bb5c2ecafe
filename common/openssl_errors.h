// The thread's OpenSSL error queue as one line of text, for error messages (the queue is left
// empty). Used by the TLS contexts and engine.
#pragma once

#include <openssl/err.h>

#include <string>

namespace ot::tls {

inline std::string opensslErrorText() {
  std::string text;
  unsigned long code = 0;
  while ((code = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    if (!text.empty()) text += "; ";
    text += buf;
  }
  return text;
}

}  // namespace ot::tls
