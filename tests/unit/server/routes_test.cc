#include "server/routes.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "server/openapi.h"

namespace llamaserve::server {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

TEST(OpenApi, DocumentsExactlyTheRoutes) {
  const nlohmann::json doc = openapi_document({});
  std::set<std::pair<std::string, std::string>> documented;
  for (const auto& [path, operations] : doc["paths"].items()) {
    for (const auto& [method, operation] : operations.items()) documented.insert({path, method});
  }
  std::set<std::pair<std::string, std::string>> served;
  for (const Route& route : route_table())
    served.insert({std::string(route.path), lower(route.method)});
  EXPECT_EQ(documented, served);
}

TEST(OpenApi, AuthMatchesTheRouteTable) {
  const nlohmann::json doc = openapi_document({});
  for (const Route& route : route_table()) {
    const auto& operation = doc["paths"][std::string(route.path)][lower(route.method)];
    const bool public_route = operation.contains("security") && operation["security"].empty();
    EXPECT_EQ(public_route, !route.requires_auth) << route.path;
    if (route.requires_auth) {
      EXPECT_TRUE(operation["responses"].contains("401")) << route.path;
    }
  }
}

TEST(OpenApi, NoSecurityWithoutKeys) {
  OpenApiParams params;
  params.auth_required = false;
  const nlohmann::json doc = openapi_document(params);
  EXPECT_FALSE(doc.contains("security"));
  for (const auto& [path, operations] : doc["paths"].items()) {
    for (const auto& [method, operation] : operations.items()) {
      EXPECT_FALSE(operation.contains("security")) << path;
      EXPECT_FALSE(operation["responses"].contains("401")) << path;
    }
  }
}

TEST(OpenApi, EveryReferenceResolves) {
  const nlohmann::json doc = openapi_document({});
  std::vector<const nlohmann::json*> stack = {&doc};
  int references = 0;
  while (!stack.empty()) {
    const nlohmann::json* node = stack.back();
    stack.pop_back();
    if (node->is_object()) {
      if (auto ref = node->find("$ref"); ref != node->end()) {
        ++references;
        const std::string pointer = ref->get<std::string>();
        ASSERT_EQ(pointer.rfind("#/", 0), 0u) << pointer;
        EXPECT_TRUE(doc.contains(nlohmann::json::json_pointer(pointer.substr(1)))) << pointer;
      }
      for (const auto& item : *node) stack.push_back(&item);
    } else if (node->is_array()) {
      for (const auto& item : *node) stack.push_back(&item);
    }
  }
  EXPECT_GT(references, 20);
}

TEST(OpenApi, StatesTheConfiguredLimitsModelAndVocabulary) {
  OpenApiParams params;
  params.max_tokens_limit = 77;
  params.model_name = "my \"model\"";
  params.n_vocab = 1000;
  const nlohmann::json doc = openapi_document(params);
  const auto& schemas = doc["components"]["schemas"];
  EXPECT_EQ(schemas["ChatCompletionRequest"]["properties"]["max_tokens"]["maximum"], 77);
  EXPECT_EQ(schemas["CompletionRequest"]["properties"]["max_completion_tokens"]["maximum"], 77);
  EXPECT_EQ(schemas["SimpleChatRequest"]["properties"]["maxTokens"]["maximum"], 77);
  EXPECT_EQ(schemas["ChatCompletionRequest"]["properties"]["model"]["enum"],
            nlohmann::json::array({"my \"model\""}));
  EXPECT_EQ(schemas["DetokenizeRequest"]["properties"]["tokens"]["items"]["maximum"], 999);
  EXPECT_EQ(openapi_document({})["components"]["schemas"]["DetokenizeRequest"]["properties"]
                                ["tokens"]["items"]["maximum"],
            INT32_MAX);
}

TEST(Routes, FindByMethodAndPath) {
  const Route* chat = find_route("POST", "/v1/chat/completions");
  ASSERT_NE(chat, nullptr);
  EXPECT_EQ(chat->id, RouteId::kChatCompletions);
  EXPECT_EQ(find_route("GET", "/v1/chat/completions"), nullptr);
  EXPECT_TRUE(path_has_route("/v1/chat/completions"));
  const Route* model = find_route("GET", "/v1/models/some-model.Q4");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->id, RouteId::kModel);
  EXPECT_EQ(find_route("GET", "/v1/models/a/b"), nullptr);
  EXPECT_EQ(find_route("GET", "/v1/models/"), nullptr);
  EXPECT_EQ(find_route("GET", "/health/"), nullptr);
  EXPECT_EQ(find_route("GET", "health"), nullptr);
  EXPECT_EQ(find_route("GET", ""), nullptr);
  EXPECT_EQ(route_for_path("/v1/models")->id, RouteId::kModels);
  EXPECT_FALSE(path_has_route("/v1/nothing"));
  const Route* page = find_route("GET", "/");
  ASSERT_NE(page, nullptr);
  EXPECT_EQ(page->id, RouteId::kChatPage);
  EXPECT_FALSE(page->requires_auth);
  EXPECT_EQ(find_route("GET", "//"), nullptr);
  const Route* health = find_route("GET", "/health");
  ASSERT_NE(health, nullptr);
  EXPECT_FALSE(health->requires_auth);
}

}  // namespace
}  // namespace llamaserve::server
