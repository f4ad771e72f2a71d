# Turns one self-contained HTML page into a C++ source file that defines `EmbeddedPage`
# (server/embedded_page.h): the page's bytes and the SHA-256 of its one inline <script> and
# one inline <style>, base64-encoded as a Content-Security-Policy hash source wants them.
#
#   cmake -DINPUT=page.html -DOUTPUT=page.cc -DFUNCTION=chat_page -P embed_page.cmake
#
# The browser hashes the exact text between the tags, so the page must have exactly one of
# each, without attributes on the opening tags.

foreach(variable INPUT OUTPUT FUNCTION)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "embed_page.cmake: -D${variable}=... is required")
  endif()
endforeach()

# Base64 (RFC 4648, padded) of the bytes spelled by an even-length hex string.
function(hex_to_base64 hex out_variable)
  set(alphabet "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
  string(LENGTH "${hex}" hex_length)
  set(result "")
  set(offset 0)
  while(offset LESS hex_length)
    string(SUBSTRING "${hex}" ${offset} 6 group)
    string(LENGTH "${group}" group_length)
    math(EXPR group_bytes "${group_length} / 2")
    while(group_length LESS 6)
      string(APPEND group "0")
      string(LENGTH "${group}" group_length)
    endwhile()
    math(EXPR value "0x${group}")
    math(EXPR chars "${group_bytes} + 1")
    foreach(shift 18 12 6 0)
      if(chars GREATER 0)
        math(EXPR index "(${value} >> ${shift}) & 63")
        string(SUBSTRING "${alphabet}" ${index} 1 char)
        string(APPEND result "${char}")
      else()
        string(APPEND result "=")
      endif()
      math(EXPR chars "${chars} - 1")
    endforeach()
    math(EXPR offset "${offset} + 6")
  endwhile()
  set(${out_variable} "${result}" PARENT_SCOPE)
endfunction()

# The SHA-256 (base64) of the text between `open_tag` and the matching closing tag.
function(inline_block_sha256 text open_tag close_tag out_variable)
  string(FIND "${text}" "${open_tag}" open_at)
  string(FIND "${text}" "${close_tag}" close_at)
  if(open_at LESS 0 OR close_at LESS open_at)
    message(FATAL_ERROR "embed_page.cmake: ${INPUT} has no ${open_tag}...${close_tag} block")
  endif()
  string(LENGTH "${open_tag}" open_length)
  math(EXPR body_at "${open_at} + ${open_length}")
  math(EXPR body_length "${close_at} - ${body_at}")
  string(SUBSTRING "${text}" ${body_at} ${body_length} body)
  string(SUBSTRING "${text}" ${close_at} -1 rest)
  string(FIND "${rest}" "${open_tag}" second_at)
  if(second_at GREATER_EQUAL 0)
    message(FATAL_ERROR "embed_page.cmake: ${INPUT} has more than one ${open_tag} block")
  endif()
  string(SHA256 digest "${body}")
  hex_to_base64("${digest}" digest_base64)
  set(${out_variable} "${digest_base64}" PARENT_SCOPE)
endfunction()

file(READ "${INPUT}" page_text)
inline_block_sha256("${page_text}" "<script>" "</script>" script_sha256)
inline_block_sha256("${page_text}" "<style>" "</style>" style_sha256)

# The bytes as a char array: no raw-string delimiter or literal length limit to worry about.
file(READ "${INPUT}" page_hex HEX)
string(LENGTH "${page_hex}" page_hex_length)
math(EXPR page_bytes "${page_hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," page_bytes_text "${page_hex}")
string(REPEAT "'[^']*'," 16 sixteen_bytes)
string(REGEX REPLACE "(${sixteen_bytes})" "\\1\n    " page_bytes_text "${page_bytes_text}")

get_filename_component(input_name "${INPUT}" NAME)
set(generated "// Generated at build time from ${input_name} by embed_page.cmake. Do not edit.
#include \"server/embedded_page.h\"

namespace llamaserve::server {
namespace {

constexpr char kPageBytes[${page_bytes}] = {
    ${page_bytes_text}};

}  // namespace

const EmbeddedPage& ${FUNCTION}() {
  static const EmbeddedPage page{std::string_view(kPageBytes, sizeof(kPageBytes)),
                                 \"${script_sha256}\", \"${style_sha256}\"};
  return page;
}

}  // namespace llamaserve::server
")
file(WRITE "${OUTPUT}" "${generated}")
