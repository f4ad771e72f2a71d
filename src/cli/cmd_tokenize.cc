// llamaserve tokenize: token ids of text under a model's tokenizer.
//
//   llamaserve tokenize -m MODEL [--add-special] [--parse-special] [--show-pieces] (--file F |
//   TEXT)
//       one line of space-separated ids for the exact input bytes (no BOS unless --add-special);
//       --show-pieces adds one "id<TAB>piece" line per token (piece escaped).
//   llamaserve tokenize -m MODEL --lines (--file F | TEXT)
//       batch mode: each input line is a JSON string; prints one line of ids per input line.
//   llamaserve tokenize -m MODEL --decode [--lines] [--skip-special] (--file F | TEXT)
//       the inverse: input lines of space-separated ids; prints the decoded text (raw bytes),
//       or with --lines one JSON string per input line (invalid UTF-8 as U+FFFD).
// --file - reads standard input.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::cli {
namespace {

struct TokenizeOptions {
  std::string model_path;
  std::string text;
  std::string file;
  bool add_special = false;
  bool parse_special = false;
  bool show_pieces = false;
  bool lines = false;
  bool decode = false;
  bool skip_special = false;
};

Result<std::string> read_input(const TokenizeOptions& options) {
  if (options.file.empty()) return options.text;
  if (options.file == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::ifstream in(options.file, std::ios::binary);
  if (!in) return make_error(StatusCode::kIo, "cannot open '{}'", options.file);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return make_error(StatusCode::kIo, "error reading '{}'", options.file);
  return data;
}

// Printable ASCII and well-formed UTF-8 as is; everything else as an escape.
std::string escape_piece(std::string_view piece) {
  std::string out;
  for (size_t i = 0; i < piece.size(); ++i) {
    const auto c = static_cast<unsigned char>(piece[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      // Keep a complete multi-byte character, escape a stray byte.
      const int length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      bool ok = length > 1 && i + length <= piece.size();
      for (int k = 1; ok && k < length; ++k)
        ok = (static_cast<unsigned char>(piece[i + k]) & 0xC0) == 0x80;
      if (ok) {
        out.append(piece.substr(i, length));
        i += length - 1;
      } else {
        out += fmt::format("\\x{:02x}", c);
      }
    }
  }
  return out;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out.push_back(' ');
    out += std::to_string(ids[i]);
  }
  return out;
}

Result<std::vector<int32_t>> parse_ids(std::string_view line, size_t line_number) {
  std::vector<int32_t> ids;
  std::istringstream in{std::string(line)};
  std::string word;
  while (in >> word) {
    try {
      size_t used = 0;
      const long value = std::stol(word, &used);
      if (used != word.size() || value < INT32_MIN || value > INT32_MAX)
        throw std::out_of_range(word);
      ids.push_back(static_cast<int32_t>(value));
    } catch (const std::exception&) {
      return make_error(StatusCode::kInvalidArgument, "line {}: '{}' is not a token id",
                        line_number, word);
    }
  }
  return ids;
}

std::vector<std::string_view> split_lines(std::string_view input) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < input.size()) {
    size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    lines.push_back(input.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

Status run_tokenize(const TokenizeOptions& options) {
  LS_ASSIGN_OR_RETURN(auto file, GgufFile::open(options.model_path));
  LS_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::from_gguf(*file));
  LS_ASSIGN_OR_RETURN(std::string input, read_input(options));
  std::string out;

  if (options.decode) {
    const std::vector<std::string_view> lines =
        options.lines ? split_lines(input) : std::vector<std::string_view>{input};
    for (size_t i = 0; i < lines.size(); ++i) {
      LS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, parse_ids(lines[i], i + 1));
      const std::string text = tokenizer.decode(ids, options.skip_special);
      if (options.lines) {
        out += nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out.push_back('\n');
      } else {
        out += text;
      }
    }
  } else if (options.lines) {
    const std::vector<std::string_view> lines = split_lines(input);
    for (size_t i = 0; i < lines.size(); ++i) {
      std::string text;
      try {
        const nlohmann::json value = nlohmann::json::parse(lines[i]);
        if (!value.is_string()) throw std::invalid_argument("not a string");
        text = value.get<std::string>();
      } catch (const std::exception& e) {
        return make_error(StatusCode::kInvalidArgument, "line {}: expected a JSON string ({})",
                          i + 1, e.what());
      }
      out += join_ids(tokenizer.encode(text, options.add_special, options.parse_special));
      out.push_back('\n');
    }
  } else {
    const std::vector<int32_t> ids =
        tokenizer.encode(input, options.add_special, options.parse_special);
    out += join_ids(ids);
    out.push_back('\n');
    if (options.show_pieces) {
      for (const int32_t id : ids)
        out += fmt::format("{}\t{}\n", id, escape_piece(tokenizer.token_piece(id)));
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (std::fflush(stdout) != 0) return make_error(StatusCode::kIo, "error writing the output");
  return Status::ok();
}

std::function<int()> setup_tokenize(CLI::App& sub) {
  auto options = std::make_shared<TokenizeOptions>();
  sub.add_option("-m,--model", options->model_path, "GGUF model (or vocabulary-only) file")
      ->required();
  auto* text = sub.add_option("text", options->text, "text to tokenize");
  auto* file = sub.add_option("--file", options->file, "read the input from a file ('-' = stdin)");
  text->excludes(file);
  file->excludes(text);
  sub.add_flag("--add-special", options->add_special, "add BOS/EOS as the model's flags say");
  sub.add_flag("--parse-special", options->parse_special,
               "recognise control-token texts such as <|im_start|> in the input");
  sub.add_flag("--show-pieces", options->show_pieces,
               "also print one 'id<TAB>piece' line per token");
  sub.add_flag("--lines", options->lines,
               "batch mode: one JSON string per input line, one line of ids per input line");
  sub.add_flag("--decode", options->decode, "input is token ids; print the decoded text");
  sub.add_flag("--skip-special", options->skip_special, "with --decode: leave out control tokens");
  return [options, text, file] {
    if (text->count() == 0 && file->count() == 0) {
      std::fprintf(stderr,
                   "llamaserve tokenize: no input: give the text, or --file F ('-' = "
                   "standard input)\n");
      return 2;
    }
    const Status status = run_tokenize(*options);
    if (!status.is_ok()) {
      std::fprintf(stderr, "llamaserve tokenize: %s\n", status.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace

LLAMASERVE_COMMAND(tokenize, "tokenize", "Print the token ids of a text under a model's tokenizer",
                   setup_tokenize);

}  // namespace llamaserve::cli
