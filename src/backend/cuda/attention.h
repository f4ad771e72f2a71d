// Paged KV cache writes and causal grouped-query attention on the device.
//
// KV cache of one layer (as the CPU backend's): K and V are each
// [n_blocks][block_size][n_head_kv][head_dim] f16, or with KvType::kQ8_0 int8 codes in that
// layout and one f16 scale per 32 of them in a scale array [n_blocks][block_size][n_head_kv]
// [head_dim / 32] (kv_q8.cuh), about half the bytes. Sequence s's logical block i (positions
// [i * block_size, (i + 1) * block_size)) lives in physical block block_tables[s * stride + i].
//
// Attention works on query tiles: up to `rows` consecutive batch rows of one sequence with
// consecutive positions (one row for a decode token, up to kMaxAttentionQueries / group for a
// prefill chunk). A block of the kernel owns one (tile, KV head, split): the tile's query
// heads of that KV head read every K/V row of the split once, with an online softmax per
// chunk of 128 positions. With n_splits > 1 (flash decoding: long contexts and few rows), the
// splits' partial results are combined by a second kernel.
//
// Three kernels do this. The CUDA-core kernel (fp32 FMAs) handles every case. The tensor-core
// kernel (attention_mma.cu: mma.sync on f16 Q, K, V with fp32 scores and sums, FlashAttention-2
// style) is for prefill tiles of at least kMinTensorCoreQueries query vectors, split or not
// (8-bit output only through the splits' reduction). The decode kernel is for batches whose
// tiles are all one row, up to 8 query heads per KV head: over an f16 cache with one query head a
// KV head warps streaming whole K/V rows in fp32 (attention_decode.cu), over a Q8_0 cache or an
// f16 cache's grouped queries mma.sync on runs of 16 positions (attention_decode_mma.cu; KV blocks
// of a multiple of 16 positions, else a Q8_0 cache takes the CUDA-core kernel and an f16 cache
// attention_decode.cu).
// AttentionArgs::kernel may name one (tests, benchmarks); the forward pass lets attention()
// choose.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/act_quant.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/launch.h"
#include "core/status.h"

namespace llamaserve::cuda {

// Query vectors (tile rows × query heads per KV head) one attention block holds.
inline constexpr int kMaxAttentionQueries = 64;

// The tensor-core kernel computes query vectors in sixteens (the M of one mma.m16n8k16): with
// fewer per tile (decode) most of its work would be padding.
inline constexpr int kMinTensorCoreQueries = 16;

// The KV cache's element type (see the top of the file).
enum class KvType { kF16, kQ8_0 };

// Values per Q8_0 scale.
inline constexpr int kKvQ8Block = 32;

// Query heads a KV head from which decode rows over an f16 cache run on tensor cores: there
// the group shares each K and V value (attention_decode_mma.cu).
inline constexpr int kDecodeMmaGroup = 2;

struct KvWriteArgs {
  const float* k = nullptr;  // row r: kv_dim values at k + r * k_stride
  int64_t k_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  KvType type = KvType::kF16;
  void* k_cache = nullptr;  // this layer's f16 values or int8 codes
  void* v_cache = nullptr;
  void* k_scales = nullptr;  // kQ8_0: this layer's f16 scales
  void* v_scales = nullptr;
  const int32_t* positions = nullptr;     // (n_rows), device
  const int32_t* seq_index = nullptr;     // (n_rows), device
  const int32_t* block_tables = nullptr;  // device, row stride blocks_per_seq
  int32_t blocks_per_seq = 0;
  int32_t block_size = 0;
  int64_t n_rows = 0;
  int64_t kv_dim = 0;  // n_head_kv * head_dim; kQ8_0: a multiple of 32
};

// Stores the K/V rows of a batch at their positions' cache slots (kQ8_0: quantized as the
// host's Q8_0 encoder does, the same bytes).
// PRECONDITION (validated on the host from the Batch): every block id is within the cache.
Status write_kv(const KvWriteArgs& args, LaunchStream stream);

struct AttentionTile {
  int32_t first_row;
  int32_t n_rows;
  // A one-row tile may be one split of its row's context (AttentionArgs::split_tiles): split
  // `split` of `n_splits`, the context cut in n_splits equal parts. n_splits 0: the launch's
  // splits (AttentionArgs::n_splits, a block each).
  int32_t split = 0;
  int32_t n_splits = 0;
};

enum class AttentionKernel {
  kAuto,         // tensor cores where they apply, else the decode kernel, else CUDA cores
  kCudaCores,    // the fp32 kernel, whatever the shape
  kTensorCores,  // the mma.sync kernel; attention() refuses shapes it does not handle
  kDecode,       // the decode kernel (one row per tile, up to 8 query heads per KV head); likewise
};

struct AttentionArgs {
  const float* q = nullptr;  // row r: n_head heads of head_dim at q + r * q_stride
  int64_t q_stride = 0;
  KvType kv_type = KvType::kF16;
  const void* k_cache = nullptr;  // this layer's f16 values or int8 codes
  const void* v_cache = nullptr;
  const void* k_scales = nullptr;  // kQ8_0: this layer's f16 scales
  const void* v_scales = nullptr;
  const int32_t* positions = nullptr;  // (batch rows), device
  const int32_t* seq_index = nullptr;
  const int32_t* block_tables = nullptr;
  int32_t blocks_per_seq = 0;
  int32_t block_size = 0;
  const AttentionTile* tiles = nullptr;  // (n_tiles), device
  int32_t n_tiles = 0;
  int32_t max_tile_rows = 1;  // the largest n_rows of any tile
  // Tiles [0, single_row_tiles) have one row each. When others follow (a step mixing decode
  // rows with prompt chunks) and the kernel is kAuto, those run on the decode kernel and the
  // rest on the kernel their shape picks, in two launches: the tensor-core kernel would spend
  // a whole block of 64 query vectors on each one-row tile. With split_tiles the one-row tiles
  // are splits of rows [0, single_rows) (n_splits their partials' stride) and the rest take
  // rest_splits launch-wide splits; the launches run one after the other, so the second's
  // partials may reuse the first's memory.
  int32_t single_row_tiles = 0;
  int32_t single_rows = 0;
  int32_t rest_splits = 1;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;  // 64 or 128
  float scale = 0.0f;    // softmax scale, usually 1 / sqrt(head_dim)
  float* out = nullptr;  // row r: n_head heads at out + r * out_stride
  int64_t out_stride = 0;
  // When set (out_q.qs not null), out's rows are also written as 8-bit blocks (act_quant.h):
  // the input of an integer matvec of the output projection.
  Q8Rows out_q;
  // When set (out_half.data not null), out's rows are also written as halves (elementwise.h):
  // the input of a GEMM of the output projection. The decode kernel writes them itself (the
  // same conversion as convert_to_half); a pass on other kernels converts `out` after them.
  HalfRows out_half;
  // Flash decoding. With n_splits > 1 the partials go to `partial` (see attention_workspace
  // _floats) and a reduce kernel writes `out`; or, for the decode kernel given split_counters
  // (n_batch_rows x n_head_kv of them, zero), the last split's block of each (row, KV head)
  // combines them itself and sets its counter back to zero (no reduce kernel).
  int32_t n_splits = 1;
  // The tiles are splits of their rows, each row's own number of them (AttentionTile::split,
  // n_splits; a long context among short ones is cut finely, the short ones stay whole): one
  // decode block per tile and KV head, n_splits above at least the tiles' largest (the partials'
  // stride). PRECONDITIONS: every tile one row, or the one-row tiles lead (single_row_tiles,
  // single_rows) and the kernel is kAuto; split_counters set.
  bool split_tiles = false;
  float* partial = nullptr;
  int64_t n_batch_rows = 0;  // rows of the batch (sizes the partial buffer)
  unsigned int* split_counters = nullptr;
  // Rows [0, reduce_first_row) were combined by the decode kernel of an earlier launch (the
  // decode rows of a mixed pass): the splits' reduction leaves them.
  int32_t reduce_first_row = 0;
  // Tests and benchmarks name a kernel; the forward pass leaves kAuto.
  AttentionKernel kernel = AttentionKernel::kAuto;
  // Every row is its sequence's only row of the pass, so the K/V of the positions below a row's
  // own were written by earlier passes (whose kernels all completed before this pass's staging
  // copies): the decode kernel loads them before it waits for the kernel that wrote the queries
  // (launch.cuh). Leave false where a kernel of this pass may have written them.
  bool earlier_kv_settled = false;
  // The decode kernel's warps per block (4, 8 for one query head per KV head, 16 for up to 4; on
  // tensor cores 4 or 16 over a Q8_0 cache, 4 or 8 over an f16 one); 0: the largest whose blocks
  // fit one wave of the SMs, else 4 (attention_decode.h). Tests name it.
  int32_t decode_warps = 0;
  // The query heads a KV head from which decode rows over an f16 cache take the tensor-core
  // decode kernel where the pass's shape does (decode_on_tensor_cores in attention_decode.h;
  // kMaxDecodeGroup + 1: never, 1: any group). Tests and benchmarks name it.
  int32_t decode_mma_group = kDecodeMmaGroup;
};

// Floats of the `partial` buffer for n_splits > 1: per (row, head, split) head_dim sums plus a
// running max and sum.
int64_t attention_workspace_floats(int64_t n_batch_rows, int32_t n_head, int32_t head_dim,
                                   int32_t n_splits);

// Raises the kernels' shared-memory limit to what kMaxAttentionQueries query vectors need
// (above the default 48 KB). Once per device before attention() with tiles of many rows; not
// done inside attention() so that launches stay legal during CUDA graph capture.
Status configure_attention_kernels();

// PRECONDITIONS: configure_attention_kernels() ran on this device; K/V of every row already written
// (write_kv); tiles as described above; max_tile_rows * (n_head / n_head_kv) <=
// kMaxAttentionQueries.
// The tensor-core kernel runs when it applies (max_tile_rows * (n_head / n_head_kv) >=
// kMinTensorCoreQueries, and out_q.qs == nullptr unless n_splits > 1) and either args.kernel is
// kTensorCores or kAuto; the decode kernel when it applies (tiles of one row, up to
// kMaxDecodeGroup query heads per KV head) and args.kernel is kDecode or kAuto.
Status attention(const AttentionArgs& args, LaunchStream stream);

}  // namespace llamaserve::cuda
