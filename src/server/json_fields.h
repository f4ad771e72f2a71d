// Reading the fields of a request's JSON body, with errors that name the field, what was
// expected and what was found. Shared by every request parser of the server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace llamaserve::server {

// "a string", "an integer", ... for messages.
const char* json_type_name(const nlohmann::json& value);
// A 400-class Status (kInvalidArgument) with this message.
Status invalid(std::string message);
// "'name' must be <expected>, got <type of value>".
Status wrong_type(std::string_view name, std::string_view expected, const nlohmann::json& value);

// The field, or nullptr when it is absent or null (OpenAI treats null as "not given").
const nlohmann::json* find_field(const nlohmann::json& object, std::string_view key);

// Each reader leaves `out` unchanged when the field is absent or null.
Status read_bool(const nlohmann::json& object, std::string_view key, bool& out);
Status read_string(const nlohmann::json& object, std::string_view key, std::string& out);
// Integer in [min_value, max_value]; `limit_note` explains where the upper bound comes from.
Status read_int(const nlohmann::json& object, std::string_view key, int64_t min_value,
                int64_t max_value, std::optional<int64_t>& out, std::string_view limit_note = {});

// An array of token ids: each an integer in [0, INT32_MAX] (against a vocabulary: the
// caller's business), appended to `out`; errors name "name[i]".
Status read_token_array(const nlohmann::json& array, std::string_view name,
                        std::vector<int32_t>& out);

struct FloatRange {
  double min_value;
  double max_value;
  bool min_exclusive = false;
};
Status read_float(const nlohmann::json& object, std::string_view key, FloatRange range, float& out);

}  // namespace llamaserve::server
