// Renders a template file with a JSON context and prints the result as one JSON object, for
// tests/py/test_chat_templates.py (which compares it with Python jinja2):
//   jinja_render TEMPLATE CONTEXT.json
// CONTEXT.json: {"template_variables": {...}, "client_variables": {...}}.
// Output: {"ok": true, "text": "...", "client_ranges": [[begin, end], ...]} (byte offsets)
//      or {"ok": false, "kind": "raised", "line": 12, "message": "..."}.
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "jinja/template.h"

namespace {

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace llamaserve::jinja;
  if (argc != 3) {
    std::cerr << "usage: jinja_render TEMPLATE CONTEXT.json\n";
    return 2;
  }
  const nlohmann::ordered_json context = nlohmann::ordered_json::parse(read_file(argv[2]));
  nlohmann::ordered_json result;
  ErrorDetail error;
  auto report_error = [&] {
    result["ok"] = false;
    result["kind"] = error_kind_name(error.kind);
    result["line"] = error.line;
    result["message"] = error.message;
  };
  auto tmpl = Template::parse(read_file(argv[1]), {}, &error);
  if (!tmpl.is_ok()) {
    report_error();
  } else {
    auto out = tmpl->render(context.value("template_variables", nlohmann::ordered_json::object()),
                            context.value("client_variables", nlohmann::ordered_json::object()), {},
                            &error);
    if (!out.is_ok()) {
      report_error();
    } else {
      result["ok"] = true;
      result["text"] = out->text;
      nlohmann::ordered_json ranges = nlohmann::ordered_json::array();
      for (const ByteRange& r : out->client_ranges) ranges.push_back({r.begin, r.end});
      result["client_ranges"] = ranges;
    }
  }
  std::cout << result.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
            << "\n";
  return 0;
}
