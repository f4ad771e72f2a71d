// Pages compiled into the binary from src/server/assets/ (embed_page.cmake): served without
// any file read at run time.
#pragma once

#include <string_view>

namespace llamaserve::server {

struct EmbeddedPage {
  std::string_view html;           // the whole file, UTF-8
  std::string_view script_sha256;  // of its inline <script>, base64: a CSP 'sha256-...' source
  std::string_view style_sha256;   // of its inline <style>, likewise
};

// The chat page served at GET / (assets/chat.html).
const EmbeddedPage& chat_page();

}  // namespace llamaserve::server
