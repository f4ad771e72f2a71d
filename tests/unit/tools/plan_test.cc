// Deployment plans checked against numbers worked out by hand from the published shapes.
#include <gtest/gtest.h>

#include "model/importers/file_types.h"
#include "model/plan.h"
#include "model/shapes.h"

namespace llamaserve {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

PlanRequest request_for(const char* shape_name, const char* type, int gpus, uint64_t gpu_mem) {
  auto shape = find_model_shape(shape_name);
  EXPECT_TRUE(shape.is_ok());
  PlanRequest r;
  r.config = config_from_shape(**shape);
  auto ft = parse_file_type(type);
  EXPECT_TRUE(ft.is_ok());
  auto weights = group_weight_bytes(llama_tensor_bytes(r.config, *ft), r.config);
  EXPECT_TRUE(weights.is_ok()) << weights.status().to_string();
  r.weights = *weights;
  r.gpus = gpus;
  r.gpu_memory_bytes = gpu_mem;
  r.n_ctx = 4096;
  r.concurrency = 1;
  return r;
}

const LayoutPlan* find_layout(const PlanReport& report, int tp, int pp) {
  for (const LayoutPlan& l : report.layouts) {
    if (l.tp == tp && l.pp == pp) return &l;
  }
  return nullptr;
}

TEST(PlanTest, ShapesHaveThePublishedDimensions) {
  const ModelConfig c70 = config_from_shape(**find_model_shape("llama2-70b"));
  EXPECT_EQ(c70.n_embd, 8192);
  EXPECT_EQ(c70.n_layer, 80);
  EXPECT_EQ(c70.n_head, 64);
  EXPECT_EQ(c70.n_head_kv, 8);
  EXPECT_EQ(c70.n_ff, 28672);
  const ModelConfig c13 = config_from_shape(**find_model_shape("llama2-13b"));
  EXPECT_EQ(c13.n_embd, 5120);
  EXPECT_EQ(c13.n_layer, 40);
  EXPECT_EQ(c13.n_ff, 13824);
  const ModelConfig c8 = config_from_shape(**find_model_shape("llama3-8b"));
  EXPECT_EQ(c8.n_vocab, 128256);
  EXPECT_EQ(c8.n_head_kv, 8);
  EXPECT_FLOAT_EQ(c8.rope_theta, 500000.0f);
  for (const ModelShape& s : model_shapes()) {
    EXPECT_TRUE(validate_config(config_from_shape(s)).is_ok()) << s.name;
  }
  EXPECT_FALSE(find_model_shape("llama2-8b").is_ok());
}

TEST(PlanTest, KvBytesPerTokenAndSequence) {
  PlanRequest r = request_for("llama2-7b", "f16", 1, 80 * kGiB);
  auto report = make_plan(r);
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  // 2 (K, V) x 32 layers x 4096 values x 2 bytes.
  EXPECT_EQ(report->kv_bytes_per_token, 2ull * 32 * 4096 * 2);
  EXPECT_EQ(report->tokens_per_sequence, 4096);
  EXPECT_EQ(report->kv_bytes_per_sequence, 2ull * kGiB);
  r.n_ctx = 4000;  // rounded up to whole blocks of 16
  EXPECT_EQ(make_plan(r)->tokens_per_sequence, 4000);
  r.n_ctx = 4001;
  EXPECT_EQ(make_plan(r)->tokens_per_sequence, 4016);
  // q8_0: 34 bytes per 32 values.
  r = request_for("llama2-70b", "f16", 8, 141000000000ull);
  r.kv_type = TensorType::Q8_0;
  EXPECT_EQ(make_plan(r)->kv_bytes_per_token, 2ull * 80 * (1024 / 32 * 34));
}

TEST(PlanTest, LayoutsOf70BOnEightGpus) {
  PlanRequest r = request_for("llama2-70b", "f16", 8, 141000000000ull);
  r.concurrency = 64;
  auto report = make_plan(r);
  ASSERT_TRUE(report.is_ok());
  // tp in {1, 2, 4, 8}, pp dividing 8 / tp: 4 + 3 + 2 + 1 layouts.
  ASSERT_EQ(report->layouts.size(), 10u);
  for (const LayoutPlan& l : report->layouts) {
    EXPECT_EQ(l.tp * l.pp * l.replicas, 8);
    EXPECT_TRUE(l.impossible_reason.empty());
    EXPECT_FALSE(l.steps.empty());
  }
  // One GPU holds the whole F16 model? 137.9 GB of weights > 0.9 x 141 GB.
  const LayoutPlan* single = find_layout(*report, 1, 1);
  ASSERT_NE(single, nullptr);
  EXPECT_FALSE(single->fits);
  EXPECT_LT(single->free_kv_bytes_per_gpu, 0);
  EXPECT_EQ(single->kv_tokens_per_replica, 0);

  // tp 2: each GPU holds half of every layer matrix, the whole token_embd and the whole output
  // (the tensor-parallel executor does not split the head).
  const LayoutPlan* tp2 = find_layout(*report, 2, 1);
  ASSERT_NE(tp2, nullptr);
  const uint64_t layer_matrices = 2ull * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672);
  const uint64_t norms = 2ull * 8192 * 4;
  const uint64_t embd = 32000ull * 8192 * 2;
  const uint64_t expected = 80 * (layer_matrices / 2 + norms) + embd + embd + 8192 * 4;
  EXPECT_EQ(tp2->weights_per_gpu, expected);
  // KV per token per GPU: 2 x 80 layers x (1024 / 2) values x 2 bytes.
  EXPECT_EQ(tp2->kv_bytes_per_token_per_gpu, 2ull * 80 * 512 * 2);
  const uint64_t budget = static_cast<uint64_t>(141000000000.0 * 0.9);
  EXPECT_EQ(tp2->budget_per_gpu, budget);
  const int64_t free_bytes =
      static_cast<int64_t>(budget) -
      static_cast<int64_t>(expected + tp2->activations_per_gpu + r.workspace_bytes);
  EXPECT_EQ(tp2->free_kv_bytes_per_gpu, free_bytes);
  EXPECT_EQ(tp2->kv_tokens_per_replica, free_bytes / (2 * 80 * 512 * 2) / 16 * 16);
  EXPECT_EQ(tp2->seqs_per_replica, 16);  // 64 sequences over 4 replicas
  EXPECT_EQ(tp2->kv_tokens_needed, 16 * 4096);
  EXPECT_EQ(tp2->max_concurrency, tp2->kv_tokens_per_replica / 4096 * 4);
  EXPECT_EQ(tp2->fits, tp2->kv_tokens_per_replica >= 16 * 4096);

  // Activations: 4 B x (512 x (2x8192 + 2x8192/2 + 2x1024/2 + 2x28672/2) + 16 x (8192 + 32000)):
  // every rank has logits buffers for the whole vocabulary; plus the tensor-parallel sums, 2 B x
  // 3 x 512 x 8192.
  EXPECT_EQ(tp2->activations_per_gpu,
            4ull * (512ull * (2 * 8192 + 8192 + 1024 + 28672) + 16ull * (8192 + 32000)) +
                2ull * 3 * 512 * 8192);
  ASSERT_TRUE(report->recommended.has_value());
  const LayoutPlan& best = report->layouts[*report->recommended];
  EXPECT_TRUE(best.fits);
  for (const LayoutPlan& l : report->layouts) {
    if (l.fits) {
      EXPECT_LE(l.replicas, best.replicas);
    }
  }
}

TEST(PlanTest, TensorParallelRanksHoldTheWholeHead) {
  PlanRequest r = request_for("llama2-7b", "f16", 2, 80 * kGiB);
  auto report = make_plan(r);
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  const LayoutPlan* tp2 = find_layout(*report, 2, 1);
  ASSERT_NE(tp2, nullptr);
  ASSERT_TRUE(tp2->impossible_reason.empty()) << tp2->impossible_reason;
  // Per rank: half of every layer's matrices, the norms, token_embd and output (32000 x 4096
  // F16 each, whole), output_norm.
  const uint64_t layer_matrices = 2ull * (4 * 4096 * 4096 + 3 * 4096 * 11008);
  const uint64_t norms = 2ull * 4096 * 4;
  const uint64_t head = 32000ull * 4096 * 2;
  EXPECT_EQ(tp2->weights_per_gpu, 32 * (layer_matrices / 2 + norms) + head + head + 4096 * 4);
  bool says_whole = false;
  for (const std::string& step : tp2->steps) {
    says_whole =
        says_whole || step.find("output 250.00 MiB (whole on every rank)") != std::string::npos;
  }
  EXPECT_TRUE(says_whole);
  // One GPU holds the same head: tp 2 saves only on the layers.
  const LayoutPlan* single = find_layout(*report, 1, 1);
  ASSERT_NE(single, nullptr);
  EXPECT_EQ(single->weights_per_gpu - tp2->weights_per_gpu, 32 * layer_matrices / 2);
}

TEST(PlanTest, TensorParallelNeedsWholeQuantizationBlocksPerRank) {
  // LLaMA-2-7B Q4_K_M: ffn_down has 11008 columns in 256-element blocks (Q6_K in layer 0);
  // 5504 per rank of 2 is not whole blocks, so the executor cannot split it.
  PlanRequest r = request_for("llama2-7b", "q4_k_m", 2, 80 * kGiB);
  auto report = make_plan(r);
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  const LayoutPlan* tp2 = find_layout(*report, 2, 1);
  ASSERT_NE(tp2, nullptr);
  EXPECT_EQ(tp2->impossible_reason,
            "tp 2 does not divide blk.0.ffn_down.weight (11008 columns in 256-element Q6_K "
            "blocks)");
  EXPECT_FALSE(tp2->fits);
  // The other layouts of two GPUs still work, and one of them is recommended.
  const LayoutPlan* pp2 = find_layout(*report, 1, 2);
  ASSERT_NE(pp2, nullptr);
  EXPECT_TRUE(pp2->impossible_reason.empty());
  ASSERT_TRUE(report->recommended.has_value());
  EXPECT_EQ(report->layouts[*report->recommended].tp, 1);

  // The same shape in F16 (one-element blocks) and in Q8_0 (32: 5504 = 172 x 32) splits.
  for (const char* type : {"f16", "q8_0"}) {
    auto ok = make_plan(request_for("llama2-7b", type, 2, 80 * kGiB));
    ASSERT_TRUE(ok.is_ok());
    const LayoutPlan* l = find_layout(*ok, 2, 1);
    ASSERT_NE(l, nullptr);
    EXPECT_TRUE(l->impossible_reason.empty()) << type << ": " << l->impossible_reason;
  }
  // 70B Q4_K_M: 28672 / 8 = 3584 = 14 blocks of 256, so tp 8 works.
  auto big = make_plan(request_for("llama2-70b", "q4_k_m", 8, 141000000000ull));
  ASSERT_TRUE(big.is_ok());
  for (const LayoutPlan& l : big->layouts) EXPECT_TRUE(l.impossible_reason.empty()) << l.tp;
}

TEST(PlanTest, TensorParallelRuleNamesWhatDoesNotDivide) {
  const ModelConfig c = config_from_shape(**find_model_shape("llama2-13b"));  // 40 heads
  const std::vector<ColumnSplitMatrix> f16 = {{"blk.0.attn_output.weight", 5120, TensorType::F16},
                                              {"blk.0.ffn_down.weight", 13824, TensorType::F16}};
  EXPECT_EQ(tensor_parallel_problem(c, f16, 1), "");
  EXPECT_EQ(tensor_parallel_problem(c, f16, 2), "");
  EXPECT_EQ(tensor_parallel_problem(c, f16, 3), "40 attention heads");
  EXPECT_EQ(tensor_parallel_problem(c, f16, 0), "the number of ranks must be >= 1");
  ModelConfig gqa = c;
  gqa.n_head_kv = 10;
  EXPECT_EQ(tensor_parallel_problem(gqa, f16, 4), "10 KV heads");
  ModelConfig odd_ff = c;
  odd_ff.n_ff = 13826;
  EXPECT_EQ(tensor_parallel_problem(odd_ff, f16, 4), "an FFN width of 13826");
  // 5120 / 4 = 1280 = 5 x 256; 13824 / 4 = 3456 = 13.5 x 256.
  const std::vector<ColumnSplitMatrix> q4k = {{"blk.0.attn_output.weight", 5120, TensorType::Q4_K},
                                              {"blk.0.ffn_down.weight", 13824, TensorType::Q4_K}};
  EXPECT_EQ(tensor_parallel_problem(c, q4k, 2), "");
  EXPECT_EQ(tensor_parallel_problem(c, q4k, 4),
            "blk.0.ffn_down.weight (13824 columns in 256-element Q4_K blocks)");
}

TEST(PlanTest, PipelineStagesSplitLayersAndPlaceEmbeddings) {
  PlanRequest r = request_for("llama2-13b", "f16", 3, 80 * kGiB);
  auto report = make_plan(r);
  ASSERT_TRUE(report.is_ok());
  // tp 3 does not divide 40 heads; pp 3 splits 40 layers 14 / 13 / 13.
  const LayoutPlan* tp3 = find_layout(*report, 3, 1);
  ASSERT_NE(tp3, nullptr);
  EXPECT_NE(tp3->impossible_reason.find("does not divide"), std::string::npos);
  const LayoutPlan* pp3 = find_layout(*report, 1, 3);
  ASSERT_NE(pp3, nullptr);
  ASSERT_TRUE(pp3->impossible_reason.empty());
  EXPECT_EQ(pp3->max_layers_per_stage, 14);
  // Stage 0 has 14 layers and token_embd; stage 2 has 13 layers, output and output_norm. Both
  // embedding tables are the same size, so stage 0 (one more layer) is the tight one.
  EXPECT_EQ(pp3->tight_stage, 0);
  const uint64_t layer = 2ull * (4 * 5120 * 5120 + 3 * 5120 * 13824) + 2 * 5120 * 4;
  EXPECT_EQ(pp3->weights_per_gpu, 14 * layer + 32000ull * 5120 * 2);
  EXPECT_EQ(pp3->kv_bytes_per_token_per_gpu, 2ull * 14 * 5120 * 2);
}

TEST(PlanTest, FitsFlipsAtTheExactBoundary) {
  PlanRequest r = request_for("tiny", "f16", 1, 1 * kGiB);
  r.gpu_memory_utilization = 1.0;
  r.concurrency = 3;
  r.n_ctx = 1000;  // 1008 tokens per sequence
  auto base = make_plan(r);
  ASSERT_TRUE(base.is_ok());
  const LayoutPlan& l = base->layouts.at(0);
  const uint64_t fixed = l.weights_per_gpu + l.activations_per_gpu + r.workspace_bytes;
  const uint64_t need = 3 * 1008 * l.kv_bytes_per_token_per_gpu;
  r.gpu_memory_bytes = fixed + need;
  auto exact = make_plan(r);
  EXPECT_TRUE(exact->layouts[0].fits);
  EXPECT_EQ(exact->layouts[0].kv_tokens_per_replica, 3 * 1008);
  EXPECT_EQ(exact->layouts[0].max_concurrency, 3);
  r.gpu_memory_bytes -= 1;
  auto short_by_one = make_plan(r);
  EXPECT_FALSE(short_by_one->layouts[0].fits);
  EXPECT_EQ(short_by_one->layouts[0].kv_tokens_per_replica, 3 * 1008 - 16);
  EXPECT_FALSE(short_by_one->recommended.has_value());
}

TEST(PlanTest, GroupsTensorBytesAndRefusesBadRequests) {
  ModelConfig c = config_from_shape(**find_model_shape("tiny"));
  std::vector<NamedTensorBytes> tensors = {
      {"token_embd.weight", 100},    {"blk.0.attn_q.weight", 10},
      {"blk.0.attn_norm.weight", 3}, {"blk.3.ffn_down.weight", 7, 768, TensorType::Q8_0},
      {"output_norm.weight", 2},     {"rope_freqs.weight", 5}};
  auto w = group_weight_bytes(tensors, c);
  ASSERT_TRUE(w.is_ok());
  EXPECT_TRUE(w->tied_output);
  EXPECT_EQ(w->layer_split[0], 10u);
  EXPECT_EQ(w->layer_replicated[0], 3u);
  EXPECT_EQ(w->layer_split[3], 7u);
  EXPECT_EQ(w->other, 5u);
  EXPECT_EQ(w->total(), 127u);
  ASSERT_EQ(w->column_split.size(), 1u);
  EXPECT_EQ(w->column_split[0].name, "blk.3.ffn_down.weight");
  EXPECT_EQ(w->column_split[0].cols, 768);
  EXPECT_EQ(w->column_split[0].type, TensorType::Q8_0);
  // A column-split matrix without its row length cannot be checked.
  std::vector<NamedTensorBytes> no_cols = tensors;
  no_cols.push_back({"blk.1.attn_output.weight", 4});
  auto missing = group_weight_bytes(no_cols, c);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("blk.1.attn_output.weight"), std::string::npos);
  tensors.push_back({"blk.9.attn_q.weight", 1});
  EXPECT_FALSE(group_weight_bytes(tensors, c).is_ok());

  PlanRequest r = request_for("tiny", "f16", 1, kGiB);
  r.gpus = 0;
  EXPECT_FALSE(make_plan(r).is_ok());
  r.gpus = 1;
  r.concurrency = 0;
  EXPECT_FALSE(make_plan(r).is_ok());
  r.concurrency = 1;
  r.gpu_memory_utilization = 1.5;
  EXPECT_FALSE(make_plan(r).is_ok());
}

TEST(PlanTest, ParsesMemorySizes) {
  EXPECT_EQ(*parse_byte_size("141GB"), 141000000000ull);
  EXPECT_EQ(*parse_byte_size("80GiB"), 80ull << 30);
  EXPECT_EQ(*parse_byte_size("24g"), 24ull << 30);
  EXPECT_EQ(*parse_byte_size("1.5 TB"), 1500000000000ull);
  EXPECT_EQ(*parse_byte_size("1024"), 1024u);
  EXPECT_FALSE(parse_byte_size("GB").is_ok());
  EXPECT_FALSE(parse_byte_size("-5GB").is_ok());
  EXPECT_FALSE(parse_byte_size("5 parsecs").is_ok());
}

}  // namespace
}  // namespace llamaserve
