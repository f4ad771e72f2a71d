#include "server/openapi.h"

namespace llamaserve::server {
namespace {

// The errors of every route that runs a model (generation and embeddings): the marker
// __MODEL_ROUTE_ERRORS__ in kDocument.
constexpr const char* kModelRouteErrors = R"json(
          "400": {"$ref": "#/components/responses/Error"},
          "401": {"$ref": "#/components/responses/Error"},
          "404": {"$ref": "#/components/responses/Error"},
          "408": {"$ref": "#/components/responses/Error"},
          "413": {"$ref": "#/components/responses/Error"},
          "429": {"$ref": "#/components/responses/Overloaded"},
          "500": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"})json";

// Markers "__MAX_TOKENS__" etc. are replaced by openapi_document().
constexpr const char* kDocument = R"json({
  "openapi": "3.0.3",
  "info": {
    "title": "llamaserve",
    "version": "0.1.0",
    "description": "OpenAI-compatible inference server for LLaMA-family GGUF models. Every error body is {\"error\": {\"message\", \"type\", \"code\", \"param\"}}. With --api-key, every route but / and /health needs 'Authorization: Bearer KEY'."
  },
  "security": [{"bearerAuth": []}],
  "paths": {
    "/": {
      "get": {
        "summary": "A chat page for the served models (HTML with inline script and style; its API calls send the key entered on the page)",
        "security": [],
        "responses": {
          "200": {"description": "The page", "content": {"text/html": {"schema": {"type": "string"}}}},
          "503": {"$ref": "#/components/responses/Error"}
        }
      }
    },
    "/health": {
      "get": {
        "summary": "Liveness: the process is up",
        "security": [],
        "responses": {
          "200": {"description": "Alive", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Status"}}}}
        }
      }
    },
    "/ready": {
      "get": {
        "summary": "Readiness: model loaded and warmed up, not draining",
        "responses": {
          "200": {"description": "Ready", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Status"}}}},
          "401": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}
        }
      }
    },
    "/metrics": {
      "get": {
        "summary": "Prometheus metrics (text exposition format 0.0.4)",
        "responses": {
          "200": {"description": "Metrics", "content": {"text/plain": {"schema": {"type": "string"}}}},
          "401": {"$ref": "#/components/responses/Error"}
        }
      }
    },
    "/openapi.json": {
      "get": {
        "summary": "This document",
        "responses": {
          "200": {"description": "OpenAPI document", "content": {"application/json": {"schema": {"type": "object"}}}},
          "401": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}
        }
      }
    },
    "/v1/models": {
      "get": {
        "summary": "The served model",
        "responses": {
          "200": {"description": "Model list", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ModelList"}}}},
          "401": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}
        }
      }
    },
    "/v1/models/{model}": {
      "get": {
        "summary": "One model by id",
        "parameters": [{"name": "model", "in": "path", "required": true, "schema": {"type": "string"}}],
        "responses": {
          "200": {"description": "Model", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Model"}}}},
          "401": {"$ref": "#/components/responses/Error"},
          "404": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}
        }
      }
    },
    "/v1/chat/completions": {
      "post": {
        "summary": "OpenAI chat completion (stream: true answers with server-sent events ending in 'data: [DONE]')",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletionRequest"}}}},
        "responses": {
          "200": {"description": "Completion, or a stream of chat.completion.chunk objects", "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletion"}},
            "text/event-stream": {"schema": {"$ref": "#/components/schemas/OpenAiEvent"}}}},
          __MODEL_ROUTE_ERRORS__
        }
      }
    },
    "/v1/completions": {
      "post": {
        "summary": "OpenAI (legacy) text completion",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CompletionRequest"}}}},
        "responses": {
          "200": {"description": "Completion, or a stream of text_completion chunks", "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Completion"}},
            "text/event-stream": {"schema": {"$ref": "#/components/schemas/OpenAiEvent"}}}},
          __MODEL_ROUTE_ERRORS__
        }
      }
    },
    "/chat": {
      "post": {
        "summary": "Simple chat: one user prompt, streamed as 'event: token' (text in data: lines) and a final 'event: done' (JSON with finish_reason, usage, timings) or 'event: error'",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SimpleChatRequest"}}}},
        "responses": {
          "200": {"description": "Token stream, or a JSON summary with \"stream\": false", "content": {
            "text/event-stream": {"schema": {"$ref": "#/components/schemas/SimpleChatEvent"}},
            "application/json": {"schema": {"$ref": "#/components/schemas/SimpleChatResult"}}}},
          __MODEL_ROUTE_ERRORS__
        }
      }
    },
    "/v1/embeddings": {
      "post": {
        "summary": "OpenAI embeddings: each input's final hidden states (after the output norm), mean-pooled (or the last token's with --embedding-pooling last), L2-normalized",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EmbeddingRequest"}}}},
        "responses": {
          "200": {"description": "One vector per input, in input order", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EmbeddingList"}}}},
          __MODEL_ROUTE_ERRORS__
        }
      }
    },
    "/tokenize": {
      "post": {
        "summary": "Text to token ids",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenizeRequest"}}}},
        "responses": {
          "200": {"description": "Token ids", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenizeResult"}}}},
          "400": {"$ref": "#/components/responses/Error"},
          "401": {"$ref": "#/components/responses/Error"},
          "413": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}
        }
      }
    },
    "/detokenize": {
      "post": {
        "summary": "Token ids to text (bytes that are not valid UTF-8 become U+FFFD)",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DetokenizeRequest"}}}},
        "responses": {
          "200": {"description": "Text", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DetokenizeResult"}}}},
          "400": {"$ref": "#/components/responses/Error"},
          "401": {"$ref": "#/components/responses/Error"},
          "413": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}
        }
      }
    }
  },
  "components": {
    "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
    "responses": {
      "Error": {"description": "Error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Overloaded": {
        "description": "Queue full or queue wait exceeded; retry after the given seconds",
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
      }
    },
    "schemas": {
      "Error": {
        "type": "object", "required": ["error"],
        "properties": {"error": {"type": "object", "required": ["message", "type", "code"],
          "properties": {"message": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "string"}, "param": {"type": "string", "nullable": true}}}}
      },
      "OpenAiEvent": {
        "type": "object", "required": ["data"],
        "description": "One server-sent event of an OpenAI stream: data is a JSON chunk, an {\"error\": ...} object, or the final [DONE]",
        "properties": {"event": {"type": "string", "enum": ["message"]}, "data": {"type": "string", "minLength": 1}}
      },
      "SimpleChatEvent": {
        "type": "object", "required": ["event", "data"],
        "description": "One server-sent event of /chat: token (the text, newlines as several data lines), then done (JSON: finish_reason, usage, timings) or error (JSON error object)",
        "properties": {"event": {"type": "string", "enum": ["token", "done", "error"]}, "data": {"type": "string"}}
      },
      "Status": {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}},
      "Model": {
        "type": "object", "required": ["id", "object", "created", "owned_by"],
        "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["model"]}, "created": {"type": "integer"}, "owned_by": {"type": "string"},
          "context_length": {"type": "integer"},
          "alias_of": {"type": "string", "description": "An alias (--model-alias): the id of the model it names"}}
      },
      "ModelList": {"type": "object", "required": ["object", "data"], "properties": {"object": {"type": "string", "enum": ["list"]}, "data": {"type": "array", "items": {"$ref": "#/components/schemas/Model"}}}},
      "Stop": {
        "nullable": true,
        "oneOf": [{"type": "string"}, {"type": "array", "maxItems": __MAX_STOP__, "items": {"type": "string"}}],
        "description": "Text that ends generation; never part of the output. Empty strings are ignored."
      },
      "ContentPart": {"type": "object", "required": ["type", "text"], "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}},
      "MessageContent": {
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/components/schemas/ContentPart"}}],
        "description": "Text, or text parts (joined with newlines)"
      },
      "ChatMessage": {
        "oneOf": [
          {"type": "object", "required": ["role", "content"],
           "properties": {"role": {"type": "string", "enum": ["system", "developer", "user", "tool"]},
             "content": {"$ref": "#/components/schemas/MessageContent"}, "name": {"type": "string"},
             "tool_call_id": {"type": "string", "description": "role tool: the id of the call this is the result of"}}},
          {"type": "object", "required": ["role"],
           "properties": {"role": {"type": "string", "enum": ["assistant"]},
             "content": {"nullable": true, "oneOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/components/schemas/ContentPart"}}]},
             "name": {"type": "string"},
             "tool_calls": {"type": "array", "items": {"type": "object"}, "description": "Calls this turn made, as the server returned them"}}}
        ]
      },
      "Tool": {
        "type": "object", "required": ["type", "function"],
        "properties": {
          "type": {"type": "string", "enum": ["function"]},
          "function": {"type": "object", "required": ["name"],
            "properties": {
              "name": {"type": "string", "pattern": "^[a-zA-Z0-9_.-]{1,64}$", "description": "Unique among the tools"},
              "description": {"type": "string"},
              "parameters": {"type": "object", "description": "A JSON Schema of the arguments object"},
              "strict": {"type": "boolean"}}}
        }
      },
      "ToolChoice": {
        "nullable": true,
        "description": "none: the tools are not shown; auto (default with tools): the model's calls are parsed from its output; required / a named function: the output is decoded under the call schema",
        "oneOf": [
          {"type": "string", "enum": ["none", "auto", "required"]},
          {"type": "object", "required": ["type", "function"],
           "properties": {"type": {"type": "string", "enum": ["function"]},
             "function": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}
        ]
      },
      "ToolCall": {
        "type": "object", "required": ["id", "type", "function"],
        "properties": {"id": {"type": "string"}, "type": {"type": "string", "enum": ["function"]},
          "function": {"type": "object", "required": ["name", "arguments"],
            "properties": {"name": {"type": "string"}, "arguments": {"type": "string", "description": "JSON text of the arguments object"}}}}
      },
      "ResponseFormat": {
        "type": "object", "nullable": true, "required": ["type"],
        "description": "Structured output by constrained decoding: json_object (any JSON object) or json_schema (a document valid against the schema; see docs/api.md for the supported keywords). Unsupported schema features: 400 with code unsupported_schema.",
        "properties": {
          "type": {"type": "string", "enum": ["text", "json_object", "json_schema"]},
          "json_schema": {"type": "object", "nullable": true, "required": ["schema"],
            "properties": {
              "name": {"type": "string", "nullable": true, "maxLength": 64, "pattern": "^[a-zA-Z0-9_-]*$"},
              "description": {"type": "string", "nullable": true},
              "strict": {"type": "boolean", "nullable": true},
              "schema": {"type": "object", "description": "A JSON Schema; properties are generated in the order listed"}}}
        }
      },
      "StreamOptions": {"type": "object", "nullable": true, "properties": {"include_usage": {"type": "boolean", "nullable": true}}},
      "ChatCompletionRequest": {
        "type": "object", "required": ["messages"],
        "properties": {
          "model": {"type": "string", "enum": ["__MODEL__"], "nullable": true, "description": "The served model id (anything else: 404)"},
          "messages": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/ChatMessage"}},
          "max_tokens": {"type": "integer", "minimum": 1, "maximum": __MAX_TOKENS__, "nullable": true},
          "max_completion_tokens": {"type": "integer", "minimum": 1, "maximum": __MAX_TOKENS__, "nullable": true},
          "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": true},
          "top_p": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
          "top_k": {"type": "integer", "minimum": 0, "maximum": 2147483647, "nullable": true},
          "min_p": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
          "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
          "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
          "repetition_penalty": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 10, "nullable": true},
          "seed": {"type": "integer", "nullable": true},
          "stop": {"$ref": "#/components/schemas/Stop"},
          "n": {"type": "integer", "minimum": 1, "maximum": 1, "nullable": true},
          "stream": {"type": "boolean", "nullable": true},
          "stream_options": {"$ref": "#/components/schemas/StreamOptions"},
          "logprobs": {"type": "boolean", "nullable": true},
          "top_logprobs": {"type": "integer", "minimum": 0, "maximum": __MAX_TOP_LOGPROBS__, "nullable": true, "description": "Values above 0 need logprobs: true"},
          "user": {"type": "string", "nullable": true},
          "ignore_eos": {"type": "boolean", "nullable": true, "description": "Extension: keep generating past end-of-generation tokens until max_tokens"},
          "logit_bias": {"type": "object", "maxProperties": 0, "nullable": true, "description": "Not supported; only empty"},
          "response_format": {"$ref": "#/components/schemas/ResponseFormat"},
          "tools": {"type": "array", "nullable": true, "maxItems": 128, "items": {"$ref": "#/components/schemas/Tool"}},
          "tool_choice": {"$ref": "#/components/schemas/ToolChoice"},
          "parallel_tool_calls": {"type": "boolean", "nullable": true, "description": "false: at most one call"}
        }
      },
      "CompletionRequest": {
        "type": "object", "required": ["prompt"],
        "properties": {
          "model": {"type": "string", "enum": ["__MODEL__"], "nullable": true},
          "prompt": {"oneOf": [
            {"type": "string", "minLength": 1},
            {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0, "maximum": __MAX_TOKEN_ID__}, "description": "Token ids"},
            {"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": "string", "minLength": 1}},
            {"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0, "maximum": __MAX_TOKEN_ID__}}}]},
          "max_tokens": {"type": "integer", "minimum": 1, "maximum": __MAX_TOKENS__, "nullable": true},
          "max_completion_tokens": {"type": "integer", "minimum": 1, "maximum": __MAX_TOKENS__, "nullable": true},
          "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": true},
          "top_p": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
          "top_k": {"type": "integer", "minimum": 0, "maximum": 2147483647, "nullable": true},
          "min_p": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
          "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
          "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
          "repetition_penalty": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 10, "nullable": true},
          "seed": {"type": "integer", "nullable": true},
          "stop": {"$ref": "#/components/schemas/Stop"},
          "n": {"type": "integer", "minimum": 1, "maximum": 1, "nullable": true},
          "best_of": {"type": "integer", "minimum": 1, "maximum": 1, "nullable": true},
          "echo": {"type": "boolean", "enum": [false], "nullable": true},
          "suffix": {"type": "string", "maxLength": 0, "nullable": true},
          "stream": {"type": "boolean", "nullable": true},
          "stream_options": {"$ref": "#/components/schemas/StreamOptions"},
          "logprobs": {"type": "integer", "minimum": 0, "maximum": 5, "nullable": true},
          "user": {"type": "string", "nullable": true},
          "ignore_eos": {"type": "boolean", "nullable": true, "description": "Extension: keep generating past end-of-generation tokens until max_tokens"},
          "logit_bias": {"type": "object", "maxProperties": 0, "nullable": true},
          "response_format": {"$ref": "#/components/schemas/ResponseFormat", "description": "Extension (OpenAI's completions have none): as for chat"}
        }
      },
      "SimpleChatRequest": {
        "type": "object", "required": ["prompt"],
        "properties": {
          "prompt": {"type": "string", "minLength": 1},
          "system": {"type": "string", "nullable": true},
          "maxTokens": {"type": "integer", "minimum": 1, "maximum": __MAX_TOKENS__, "nullable": true},
          "model": {"type": "string", "enum": ["__MODEL__"], "nullable": true},
          "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": true},
          "topP": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
          "topK": {"type": "integer", "minimum": 0, "maximum": 2147483647, "nullable": true},
          "minP": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true},
          "presencePenalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
          "frequencyPenalty": {"type": "number", "minimum": -2, "maximum": 2, "nullable": true},
          "repetitionPenalty": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 10, "nullable": true},
          "seed": {"type": "integer", "nullable": true},
          "stop": {"$ref": "#/components/schemas/Stop"},
          "ignoreEos": {"type": "boolean", "nullable": true, "description": "Keep generating past end-of-generation tokens until maxTokens"},
          "stream": {"type": "boolean", "nullable": true, "description": "false: one JSON object instead of the event stream"}
        }
      },
      "Usage": {
        "type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
        "properties": {"prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}}
      },
      "Timings": {
        "type": "object",
        "properties": {"queue_ms": {"type": "number"}, "ttft_ms": {"type": "number"}, "total_ms": {"type": "number"}, "decode_tokens_per_s": {"type": "number"}}
      },
      "ChatCompletion": {
        "type": "object", "required": ["id", "object", "created", "model", "choices", "usage"],
        "properties": {
          "id": {"type": "string"}, "object": {"type": "string", "enum": ["chat.completion"]}, "created": {"type": "integer"}, "model": {"type": "string"},
          "choices": {"type": "array", "items": {"type": "object", "required": ["index", "message", "finish_reason"],
            "properties": {"index": {"type": "integer"}, "finish_reason": {"type": "string", "enum": ["stop", "length", "tool_calls"]},
              "message": {"type": "object", "required": ["role", "content"], "properties": {"role": {"type": "string"},
                "content": {"type": "string", "nullable": true, "description": "null when the turn only calls tools"},
                "tool_calls": {"type": "array", "items": {"$ref": "#/components/schemas/ToolCall"}}}},
              "logprobs": {"type": "object", "nullable": true}}}},
          "usage": {"$ref": "#/components/schemas/Usage"}
        }
      },
      "Completion": {
        "type": "object", "required": ["id", "object", "created", "model", "choices", "usage"],
        "properties": {
          "id": {"type": "string"}, "object": {"type": "string", "enum": ["text_completion"]}, "created": {"type": "integer"}, "model": {"type": "string"},
          "choices": {"type": "array", "items": {"type": "object", "required": ["index", "text", "finish_reason"],
            "properties": {"index": {"type": "integer"}, "text": {"type": "string"}, "finish_reason": {"type": "string", "enum": ["stop", "length"]},
              "logprobs": {"type": "object", "nullable": true}}}},
          "usage": {"$ref": "#/components/schemas/Usage"}
        }
      },
      "SimpleChatResult": {
        "type": "object", "required": ["text", "finish_reason", "usage", "timings"],
        "properties": {"id": {"type": "string"}, "model": {"type": "string"}, "text": {"type": "string"}, "finish_reason": {"type": "string", "enum": ["stop", "length"]},
          "usage": {"$ref": "#/components/schemas/Usage"}, "timings": {"$ref": "#/components/schemas/Timings"}}
      },
      "EmbeddingRequest": {
        "type": "object", "required": ["input"],
        "properties": {
          "model": {"type": "string", "enum": ["__MODEL__"], "nullable": true},
          "input": {"oneOf": [
            {"type": "string", "minLength": 1},
            {"type": "array", "minItems": 1, "maxItems": __MAX_EMBEDDING_INPUTS__, "items": {"type": "string", "minLength": 1}},
            {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0, "maximum": __MAX_TOKEN_ID__}, "description": "Token ids of one input"},
            {"type": "array", "minItems": 1, "maxItems": __MAX_EMBEDDING_INPUTS__, "items": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0, "maximum": __MAX_TOKEN_ID__}}}],
            "description": "Texts (tokenized as completion prompts) or token ids; each input at most the context (400 context_length_exceeded)"},
          "encoding_format": {"type": "string", "enum": ["float", "base64"], "nullable": true, "description": "base64: the little-endian float32 bytes of each vector"},
          "dimensions": {"type": "integer", "minimum": 1, "maximum": 2147483647, "nullable": true, "description": "Only the model's own embedding width is accepted"},
          "user": {"type": "string", "nullable": true}
        }
      },
      "EmbeddingList": {
        "type": "object", "required": ["object", "data", "model", "usage"],
        "properties": {
          "object": {"type": "string", "enum": ["list"]},
          "data": {"type": "array", "items": {"type": "object", "required": ["object", "index", "embedding"],
            "properties": {"object": {"type": "string", "enum": ["embedding"]}, "index": {"type": "integer"},
              "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}}, {"type": "string", "description": "base64"}]}}}},
          "model": {"type": "string"},
          "usage": {"type": "object", "required": ["prompt_tokens", "total_tokens"],
            "properties": {"prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}}}
        }
      },
      "TokenizeRequest": {
        "type": "object", "required": ["content"],
        "properties": {"content": {"type": "string"}, "add_special": {"type": "boolean", "nullable": true, "description": "Add BOS as the model does for prompts (default false)"},
          "parse_special": {"type": "boolean", "nullable": true, "description": "Turn special-token text into special tokens (default true)"}}
      },
      "TokenizeResult": {"type": "object", "required": ["tokens"], "properties": {"tokens": {"type": "array", "items": {"type": "integer"}}}},
      "DetokenizeRequest": {
        "type": "object", "required": ["tokens"],
        "properties": {"tokens": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": __MAX_TOKEN_ID__}}}
      },
      "DetokenizeResult": {"type": "object", "required": ["content"], "properties": {"content": {"type": "string"}}}
    }
  }
})json";

void replace_all(std::string& text, std::string_view marker, const std::string& replacement) {
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at)) {
    text.replace(at, marker.size(), replacement);
  }
}

}  // namespace

nlohmann::json openapi_document(const OpenApiParams& params) {
  std::string text = kDocument;
  replace_all(text, "__MODEL_ROUTE_ERRORS__", kModelRouteErrors);
  replace_all(text, "__MAX_TOKENS__", std::to_string(params.max_tokens_limit));
  replace_all(text, "__MAX_STOP__", std::to_string(params.max_stop_strings));
  replace_all(text, "__MAX_TOP_LOGPROBS__", std::to_string(params.max_top_logprobs));
  replace_all(text, "__MAX_EMBEDDING_INPUTS__", std::to_string(params.max_embedding_inputs));
  const int64_t max_token_id = params.n_vocab > 0 ? params.n_vocab - 1 : INT32_MAX;
  replace_all(text, "__MAX_TOKEN_ID__", std::to_string(max_token_id));
  // The model name goes in as a JSON string (quotes and backslashes escaped).
  const std::string model = nlohmann::json(params.model_name).dump();
  replace_all(text, "\"__MODEL__\"", model);
  nlohmann::json document = nlohmann::json::parse(text);
  if (!params.auth_required) {
    document.erase("security");
    document["components"].erase("securitySchemes");
    for (auto& [path, operations] : document["paths"].items()) {
      for (auto& [method, operation] : operations.items()) {
        operation.erase("security");
        operation["responses"].erase("401");
      }
    }
  }
  return document;
}

}  // namespace llamaserve::server
