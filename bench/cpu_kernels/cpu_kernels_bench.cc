// Matrix-vector throughput per weight type (GB/s of weights read), the matrix products of a
// prompt pass (FLOP/s) and end-to-end decode tokens/s of the default model, one sequence, for
// each kernel instruction set (docs/cpu.md) with the rate a pure read of its weights sets, and
// the cost of one parallel region.
//
//   build/<dir>/bench/cpu_kernels/cpu_kernels_bench [--cpu-isa=both|avx2|avx512|auto]
//       [--threads=1,2,16] [--benchmark_filter=Matvec]
//
// --cpu-isa: both (default) runs every case with the AVX2 kernels and, where the CPU has
// AVX-512 VNNI (and AMX), again with the AVX-512 ones (and with AMX), side by side (the ISA is
// part of each name); avx2, avx512 or auto runs them once with what the executor's setting of
// that name picks.
// --threads: the thread counts of PoolRun and the decode cases (default 1, 2, 4, 8 where the
// process has that many CPUs, and all of them), also more threads than CPUs.
//
// Matvec: y = W x for W of 2048 × 2048 elements, rotating through enough matrices (> 64 MiB)
// that the weights come from memory, not cache, as in a decode step. Threads: 1 and all cores.
// Q4_0/Q4_1 matrices are packed as the CPU backend packs them (packed_weight.h).
// Prompt: Y = W X for one such matrix and 64 tokens (the four-token kernels), one thread; each
// tile of weight rows is read once for all 64 tokens, so the kernels' arithmetic sets the pace
// rather than the memory.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/kv_cache.h"
#include "backend/cpu/matmul.h"
#include "core/thread_pool.h"
#include "executor/cpu_executor.h"
#include "quant/quant.h"

namespace llamaserve {
namespace {

constexpr int64_t kRows = 2048;
constexpr int64_t kCols = 2048;
constexpr size_t kRotationBytes = 64ull << 20;
constexpr int64_t kPromptTokens = 64;

// The executor setting that runs the kernels of `isa` (kAuto picks AMX where it can).
cpu::CpuIsa setting_for(cpu::KernelIsa isa) {
  switch (isa) {
    case cpu::KernelIsa::kAvx2: return cpu::CpuIsa::kAvx2;
    case cpu::KernelIsa::kAvx512Vnni: return cpu::CpuIsa::kAvx512;
    case cpu::KernelIsa::kAvx512Amx: return cpu::CpuIsa::kAuto;
  }
  return cpu::CpuIsa::kAuto;
}

struct MatrixSet {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<QTensor> tensors;
  std::vector<cpu::PackedWeight> packed;  // one per tensor when the set is packed

  cpu::MatmulOutput output(size_t i, float* y) const {
    return {&tensors[i], y, kRows, nullptr, packed.empty() ? nullptr : &packed[i]};
  }
};

// The types the CPU backend packs (packed_weight.h) are packed as it does.
MatrixSet make_matrices(TensorType type, ThreadPool& pool) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(kCols);
  const size_t row_size = row_bytes(type, kCols);
  const size_t matrix_bytes = row_size * kRows;
  const size_t count = std::max<size_t>(2, (kRotationBytes + matrix_bytes - 1) / matrix_bytes);
  MatrixSet set;
  set.storage.resize(count);
  for (size_t m = 0; m < count; ++m) {
    set.storage[m].resize(matrix_bytes);
    // Quantizing 64 MiB of rows is slow; rows repeat every 64 (the bytes still stream).
    for (int64_t r = 0; r < kRows; ++r) {
      if (r < 64) {
        for (float& v : row) v = dist(rng);
        (void)quantize_row(type, row.data(), set.storage[m].data() + r * row_size, kCols);
      } else {
        std::copy_n(set.storage[m].data() + (r % 64) * row_size, row_size,
                    set.storage[m].data() + r * row_size);
      }
    }
    QTensor t;
    t.name = "bench";
    t.type = type;
    t.shape = {kRows, kCols};
    t.data = set.storage[m].data();
    t.n_bytes = matrix_bytes;
    set.tensors.push_back(t);
  }
  for (const QTensor& t : set.tensors) {
    if (cpu::PackedWeight::packs(type))
      set.packed.push_back(cpu::PackedWeight::pack(t, pool).value());
  }
  return set;
}

void BM_Matvec(benchmark::State& state, TensorType type, cpu::KernelIsa isa) {
  const int threads =
      state.range(0) == 0 ? ThreadPool::default_threads() : static_cast<int>(state.range(0));
  ThreadPool pool(threads);
  MatrixSet set = make_matrices(type, pool);
  std::vector<float> x(kCols), y(kRows);
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  cpu::ActCache act(1, kCols);
  size_t next = 0;
  for (auto _ : state) {
    act.reset(x.data(), 1, kCols);
    const cpu::MatmulOutput out[] = {set.output(next, y.data())};
    cpu::matmul(out, act, pool, isa);
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % set.tensors.size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(set.tensors[0].n_bytes));
  state.counters["threads"] = threads;
}

// The matrix products of a prompt pass: 64 activation rows against one matrix. The activation
// rows are converted in the first iteration only (ActCache keeps them), as a pass converts
// them once per input for all its matrices.
void BM_Prompt(benchmark::State& state, TensorType type, cpu::KernelIsa isa) {
  ThreadPool pool(1);
  MatrixSet set = make_matrices(type, pool);
  std::vector<float> x(kPromptTokens * kCols), y(kPromptTokens * kRows);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  cpu::ActCache act(kPromptTokens, kCols);
  act.reset(x.data(), kPromptTokens, kCols);
  const cpu::MatmulOutput out[] = {set.output(0, y.data())};
  for (auto _ : state) {
    cpu::matmul(out, act, pool, isa);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * kRows * kCols * kPromptTokens * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

// Decode attention of one token over `context` cached positions, SmolLM2's shape (9 query
// heads, 3 KV heads, head_dim 64), one thread, with an F16 or a Q8_0 cache (bytes/s: the
// cache's K and V bytes read). At 32768 positions the cache (24 or 13 MiB) is past most
// last-level caches.
void BM_AttentionDecode(benchmark::State& state, TensorType kv_type, cpu::KernelIsa isa) {
  const int32_t context = static_cast<int32_t>(state.range(0));
  const cpu::AttentionShape shape{9, 3, 64, 0.125f};
  cpu::KvCacheGeometry g;
  g.n_layers = 1;
  g.block_size = 16;
  g.n_blocks = (context + 15) / 16;
  g.n_head_kv = 3;
  g.head_dim = 64;
  g.type = kv_type;
  auto cache = cpu::CpuKvCache::create(g);
  Batch history;
  history.blocks_per_seq = g.n_blocks;
  for (int32_t i = 0; i < g.n_blocks; ++i) history.block_tables.push_back(i);
  for (int32_t i = 0; i < context; ++i) {
    history.tokens.push_back(0);
    history.positions.push_back(i);
    history.seq_index.push_back(0);
  }
  history.seq_lengths = {context};
  std::vector<float> kv(static_cast<size_t>(context) * g.kv_dim(), 0.01f);
  (*cache)->write(history, 0, kv.data(), kv.data());
  Batch batch = history;
  batch.tokens = {0};
  batch.positions = {context - 1};
  batch.seq_index = {0};
  std::vector<float> q(9 * 64, 0.1f), out(9 * 64);
  ThreadPool pool(1);
  cpu::AttentionScratch scratch(shape, g.block_size, 1);
  for (auto _ : state) {
    cpu::attention(batch, shape, q.data(), **cache, 0, out.data(), pool, scratch, isa);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * context *
                          static_cast<int64_t>(g.slot_bytes()) * 2);
}

// The default model (scripts/fetch_model.sh), or nullptr with the case marked skipped.
std::shared_ptr<const LoadedModel> load_default_model(benchmark::State& state) {
  const std::filesystem::path path =
      std::filesystem::path(LLAMASERVE_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  auto model = load_model(path.string());
  if (!model.is_ok()) {
    state.SkipWithError(("model missing (scripts/fetch_model.sh): " + path.string()).c_str());
    return nullptr;
  }
  return std::move(model).value();
}

// The decode ceiling the memory sets: every iteration reads a buffer of the default model's
// weight bytes (what one decoded token streams) with the given threads, each summing its own
// contiguous slice, and nothing else. tok/s is the decode rate a kernel reading the weights at
// this pace and doing no other work would reach; DecodeSmolLM2's tok/s against it is the share
// of the machine's read bandwidth a decode step gets.
void BM_WeightReadSmolLM2(benchmark::State& state) {
  auto model = load_default_model(state);
  if (!model) return;
  const auto threads = static_cast<int>(state.range(0));
  constexpr size_t kLine = 64;
  const size_t n_lines = model->weight_bytes() / kLine;
  // Lines of their own (aligned loads), written once so that every page is backed.
  std::unique_ptr<uint8_t, decltype(&std::free)> buffer(
      static_cast<uint8_t*>(std::aligned_alloc(kLine, n_lines * kLine)), &std::free);
  std::memset(buffer.get(), 1, n_lines * kLine);
  ThreadPool pool(threads);
  std::vector<uint64_t> sums(static_cast<size_t>(threads) * 32);
  for (auto _ : state) {
    pool.run([&](int part, int n_parts) {
      const size_t begin = n_lines * static_cast<size_t>(part) / static_cast<size_t>(n_parts);
      const size_t end = n_lines * static_cast<size_t>(part + 1) / static_cast<size_t>(n_parts);
      // Eight independent sums over four lines a step: the loads of many lines in flight.
      const auto* lines = reinterpret_cast<const __m256i*>(buffer.get());
      __m256i acc[8];
      for (__m256i& a : acc) a = _mm256_setzero_si256();
      size_t line = begin;
      for (; line + 4 <= end; line += 4) {
        for (int v = 0; v < 8; ++v) {
          acc[v] = _mm256_add_epi64(acc[v], _mm256_load_si256(lines + line * 2 + v));
        }
      }
      for (; line < end; ++line) {
        for (int v = 0; v < 2; ++v) {
          acc[v] = _mm256_add_epi64(acc[v], _mm256_load_si256(lines + line * 2 + v));
        }
      }
      for (int v = 0; v < 8; ++v) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums.data() + part * 32 + v * 4), acc[v]);
      }
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["threads"] = threads;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(n_lines * kLine));
}

// One parallel region with no work: the wake-up of the workers and the join, which a decode
// step pays about five times a layer (ThreadPool).
void BM_PoolRun(benchmark::State& state) {
  const auto threads = static_cast<int>(state.range(0));
  ThreadPool pool(threads);
  std::vector<int> calls(static_cast<size_t>(threads) * 16);
  for (auto _ : state) {
    pool.run([&](int part, int) { ++calls[static_cast<size_t>(part) * 16]; });
  }
  benchmark::DoNotOptimize(calls.data());
  state.counters["threads"] = threads;
}

// Decode tokens/s of one sequence, as a user sees it, at a given context length (arg 1):
// the prompt fills the cache up to `context`, then each iteration decodes one token; the
// continuation restarts at `context` every 128 tokens so the length stays put.
void BM_DecodeSmolLM2(benchmark::State& state, cpu::KernelIsa isa) {
  auto model = load_default_model(state);
  if (!model) return;
  const int32_t context = static_cast<int32_t>(state.range(1));
  CpuExecutorOptions options;
  options.threads = static_cast<int>(state.range(0));
  options.kv_capacity_tokens = context + 256;
  options.cpu_isa = setting_for(isa);
  auto executor = create_cpu_executor(model, options);
  if (!executor.is_ok()) {
    state.SkipWithError(executor.status().to_string().c_str());
    return;
  }
  Executor& ex = **executor;
  std::vector<float> logits(ex.config().n_vocab);
  Batch batch;
  batch.blocks_per_seq = (context + 256) / 16;
  for (int32_t i = 0; i < batch.blocks_per_seq; ++i) batch.block_tables.push_back(i);
  for (int32_t i = 0; i < context; ++i) {
    batch.tokens.push_back(100 + i % 1000);
    batch.positions.push_back(i);
    batch.seq_index.push_back(0);
  }
  batch.seq_lengths = {context};
  batch.logit_rows = {context - 1};
  if (!ex.forward(batch, logits).is_ok()) {
    state.SkipWithError("prefill failed");
    return;
  }
  int32_t position = context;
  for (auto _ : state) {
    if (position >= context + 128) position = context;
    const int32_t token =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    batch.tokens = {token};
    batch.positions = {position};
    batch.seq_index = {0};
    batch.seq_lengths = {position + 1};
    batch.logit_rows = {0};
    ++position;
    if (!ex.forward(batch, logits).is_ok()) {
      state.SkipWithError("decode failed");
      return;
    }
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(model->weight_bytes()));
}

// Prompt processing tokens/s: a 256-token prompt in one forward pass (one sequence).
void BM_PrefillSmolLM2(benchmark::State& state, cpu::KernelIsa isa) {
  auto model = load_default_model(state);
  if (!model) return;
  constexpr int32_t kPrompt = 256;
  CpuExecutorOptions options;
  options.threads = static_cast<int>(state.range(0));
  options.kv_capacity_tokens = kPrompt;
  options.max_batch_tokens = kPrompt;
  options.cpu_isa = setting_for(isa);
  auto executor = create_cpu_executor(model, options);
  if (!executor.is_ok()) {
    state.SkipWithError(executor.status().to_string().c_str());
    return;
  }
  Executor& ex = **executor;
  std::vector<float> logits(ex.config().n_vocab);
  Batch batch;
  batch.blocks_per_seq = kPrompt / 16;
  for (int32_t i = 0; i < batch.blocks_per_seq; ++i) batch.block_tables.push_back(i);
  for (int32_t i = 0; i < kPrompt; ++i) {
    batch.tokens.push_back(100 + i);
    batch.positions.push_back(i);
    batch.seq_index.push_back(0);
  }
  batch.seq_lengths = {kPrompt};
  batch.logit_rows = {kPrompt - 1};
  for (auto _ : state) {
    if (!ex.forward(batch, logits).is_ok()) {
      state.SkipWithError("prefill failed");
      return;
    }
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * kPrompt,
                                               benchmark::Counter::kIsRate);
}

void register_benchmarks(const std::vector<cpu::KernelIsa>& isas,
                         std::vector<int64_t> thread_counts) {
  const TensorType types[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                              TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                              TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};
  for (cpu::KernelIsa isa : isas) {
    const std::string suffix = std::string("/") + cpu::kernel_isa_name(isa);
    for (TensorType type : types) {
      benchmark::RegisterBenchmark((std::string("Matvec/") + type_name(type) + suffix).c_str(),
                                   BM_Matvec, type, isa)
          ->Arg(1)
          ->Arg(0)
          ->ArgName("threads")
          ->UseRealTime()
          ->MinTime(0.3);
    }
    for (TensorType type : types) {
      benchmark::RegisterBenchmark((std::string("Prompt/") + type_name(type) + suffix).c_str(),
                                   BM_Prompt, type, isa)
          ->UseRealTime()
          ->MinTime(0.3)
          ->Unit(benchmark::kMillisecond);
    }
  }
  if (thread_counts.empty()) {
    // 1, 2, 4, 8 threads where the machine has them, and all of its cores.
    const int64_t all_threads = ThreadPool::default_threads();
    for (int64_t t = 1; t < all_threads && t <= 8; t *= 2) thread_counts.push_back(t);
    thread_counts.push_back(all_threads);
  }
  auto* pool_run = benchmark::RegisterBenchmark("PoolRun", BM_PoolRun);
  for (int64_t t : thread_counts) pool_run->Arg(t);
  pool_run->ArgName("threads")->UseRealTime();
  for (cpu::KernelIsa isa : isas) {
    for (TensorType kv_type : {TensorType::F16, TensorType::Q8_0}) {
      benchmark::RegisterBenchmark(
          (std::string("AttentionDecode/") + type_name(kv_type) + "/" + cpu::kernel_isa_name(isa))
              .c_str(),
          BM_AttentionDecode, kv_type, isa)
          ->Arg(512)
          ->Arg(4096)
          ->Arg(32768)
          ->ArgName("context");
    }
  }
  auto* weight_read = benchmark::RegisterBenchmark("WeightReadSmolLM2", BM_WeightReadSmolLM2);
  for (int64_t t : thread_counts) weight_read->Arg(t);
  weight_read->ArgName("threads")->UseRealTime()->MinTime(1.0)->Unit(benchmark::kMillisecond);
  for (cpu::KernelIsa isa : isas) {
    const std::string suffix = std::string("/") + cpu::kernel_isa_name(isa);
    benchmark::RegisterBenchmark(("DecodeSmolLM2_Q4_1" + suffix).c_str(), BM_DecodeSmolLM2, isa)
        ->ArgsProduct({thread_counts, {64, 1024}})
        ->ArgNames({"threads", "context"})
        ->UseRealTime()
        ->MinTime(3.0)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("PrefillSmolLM2_Q4_1" + suffix).c_str(), BM_PrefillSmolLM2, isa)
        ->Arg(1)
        ->Arg(ThreadPool::default_threads())
        ->ArgName("threads")
        ->UseRealTime()
        ->MinTime(3.0)
        ->Unit(benchmark::kMillisecond);
  }
}

// The value of --<name>=value, removed from argv; empty when absent.
std::string take_flag(int* argc, char** argv, std::string_view name) {
  const std::string prefix = "--" + std::string(name) + "=";
  std::string value;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], prefix.data(), prefix.size()) == 0) {
      value = argv[i] + prefix.size();
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  return value;
}

// The kernel sets --cpu-isa asks for: both = AVX2 and, where the CPU has them, AVX-512 and AMX;
// avx2, avx512 or auto = what the executor setting of that name resolves to. Empty on a bad
// value.
std::vector<cpu::KernelIsa> parse_isas(std::string value) {
  if (value.empty() || value == "both") {
    std::vector<cpu::KernelIsa> isas = {cpu::KernelIsa::kAvx2};
    if (cpu::cpu_has_avx512_vnni()) isas.push_back(cpu::KernelIsa::kAvx512Vnni);
    if (cpu::cpu_has_amx_int8()) isas.push_back(cpu::KernelIsa::kAvx512Amx);
    return isas;
  }
  auto setting = cpu::parse_cpu_isa(value);
  if (!setting.is_ok()) {
    std::fprintf(stderr, "--cpu-isa=%s: expected both, avx2, avx512 or auto\n", value.c_str());
    return {};
  }
  return {cpu::resolve_kernel_isa(*setting)};
}

// --threads=1,2,16: positive counts separated by commas. Empty when absent; nullopt when bad.
std::optional<std::vector<int64_t>> parse_thread_counts(const std::string& value) {
  std::vector<int64_t> counts;
  size_t begin = 0;
  while (begin < value.size()) {
    size_t end = value.find(',', begin);
    if (end == std::string::npos) end = value.size();
    int64_t count = 0;
    const char* first = value.data() + begin;
    const char* last = value.data() + end;
    auto [ptr, ec] = std::from_chars(first, last, count);
    if (ec != std::errc() || ptr != last || count < 1) {
      std::fprintf(stderr, "--threads=%s: expected positive counts, as 1,2,16\n", value.c_str());
      return std::nullopt;
    }
    counts.push_back(count);
    begin = end + 1;
  }
  return counts;
}

}  // namespace
}  // namespace llamaserve

int main(int argc, char** argv) {
  const auto isas = llamaserve::parse_isas(llamaserve::take_flag(&argc, argv, "cpu-isa"));
  const auto threads =
      llamaserve::parse_thread_counts(llamaserve::take_flag(&argc, argv, "threads"));
  if (isas.empty() || !threads) return 2;
  benchmark::Initialize(&argc, argv);
  llamaserve::register_benchmarks(isas, *threads);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
