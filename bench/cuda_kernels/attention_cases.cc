#include "attention_cases.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_decode.h"
#include "bench_util.h"

namespace llamaserve::cuda::kernel_bench {
namespace {

// The K and V arrays of a layer's cache for `values` values each (attention.h): f16, or Q8_0
// codes and scales.
struct BenchKvCache {
  KvType type = KvType::kF16;
  void *k = nullptr, *v = nullptr, *k_scales = nullptr, *v_scales = nullptr;

  BenchKvCache(KvType t, int64_t values) : type(t) {
    const size_t bytes = static_cast<size_t>(values) * (type == KvType::kQ8_0 ? 1 : 2);
    BENCH_CHECK(cudaMalloc(&k, bytes));
    BENCH_CHECK(cudaMalloc(&v, bytes));
    if (type == KvType::kQ8_0) {
      BENCH_CHECK(cudaMalloc(&k_scales, values / kKvQ8Block * 2));
      BENCH_CHECK(cudaMalloc(&v_scales, values / kKvQ8Block * 2));
    }
  }
  BenchKvCache(const BenchKvCache&) = delete;
  BenchKvCache& operator=(const BenchKvCache&) = delete;
  ~BenchKvCache() {
    for (void* p : {k, v, k_scales, v_scales}) cudaFree(p);
  }
  void set(AttentionArgs& a) const {
    a.kv_type = type;
    a.k_cache = k;
    a.v_cache = v;
    a.k_scales = k_scales;
    a.v_scales = v_scales;
  }
  const char* name() const { return type == KvType::kQ8_0 ? "q8_0" : "f16"; }

  // Writes rows [0, n_rows) of k_rows and v_rows (kv_dim values each) at their positions' slots.
  void write(const float* k_rows, const float* v_rows, int64_t kv_dim, int64_t n_rows,
             const int32_t* positions, const int32_t* seq_index, const int32_t* block_tables,
             int32_t blocks_per_seq, int32_t block_size, LaunchStream stream) const {
    KvWriteArgs w;
    w.k = k_rows;
    w.k_stride = kv_dim;
    w.v = v_rows;
    w.v_stride = kv_dim;
    w.type = type;
    w.k_cache = k;
    w.v_cache = v;
    w.k_scales = k_scales;
    w.v_scales = v_scales;
    w.positions = positions;
    w.seq_index = seq_index;
    w.block_tables = block_tables;
    w.blocks_per_seq = blocks_per_seq;
    w.block_size = block_size;
    w.n_rows = n_rows;
    w.kv_dim = kv_dim;
    BENCH_OK(write_kv(w, stream));
  }
};

// The attention of `n_rows` rows of q (32-bit, q_dim = n_head * head_dim a row, out alike) over
// `cache` with the given rows' positions, sequences and block tables: what every case below
// shares; each sets its tiles, splits and kernel.
struct BenchRows {
  const float* q;
  float* out;
  const int32_t* positions;
  const int32_t* seq_index;
  const int32_t* block_tables;
  int32_t blocks_per_seq;
  int32_t block_size;
  int64_t n_rows;
};
AttentionArgs bench_attention_args(const BenchKvCache& cache, const BenchRows& rows, int n_head,
                                   int n_head_kv, int head_dim) {
  AttentionArgs a;
  a.q = rows.q;
  a.q_stride = static_cast<int64_t>(n_head) * head_dim;
  cache.set(a);
  a.positions = rows.positions;
  a.seq_index = rows.seq_index;
  a.block_tables = rows.block_tables;
  a.blocks_per_seq = rows.blocks_per_seq;
  a.block_size = rows.block_size;
  a.n_head = n_head;
  a.n_head_kv = n_head_kv;
  a.head_dim = head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  a.out = rows.out;
  a.out_stride = a.q_stride;
  a.n_batch_rows = rows.n_rows;
  return a;
}

// A decode step's launch on the decode kernel: n_tiles tiles of one row each.
void set_decode_tiles(AttentionArgs& a, const AttentionTile* tiles, int n_tiles) {
  a.tiles = tiles;
  a.n_tiles = n_tiles;
  a.max_tile_rows = 1;
  a.single_row_tiles = n_tiles;
  a.kernel = AttentionKernel::kDecode;
}

// The query rows, outputs and flash-decoding workspace of `rows` rows of `heads` heads of
// head_dim (random queries from `seed`), sized for up to `splits` splits, the split counters
// zero.
struct SplitRows {
  float* q = nullptr;
  float* out = nullptr;
  float* partial = nullptr;
  unsigned int* counters = nullptr;

  SplitRows(int64_t rows, int heads, int head_dim, int splits, uint32_t seed) {
    const int64_t q_dim = static_cast<int64_t>(heads) * head_dim;
    q = upload(normal_floats(rows * q_dim, seed));
    out = device_floats(rows * q_dim);
    partial = device_floats(attention_workspace_floats(rows, heads, head_dim, splits));
    const size_t counter_bytes = rows * heads * sizeof(unsigned int);
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&counters), counter_bytes));
    BENCH_CHECK(cudaMemset(counters, 0, counter_bytes));
  }
  SplitRows(const SplitRows&) = delete;
  SplitRows& operator=(const SplitRows&) = delete;
  ~SplitRows() {
    for (void* p : std::initializer_list<void*>{q, out, partial, counters}) cudaFree(p);
  }
  void set(AttentionArgs& a) const {
    a.partial = partial;
    a.split_counters = counters;
  }
};

// A decode case's warps a block as the tables name them (0: the kernel's own choice).
std::string warps_name(int warps) {
  return warps == 0 ? std::string("own choice") : fmt::format("{}", warps);
}

}  // namespace

// Prefill attention of one 512-token prompt (positions 0..511, tiles of kMaxAttentionQueries /
// group rows as the executor makes them), 32 query heads of head_dim 128: LLaMA-2-7B (32 KV
// heads) and LLaMA-3-8B (8), with the CUDA-core and the tensor-core kernel, over an f16 and a
// Q8_0 cache. FLOPs count the causal half: Q·Kᵀ and P·V are 4 · head_dim FLOPs per (query
// head, row, visible position). Also prints the largest difference between the two kernels'
// outputs.
std::string bench_prefill_attention(int groups, FILE* csv, LaunchStream stream) {
  constexpr int kPositions = 512, kHeads = 32, kHeadDim = 128, kBlockSize = 16;
  constexpr int kBlocks = kPositions / kBlockSize;
  BENCH_OK(configure_attention_kernels());
  std::printf("\nattention (prefill, %d positions, %d heads x %d)\n", kPositions, kHeads, kHeadDim);
  std::string table =
      "\n| attention prefill 512 | KV heads | KV cache | kernel | us | TFLOP/s |\n| --- | ---: | "
      "--- "
      "| --- | ---: | ---: |\n";
  std::vector<int32_t> positions(kPositions), block_table(kBlocks);
  for (int i = 0; i < kPositions; ++i) positions[i] = i;
  for (int i = 0; i < kBlocks; ++i) block_table[i] = i;
  int32_t* positions_dev = upload(positions);
  int32_t* seq_index_dev = upload(std::vector<int32_t>(kPositions, 0));
  int32_t* block_table_dev = upload(block_table);
  const int64_t q_dim = static_cast<int64_t>(kHeads) * kHeadDim;
  float* q = upload(normal_floats(kPositions * q_dim, 51));
  float* out = device_floats(kPositions * q_dim);
  const double flops = 4.0 * kHeadDim * kHeads * (kPositions * (kPositions + 1) / 2.0);

  for (const auto& [n_head_kv, kv_type] :
       {std::pair{32, KvType::kF16}, std::pair{32, KvType::kQ8_0}, std::pair{8, KvType::kF16},
        std::pair{8, KvType::kQ8_0}}) {
    const int group = kHeads / n_head_kv;
    const int64_t kv_dim = static_cast<int64_t>(n_head_kv) * kHeadDim;
    float* k_new = upload(normal_floats(kPositions * kv_dim, 52));
    float* v_new = upload(normal_floats(kPositions * kv_dim, 53));
    const BenchKvCache cache(kv_type, kPositions * kv_dim);
    cache.write(k_new, v_new, kv_dim, kPositions, positions_dev, seq_index_dev, block_table_dev,
                kBlocks, kBlockSize, stream);

    const int tile_rows = kMaxAttentionQueries / group;
    std::vector<AttentionTile> tiles;
    for (int r = 0; r < kPositions; r += tile_rows) {
      tiles.push_back({r, std::min(tile_rows, kPositions - r)});
    }
    AttentionTile* tiles_dev = upload(tiles);
    AttentionArgs a = bench_attention_args(
        cache,
        {q, out, positions_dev, seq_index_dev, block_table_dev, kBlocks, kBlockSize, kPositions},
        kHeads, n_head_kv, kHeadDim);
    a.tiles = tiles_dev;
    a.n_tiles = static_cast<int32_t>(tiles.size());
    a.max_tile_rows = tile_rows;

    std::vector<float> outputs[2];
    double seconds[2];
    const AttentionKernel kernels[2] = {AttentionKernel::kCudaCores, AttentionKernel::kTensorCores};
    const char* names[2] = {"cuda_cores", "tensor_cores"};
    for (int k = 0; k < 2; ++k) {
      a.kernel = kernels[k];
      seconds[k] = time_launches([&](int) { BENCH_OK(attention(a, stream)); }, groups, 20, stream);
      BENCH_CHECK(cudaStreamSynchronize(stream));
      outputs[k].resize(static_cast<size_t>(kPositions * q_dim));
      BENCH_CHECK(cudaMemcpy(outputs[k].data(), out, outputs[k].size() * sizeof(float),
                             cudaMemcpyDeviceToHost));
      const std::string line =
          fmt::format("| | {} | {} | {} | {:.2f} | {:.1f} |", n_head_kv, cache.name(), names[k],
                      seconds[k] * 1e6, flops / seconds[k] / 1e12);
      std::printf("%s\n", line.c_str());
      table += line + "\n";
      if (csv != nullptr) {
        std::fprintf(csv, "attention_prefill_%s,%s,%d,%d,%d,%.3f,,,%.2f\n", cache.name(), names[k],
                     kHeads, kHeadDim, kPositions, seconds[k] * 1e6, flops / seconds[k] / 1e12);
      }
    }
    double max_diff = 0.0;
    for (size_t i = 0; i < outputs[0].size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(outputs[0][i] - outputs[1][i])));
    }
    std::printf(
        "KV heads %d, %s cache: tensor cores %.2fx the CUDA cores; largest output difference "
        "%.2e\n",
        n_head_kv, cache.name(), seconds[0] / seconds[1], max_diff);
    BENCH_CHECK(cudaFree(tiles_dev));
    BENCH_CHECK(cudaFree(k_new));
    BENCH_CHECK(cudaFree(v_new));
  }
  BENCH_CHECK(cudaFree(positions_dev));
  BENCH_CHECK(cudaFree(seq_index_dev));
  BENCH_CHECK(cudaFree(block_table_dev));
  BENCH_CHECK(cudaFree(q));
  BENCH_CHECK(cudaFree(out));
  return table;
}

// Decode attention of 256 sequences of 640 positions each (one row each, the decode kernel):
// 32 query heads of head_dim 128 over 32 KV heads (LLaMA-2-7B) and 8 (LLaMA-3-8B), an f16 and
// a Q8_0 cache. GB/s counts the K and V bytes read (codes and scales for Q8_0) against the
// copy bandwidth.
std::string bench_decode_attention(int groups, double copy, FILE* csv, LaunchStream stream) {
  constexpr int kSeqs = 256, kContext = 640, kHeads = 32, kHeadDim = 128, kBlockSize = 16;
  constexpr int kBlocksPerSeq = kContext / kBlockSize;
  BENCH_OK(configure_attention_kernels());
  std::printf("\nattention (decode, %d sequences of %d positions, %d heads x %d)\n", kSeqs,
              kContext, kHeads, kHeadDim);
  std::string table =
      "\n| attention decode 256 x 640 | KV heads | KV cache | kernel | us | GB/s | % of copy "
      "|\n| --- | ---: | --- | --- | ---: | ---: | ---: |\n";
  // Every position of every sequence is written once (rows of the whole context), then the
  // decode rows (the last position of each sequence) read them all.
  std::vector<int32_t> positions, seq_index, tables(kSeqs * kBlocksPerSeq);
  for (int s = 0; s < kSeqs; ++s) {
    for (int t = 0; t < kContext; ++t) {
      positions.push_back(t);
      seq_index.push_back(s);
    }
  }
  for (int i = 0; i < kSeqs * kBlocksPerSeq; ++i) tables[i] = i;
  std::vector<int32_t> last_positions(kSeqs, kContext - 1), last_seq(kSeqs);
  std::vector<AttentionTile> tiles;
  for (int s = 0; s < kSeqs; ++s) {
    last_seq[s] = s;
    tiles.push_back({s, 1});
  }
  int32_t* positions_dev = upload(positions);
  int32_t* seq_dev = upload(seq_index);
  int32_t* table_dev = upload(tables);
  int32_t* last_positions_dev = upload(last_positions);
  int32_t* last_seq_dev = upload(last_seq);
  AttentionTile* tiles_dev = upload(tiles);
  const int64_t q_dim = static_cast<int64_t>(kHeads) * kHeadDim;
  float* q = upload(normal_floats(kSeqs * q_dim, 61));
  float* out = device_floats(kSeqs * q_dim);
  const int64_t rows = static_cast<int64_t>(kSeqs) * kContext;
  // The f16 cache's grouped queries on both decode kernels (decode_mma_group).
  struct Variant {
    int n_head_kv;
    KvType kv_type;
    int mma_group;
  };
  for (const auto& [n_head_kv, kv_type, mma_group] :
       {Variant{32, KvType::kF16, kDecodeMmaGroup}, Variant{32, KvType::kQ8_0, kDecodeMmaGroup},
        Variant{8, KvType::kF16, kMaxDecodeGroup + 1}, Variant{8, KvType::kF16, kDecodeMmaGroup},
        Variant{8, KvType::kQ8_0, kDecodeMmaGroup}}) {
    const int64_t kv_dim = static_cast<int64_t>(n_head_kv) * kHeadDim;
    const BenchKvCache cache(kv_type, rows * kv_dim);
    float* kv_new = device_floats(rows * kv_dim);
    BENCH_CHECK(cudaMemset(kv_new, 0, rows * kv_dim * sizeof(float)));
    cache.write(kv_new, kv_new, kv_dim, rows, positions_dev, seq_dev, table_dev, kBlocksPerSeq,
                kBlockSize, stream);
    BENCH_CHECK(cudaFree(kv_new));

    AttentionArgs a = bench_attention_args(
        cache,
        {q, out, last_positions_dev, last_seq_dev, table_dev, kBlocksPerSeq, kBlockSize, kSeqs},
        kHeads, n_head_kv, kHeadDim);
    set_decode_tiles(a, tiles_dev, kSeqs);
    a.decode_mma_group = mma_group;
    const bool mma =
        decode_on_tensor_cores(kv_type, kHeads / n_head_kv, kBlockSize, kSeqs * n_head_kv,
                               current_device_sm_count(), a.decode_mma_group);
    const double seconds =
        time_launches([&](int) { BENCH_OK(attention(a, stream)); }, groups, 20, stream);
    const double bytes = 2.0 * rows * kv_dim * (kv_type == KvType::kQ8_0 ? 34.0 / 32.0 : 2.0);
    const std::string line =
        fmt::format("| | {} | {} | {} | {:.1f} | {:.0f} | {:.0f}% |", n_head_kv, cache.name(),
                    mma ? "tensor cores" : "CUDA cores", seconds * 1e6, bytes / seconds / 1e9,
                    100.0 * bytes / seconds / copy);
    std::printf("%s\n", line.c_str());
    table += line + "\n";
    if (csv != nullptr) {
      std::fprintf(csv, "attention_decode_%s,%s,%d,%d,%d,%.3f,%.1f,%.1f,\n", cache.name(),
                   mma ? "decode_mma" : "decode", n_head_kv, kHeadDim, kContext, seconds * 1e6,
                   bytes / seconds / 1e9, 100.0 * bytes / seconds / copy);
    }
  }
  for (void* p : std::initializer_list<void*>{positions_dev, seq_dev, table_dev, last_positions_dev,
                                              last_seq_dev, tiles_dev, q, out}) {
    BENCH_CHECK(cudaFree(p));
  }
  return table;
}

// A decode step's launch of `seqs` sequences of `context` positions each (one row and tile a
// sequence, KV blocks in order), its cache zeros (the kernels' time does not depend on the
// values), on the decode kernel; the case's warps and splits are the caller's.
struct DecodeStep {
  int32_t* positions = nullptr;
  int32_t* seq_index = nullptr;
  int32_t* tables = nullptr;
  AttentionTile* tiles = nullptr;
  BenchKvCache cache;
  AttentionArgs args;

  DecodeStep(const SplitRows& rows, KvType kv_type, int seqs, int context, int n_head,
             int n_head_kv, int head_dim, int block_size)
      : cache(kv_type, cache_values(seqs, context, n_head_kv, head_dim, block_size)) {
    const int blocks_per_seq = (context + block_size - 1) / block_size;
    std::vector<int32_t> host_positions(seqs, context - 1), host_seqs(seqs),
        host_tables(static_cast<size_t>(seqs) * blocks_per_seq);
    std::vector<AttentionTile> host_tiles;
    for (int s = 0; s < seqs; ++s) {
      host_seqs[s] = s;
      host_tiles.push_back({s, 1});
    }
    for (size_t i = 0; i < host_tables.size(); ++i) host_tables[i] = static_cast<int32_t>(i);
    positions = upload(host_positions);
    seq_index = upload(host_seqs);
    tables = upload(host_tables);
    tiles = upload(host_tiles);
    const int64_t values = cache_values(seqs, context, n_head_kv, head_dim, block_size);
    const size_t value_bytes = kv_type == KvType::kF16 ? 2 : 1;
    BENCH_CHECK(cudaMemset(cache.k, 0, values * value_bytes));
    BENCH_CHECK(cudaMemset(cache.v, 0, values * value_bytes));
    if (kv_type == KvType::kQ8_0) {
      BENCH_CHECK(cudaMemset(cache.k_scales, 0, values / kKvQ8Block * 2));
      BENCH_CHECK(cudaMemset(cache.v_scales, 0, values / kKvQ8Block * 2));
    }
    args = bench_attention_args(
        cache, {rows.q, rows.out, positions, seq_index, tables, blocks_per_seq, block_size, seqs},
        n_head, n_head_kv, head_dim);
    set_decode_tiles(args, tiles, seqs);
    rows.set(args);
  }
  DecodeStep(const DecodeStep&) = delete;
  DecodeStep& operator=(const DecodeStep&) = delete;
  ~DecodeStep() {
    for (void* p : std::initializer_list<void*>{positions, seq_index, tables, tiles}) cudaFree(p);
  }

  static int64_t cache_values(int seqs, int context, int n_head_kv, int head_dim, int block_size) {
    const int64_t blocks = static_cast<int64_t>(seqs) * ((context + block_size - 1) / block_size);
    return blocks * block_size * n_head_kv * head_dim;
  }
};

// Decode steps of few sequences (1 to 64 of 128 to 2048 positions, 32 query heads of head_dim
// 128 over 32 KV heads, f16 cache): the decode kernel with 4, 8 and 16 warps a block and 1 to 8
// flash-decoding splits (combined by each row's last block), and the kernel's own block size.
// Where (sequences x KV heads x splits) blocks of 16 warps outnumber the SMs, those run in
// waves; the table shows which geometry such steps should take.
std::string bench_decode_attention_geometry(int groups, double copy, FILE* csv,
                                            LaunchStream stream) {
  constexpr int kHeads = 32, kHeadDim = 128, kBlockSize = 16, kMaxSplits = 8, kMaxSeqs = 64;
  struct Shape {
    int seqs, context;
  };
  constexpr Shape kShapes[] = {{1, 128},  {1, 512},  {1, 2048}, {4, 640},
                               {16, 192}, {16, 640}, {32, 192}, {64, 192}};
  BENCH_OK(configure_attention_kernels());
  std::printf("\nattention (decode of few sequences: warps a block and splits)\n");
  std::string table =
      "\n| attention decode geometry | sequences x context | warps | splits | us | % of copy |\n"
      "| --- | --- | --- | ---: | ---: | ---: |\n";
  const SplitRows rows(kMaxSeqs, kHeads, kHeadDim, kMaxSplits, 81);
  for (const Shape& shape : kShapes) {
    DecodeStep step(rows, KvType::kF16, shape.seqs, shape.context, kHeads, kHeads, kHeadDim,
                    kBlockSize);
    AttentionArgs& a = step.args;
    const double bytes = 2.0 * 2.0 * shape.seqs * shape.context * kHeads * kHeadDim;
    for (const int warps : {0, 4, 8, 16}) {
      for (int splits = 1; splits <= kMaxSplits; splits *= 2) {
        a.decode_warps = warps;
        a.n_splits = splits;
        const double seconds =
            time_launches([&](int) { BENCH_OK(attention(a, stream)); }, groups, 10, stream);
        const std::string line =
            fmt::format("| | {} x {} | {} | {} | {:.1f} | {:.0f}% |", shape.seqs, shape.context,
                        warps_name(warps), splits, seconds * 1e6, 100.0 * bytes / seconds / copy);
        std::printf("%s\n", line.c_str());
        table += line + "\n";
        if (csv != nullptr) {
          std::fprintf(csv, "attention_decode_geometry,%dx%d,%d,%d,%d,%.3f,%.1f,%.1f,\n",
                       shape.seqs, shape.context, warps, splits, kHeadDim, seconds * 1e6,
                       bytes / seconds / 1e9, 100.0 * bytes / seconds / copy);
        }
      }
    }
  }
  return table;
}

// The same for grouped queries (the 70B shape's 64 query heads over 8 KV heads, LLaMA-3-8B's 32,
// head_dim 128) at long contexts, f16 and Q8_0 caches: few (row, KV head) pairs, so the executor's
// rule gives many splits, each row's last block combining them all (the f16 cache's CUDA-core
// kernel takes 4 warps a block, or by its own choice 16 for four query heads a KV head; its
// tensor-core kernel 4 or 8, the Q8_0 cache's 4 or 16).
std::string bench_decode_attention_grouped(int groups, double copy, FILE* csv,
                                           LaunchStream stream) {
  constexpr int kMaxHeads = 64, kKvHeads = 8, kHeadDim = 128, kBlockSize = 16, kMaxSplits = 32;
  struct Shape {
    int heads, seqs, context;
  };
  constexpr Shape kShapes[] = {
      {64, 1, 2048}, {64, 1, 8192}, {64, 4, 2048}, {32, 1, 2048}, {32, 4, 2048}};
  BENCH_OK(configure_attention_kernels());
  std::printf("\nattention (decode of few sequences, 64 or 32 query heads over 8 KV heads)\n");
  std::string table =
      "\n| attention decode grouped | cache | kernel | query heads | sequences x context | warps | "
      "splits | us | % of copy |\n| --- | --- | --- | ---: | --- | --- | ---: | ---: | ---: |\n";
  const SplitRows rows(4, kMaxHeads, kHeadDim, kMaxSplits, 83);
  struct Variant {
    KvType kv_type;
    int mma_group;
    int many_warps;  // beside 4 warps a block
  };
  for (const auto& [kv_type, mma_group, many_warps] :
       {Variant{KvType::kF16, kMaxDecodeGroup + 1, 0},
        Variant{KvType::kF16, 1, kDecodeF16MmaManyWarps}, Variant{KvType::kQ8_0, 1, 16}}) {
    const char* cache_name = kv_type == KvType::kF16 ? "f16" : "q8_0";
    const bool mma = mma_group == 1;
    for (const Shape& shape : kShapes) {
      DecodeStep step(rows, kv_type, shape.seqs, shape.context, shape.heads, kKvHeads, kHeadDim,
                      kBlockSize);
      AttentionArgs& a = step.args;
      const size_t value_bytes = kv_type == KvType::kF16 ? 2 : 1;
      const double bytes =
          2.0 * static_cast<double>(value_bytes) * shape.seqs * shape.context * kKvHeads * kHeadDim;
      a.decode_mma_group = mma_group;
      for (const int warps : {4, many_warps}) {
        for (int splits = 1; splits <= kMaxSplits; splits *= 2) {
          a.decode_warps = warps;
          a.n_splits = splits;
          const double seconds =
              time_launches([&](int) { BENCH_OK(attention(a, stream)); }, groups, 10, stream);
          const std::string line = fmt::format(
              "| | {} | {} | {} | {} x {} | {} | {} | {:.1f} | {:.0f}% |", cache_name,
              mma ? "tensor cores" : "CUDA cores", shape.heads, shape.seqs, shape.context,
              warps_name(warps), splits, seconds * 1e6, 100.0 * bytes / seconds / copy);
          std::printf("%s\n", line.c_str());
          table += line + "\n";
          if (csv != nullptr) {
            std::fprintf(csv, "attention_decode_grouped,%s,%s,%d,%dx%d,%d,%d,%d,%.3f,%.1f,%.1f,\n",
                         cache_name, mma ? "decode_mma" : "decode", shape.heads, shape.seqs,
                         shape.context, warps, splits, kHeadDim, seconds * 1e6,
                         bytes / seconds / 1e9, 100.0 * bytes / seconds / copy);
          }
        }
      }
    }
  }
  return table;
}

// A step that mixes decodes with a prompt chunk, as the server runs it while a long prompt
// arrives: 64 decode rows of 200 positions each (64 sequences) then a 256-row chunk of one more
// sequence at positions [C, C + 256), for contexts C before the chunk; 32 query heads of
// head_dim 128 over 32 KV heads, f16 and Q8_0 caches (zeros: the kernels' time does not depend
// on the values). The launch as the forward pass makes it (kAuto: the decode rows on the decode
// kernel, the chunk's tiles of 64 rows on the tensor-core kernel) with 1 to 8 flash-decoding
// splits, the chunk's tiles alone, and a 512-row chunk at [C, C + 512) alone (a long prompt's
// pass without decodes). At the longest C also the mixed step with one decode of 8192 positions
// among the 64: launch-wide splits against split tiles of its own.
std::string bench_chunk_attention(int groups, FILE* csv, LaunchStream stream) {
  constexpr int kDecodes = 64, kDecodeContext = 200, kChunkRows = 256, kLongChunkRows = 512,
                kHeads = 32, kHeadDim = 128, kBlockSize = 16, kMaxSplits = 8;
  constexpr int kRows = kDecodes + kLongChunkRows;
  BENCH_OK(configure_attention_kernels());
  std::printf("\nattention (%d decodes of %d positions + a %d-row chunk after C positions)\n",
              kDecodes, kDecodeContext, kChunkRows);
  std::string table =
      "\n| attention chunk after C positions | C | KV cache | launch | splits | us |\n"
      "| --- | ---: | --- | --- | ---: | ---: |\n";
  constexpr int kLongDecodeSplits = 13;  // 8192 positions in splits of 640
  const SplitRows rows(kRows, kHeads, kHeadDim, std::max(kMaxSplits, kLongDecodeSplits), 71);
  for (const int context : {0, 1024, 4096, 7936}) {
    const int blocks_per_seq = (context + kLongChunkRows + kBlockSize - 1) / kBlockSize;
    std::vector<int32_t> positions, seq_index, tables((kDecodes + 1) * blocks_per_seq);
    std::vector<AttentionTile> tiles;
    for (int s = 0; s < kDecodes; ++s) {
      tiles.push_back({static_cast<int32_t>(positions.size()), 1});
      positions.push_back(kDecodeContext - 1);
      seq_index.push_back(s);
    }
    for (int r = 0; r < kLongChunkRows; r += kMaxAttentionQueries) {
      tiles.push_back({kDecodes + r, kMaxAttentionQueries});
    }
    for (int r = 0; r < kLongChunkRows; ++r) {
      positions.push_back(context + r);
      seq_index.push_back(kDecodes);
    }
    for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
    int32_t* positions_dev = upload(positions);
    int32_t* seq_dev = upload(seq_index);
    int32_t* table_dev = upload(tables);
    AttentionTile* tiles_dev = upload(tiles);
    // Where the blocks reach 8192 positions: the first decode at position 8191 instead, and its
    // row cut into split tiles of 640 positions (the others whole) ahead of the chunk's tiles.
    const bool long_decode = context + kLongChunkRows >= 8192;
    std::vector<int32_t> long_positions = positions;
    long_positions[0] = 8191;
    std::vector<AttentionTile> split_tiles;
    for (int s = 0; s < kLongDecodeSplits; ++s) split_tiles.push_back({0, 1, s, kLongDecodeSplits});
    for (int r = 1; r < kDecodes; ++r) split_tiles.push_back({r, 1, 0, 1});
    split_tiles.insert(split_tiles.end(), tiles.begin() + kDecodes, tiles.end());
    int32_t* long_positions_dev = upload(long_positions);
    AttentionTile* split_tiles_dev = upload(split_tiles);
    const int64_t cache_values =
        static_cast<int64_t>(tables.size()) * kBlockSize * kHeads * kHeadDim;
    for (const KvType kv_type : {KvType::kF16, KvType::kQ8_0}) {
      const BenchKvCache cache(kv_type, cache_values);
      const size_t code_bytes = cache_values * (kv_type == KvType::kQ8_0 ? 1 : 2);
      BENCH_CHECK(cudaMemset(cache.k, 0, code_bytes));
      BENCH_CHECK(cudaMemset(cache.v, 0, code_bytes));
      if (kv_type == KvType::kQ8_0) {
        BENCH_CHECK(cudaMemset(cache.k_scales, 0, cache_values / kKvQ8Block * 2));
        BENCH_CHECK(cudaMemset(cache.v_scales, 0, cache_values / kKvQ8Block * 2));
      }
      AttentionArgs a = bench_attention_args(
          cache,
          {rows.q, rows.out, positions_dev, seq_dev, table_dev, blocks_per_seq, kBlockSize, kRows},
          kHeads, kHeads, kHeadDim);
      rows.set(a);
      struct Launch {
        const char* name;
        int decodes, chunk_rows;
      };
      for (const Launch& launch :
           {Launch{"mixed", kDecodes, kChunkRows}, Launch{"256 rows alone", 0, kChunkRows},
            Launch{"512 rows alone", 0, kLongChunkRows}}) {
        a.tiles = tiles_dev + (kDecodes - launch.decodes);
        a.n_tiles = launch.decodes + launch.chunk_rows / kMaxAttentionQueries;
        a.max_tile_rows = kMaxAttentionQueries;
        a.single_row_tiles = launch.decodes;
        for (int splits = 1; splits <= kMaxSplits; splits *= 2) {
          a.n_splits = splits;
          const double seconds =
              time_launches([&](int) { BENCH_OK(attention(a, stream)); }, groups, 10, stream);
          const std::string line = fmt::format("| | {} | {} | {} | {} | {:.1f} |", context,
                                               cache.name(), launch.name, splits, seconds * 1e6);
          std::printf("%s\n", line.c_str());
          table += line + "\n";
          if (csv != nullptr) {
            std::fprintf(csv, "attention_chunk_%s,%s,%d,%d,%d,%.3f,,,\n", cache.name(), launch.name,
                         splits, kHeadDim, context, seconds * 1e6);
          }
        }
      }
      if (long_decode) {
        // The 256-row chunk beside 63 decodes of 200 positions and one of 8192: launch-wide
        // splits (4: the longest decode's share) against split tiles with the chunk's two.
        a.positions = long_positions_dev;
        a.max_tile_rows = kMaxAttentionQueries;
        struct LongLaunch {
          const char* name;
          bool split_tiles;
        };
        for (const LongLaunch& launch : {LongLaunch{"mixed, one 8k decode, launch-wide", false},
                                         LongLaunch{"mixed, one 8k decode, split tiles", true}}) {
          const int decode_tiles = launch.split_tiles ? kDecodes - 1 + kLongDecodeSplits : kDecodes;
          a.tiles = launch.split_tiles ? split_tiles_dev : tiles_dev;
          a.n_tiles = decode_tiles + kChunkRows / kMaxAttentionQueries;
          a.single_row_tiles = decode_tiles;
          a.single_rows = kDecodes;
          a.split_tiles = launch.split_tiles;
          a.n_splits = launch.split_tiles ? kLongDecodeSplits : 4;
          a.rest_splits = 2;
          const double seconds =
              time_launches([&](int) { BENCH_OK(attention(a, stream)); }, groups, 10, stream);
          const std::string line =
              fmt::format("| | {} | {} | {} | {} | {:.1f} |", context, cache.name(), launch.name,
                          a.n_splits, seconds * 1e6);
          std::printf("%s\n", line.c_str());
          table += line + "\n";
        }
        a.positions = positions_dev;
        a.split_tiles = false;
      }
    }
    for (void* p : std::initializer_list<void*>{positions_dev, seq_dev, table_dev, tiles_dev,
                                                long_positions_dev, split_tiles_dev}) {
      BENCH_CHECK(cudaFree(p));
    }
  }
  return table;
}

}  // namespace llamaserve::cuda::kernel_bench
