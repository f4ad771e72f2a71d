// The peer-to-peer reductions of tensor parallelism (peer_all_reduce.h) on two GPUs, each rank
// on its own thread and stream as the executors run them: the one-kernel all-reduce sums
// exactly on both ranks; fused reductions (a matvec publishing its partial, an RMSNorm or
// peer_reduce_add consuming the sum) give the host's sums, bit-identical on both ranks, over
// many reductions of changing row counts mixed with one-kernel all-reduces, eager and replayed
// from a CUDA graph; pulled sums (each rank's partial read by its peers) likewise, for f32, f16
// and bf16 partials; and a rank whose peer never comes returns once the group is aborted.
// Skips below 2 GPUs.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/cuda/matvec.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/peer_all_reduce.h"
#include "quant/blocks.h"
#include "test_util.h"

namespace llamaserve::cuda {
namespace {

using testing::DeviceArray;
using testing::HostMatrix;
using testing::make_matrix;
using testing::random_floats;
using testing::upload;
using testing::UploadedMatrix;

class PeerReduceTest : public testing::TwoGpuTest {};

// `stream` holds a kernel waiting for a peer that never comes: it still waits 300 ms later,
// and returns soon after the group is aborted (no trap: the device stays usable).
void expect_waits_until_aborted(PeerAllReduce& group, cudaStream_t stream) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  const auto aborted = std::chrono::steady_clock::now();
  group.abort();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_LT(std::chrono::steady_clock::now() - aborted, std::chrono::seconds(2));
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The RMSNorm consuming pulled sum `slot` of `view` into rows of width n (partials at `stride`).
RmsNormArgs pulled_norm(const PeerReduceView& view, int slot, float* x, const float* weight,
                        float* y, int64_t rows, int64_t n, int64_t stride, float eps) {
  RmsNormArgs a;
  a.x = x;
  a.x_stride = n;
  a.weight = weight;
  a.y = y;
  a.y_stride = n;
  a.n_rows = rows;
  a.n = n;
  a.eps = eps;
  a.reduce = view;
  a.pull_slot = slot;
  a.residual_stride = stride;
  return a;
}

// Two ranks on their own threads, rank r on cuda:r.
template <typename Fn>
void on_both_ranks(Fn fn) {
  auto rank = [&](int r) {
    cudaSetDevice(r);
    fn(r);
  };
  std::thread a(rank, 0), b(rank, 1);
  a.join();
  b.join();
}

// Many calls of changing sizes (the epochs alternate the slots), eager and replayed from CUDA
// graphs; both ranks get 0 + a + b exactly.
TEST_F(PeerReduceTest, AllReduceSumsExactlyOnBothRanks) {
  constexpr size_t kCapacity = 32768;
  auto group = PeerAllReduce::create({0, 1}, kCapacity);
  ASSERT_TRUE(group.is_ok()) << group.status().to_string();
  std::vector<size_t> sizes;
  for (int i = 0; i < 60; ++i)
    sizes.push_back(4 * static_cast<size_t>(1 + (i * 2654435761u) % (kCapacity / 4)));
  sizes.push_back(kCapacity);
  std::vector<std::vector<float>> host(2);
  for (int r = 0; r < 2; ++r) {
    host[static_cast<size_t>(r)].resize(kCapacity);
    for (size_t i = 0; i < kCapacity; ++i)
      host[static_cast<size_t>(r)][i] =
          static_cast<float>((i * 37 + r * 101) % 1000) * 1e-3f - 0.5f + r;
  }
  std::atomic<int> failures{0};
  on_both_ranks([&](int r) {
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    DeviceArray<float> data(kCapacity);
    std::vector<float> out(kCapacity);
    auto check = [&](size_t n) {
      cudaMemcpyAsync(out.data(), data.get(), n * sizeof(float), cudaMemcpyDeviceToHost, stream);
      if (cudaStreamSynchronize(stream) != cudaSuccess) {
        ++failures;
        return;
      }
      for (size_t i = 0; i < n; ++i) {
        const float want = (0.0f + host[0][i]) + host[1][i];
        if (out[i] != want) {
          ++failures;
          return;
        }
      }
    };
    for (size_t n : sizes) {
      cudaMemcpyAsync(data.get(), host[static_cast<size_t>(r)].data(), n * sizeof(float),
                      cudaMemcpyHostToDevice, stream);
      if (!(*group)->run(r, data.get(), n, stream).is_ok()) ++failures;
      check(n);
    }
    // Captured once, replayed: the epoch lives in device memory and advances per replay.
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    cudaMemcpyAsync(data.get(), host[static_cast<size_t>(r)].data(), 4096 * sizeof(float),
                    cudaMemcpyHostToDevice, stream);
    if (!(*group)->run(r, data.get(), 4096, stream).is_ok()) ++failures;
    cudaStreamEndCapture(stream, &graph);
    cudaGraphInstantiate(&exec, graph, 0);
    for (int i = 0; i < 20; ++i) {
      cudaGraphLaunch(exec, stream);
      check(4096);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  });
  EXPECT_EQ(failures.load(), 0);
}

// Fused reductions as a tensor-parallel layer makes them: each rank's matvec (W_r x_r, F16, an
// odd width) publishes its partial; an RMSNorm adds the sum to the hidden rows and normalizes
// them; a second matvec's sum is added by peer_reduce_add; a one-kernel all-reduce follows.
// 1 to 8 rows per round, 40 rounds eager, then 10 replays of a captured round.
TEST_F(PeerReduceTest, FusedReductionsGiveTheHostSumsOnBothRanks) {
  constexpr int64_t kWidth = 264;  // hidden width: the matvec's output rows
  constexpr int64_t kCols = 136;   // the matvec's input width
  constexpr int kRows = kMaxMatvecRows;
  constexpr float kEps = 1e-5f;
  auto group = PeerAllReduce::create({0, 1}, kRows * kWidth);
  ASSERT_TRUE(group.is_ok()) << group.status().to_string();

  std::vector<HostMatrix> w;
  std::vector<std::vector<float>> x;
  for (int r = 0; r < 2; ++r) {
    w.push_back(make_matrix(TensorType::F16, kWidth, kCols, 300 + r));
    x.push_back(random_floats(static_cast<size_t>(kRows * kCols), 400 + r));
  }
  const std::vector<float> hidden0 = random_floats(static_cast<size_t>(kRows * kWidth), 500);
  const std::vector<float> norm_weight = random_floats(static_cast<size_t>(kWidth), 600);
  // s[b, i] = sum over ranks of (W_r x_r)[b, i], in double.
  std::vector<double> s(static_cast<size_t>(kRows * kWidth), 0.0);
  for (int r = 0; r < 2; ++r) {
    for (int64_t b = 0; b < kRows; ++b) {
      for (int64_t i = 0; i < kWidth; ++i) {
        double dot = 0;
        for (int64_t c = 0; c < kCols; ++c) {
          dot += static_cast<double>(w[static_cast<size_t>(r)].values[i * kCols + c]) *
                 x[static_cast<size_t>(r)][b * kCols + c];
        }
        s[b * kWidth + i] += dot;
      }
    }
  }

  struct Round {
    std::vector<float> hidden, normed, summed;
  };
  std::vector<std::vector<Round>> rounds(2);
  std::atomic<int> failures{0};
  on_both_ranks([&](int r) {
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    UploadedMatrix matrix = upload(w[static_cast<size_t>(r)]);
    DeviceArray<float> xd(x[static_cast<size_t>(r)]);
    DeviceArray<float> hidden(static_cast<size_t>(kRows * kWidth));
    DeviceArray<float> normed(static_cast<size_t>(kRows * kWidth));
    DeviceArray<float> weight(norm_weight);
    DeviceArray<float> data(static_cast<size_t>(kRows * kWidth));
    const PeerReduceView view = (*group)->view(r);
    auto round = [&](int rows) {
      bool ok = cudaMemcpyAsync(hidden.get(), hidden0.data(), rows * kWidth * sizeof(float),
                                cudaMemcpyHostToDevice, stream) == cudaSuccess;
      MatvecArgs m;
      m.w = matrix.view;
      m.x = xd.get();
      m.x_stride = kCols;
      m.n_rows = rows;
      m.y = data.get();  // unused: the partial goes to the inboxes
      m.y_stride = kWidth;
      m.reduce = &view;
      ok = ok && matvec(m, stream).is_ok();
      RmsNormArgs n;
      n.x = hidden.get();
      n.x_stride = kWidth;
      n.weight = weight.get();
      n.y = normed.get();
      n.y_stride = kWidth;
      n.n_rows = rows;
      n.n = kWidth;
      n.eps = kEps;
      n.reduce = view;
      ok = ok && rmsnorm(n, stream).is_ok();
      ok = ok && matvec(m, stream).is_ok();
      ok = ok && peer_reduce_add(view, hidden.get(), kWidth, rows, kWidth, stream).is_ok();
      // The normalized rows, summed over the ranks by the one-kernel all-reduce.
      ok = ok && cudaMemcpyAsync(data.get(), normed.get(), rows * kWidth * sizeof(float),
                                 cudaMemcpyDeviceToDevice, stream) == cudaSuccess;
      ok = ok && (*group)->run(r, data.get(), static_cast<size_t>(rows * kWidth), stream).is_ok();
      if (!ok) ++failures;
    };
    auto collect = [&](int rows) {
      if (cudaStreamSynchronize(stream) != cudaSuccess) {
        ++failures;
        return;
      }
      const size_t n = static_cast<size_t>(rows * kWidth);
      Round out;
      out.hidden = hidden.download();
      out.normed = normed.download();
      out.summed = data.download();
      out.hidden.resize(n);
      out.normed.resize(n);
      out.summed.resize(n);
      rounds[static_cast<size_t>(r)].push_back(std::move(out));
    };
    for (int i = 0; i < 40; ++i) {
      round(1 + i % kRows);
      collect(1 + i % kRows);
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    round(3);
    cudaStreamEndCapture(stream, &graph);
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) ++failures;
    for (int i = 0; i < 10; ++i) {
      cudaGraphLaunch(exec, stream);
      collect(3);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  });
  ASSERT_EQ(failures.load(), 0);
  ASSERT_EQ(rounds[0].size(), 50u);
  ASSERT_EQ(rounds[1].size(), 50u);
  for (size_t k = 0; k < rounds[0].size(); ++k) {
    const Round& a = rounds[0][k];
    const Round& b = rounds[1][k];
    ASSERT_EQ(a.hidden, b.hidden) << "round " << k;  // bit-identical on both ranks
    ASSERT_EQ(a.normed, b.normed) << "round " << k;
    ASSERT_EQ(a.summed, b.summed) << "round " << k;
    const int64_t rows = static_cast<int64_t>(a.hidden.size()) / kWidth;
    for (int64_t row = 0; row < rows; ++row) {
      double sum_sq = 0;
      for (int64_t i = 0; i < kWidth; ++i) {
        const double h1 = hidden0[row * kWidth + i] + s[row * kWidth + i];
        sum_sq += h1 * h1;
      }
      const double inv_rms = 1.0 / std::sqrt(sum_sq / kWidth + kEps);
      for (int64_t i = 0; i < kWidth; ++i) {
        const size_t at = static_cast<size_t>(row * kWidth + i);
        const double h1 = hidden0[at] + s[at];
        const double normed = h1 * inv_rms * norm_weight[static_cast<size_t>(i)];
        ASSERT_NEAR(a.normed[at], normed, 1e-4 * (1 + std::fabs(normed)))
            << "round " << k << " row " << row << " element " << i;
        ASSERT_NEAR(a.hidden[at], h1 + s[at], 1e-4 * (1 + std::fabs(h1 + s[at])))
            << "round " << k << " row " << row << " element " << i;
        ASSERT_EQ(a.summed[at], 0.0f + a.normed[at] + a.normed[at]);
      }
    }
  }
}

// Pulled sums (GEMM passes): each rank's partial, written into its slot as f32, f16 or bf16,
// signalled; an RMSNorm consumes one sum, peer_pull_add the next (two per round, the slots
// alternating), over rounds of changing row counts (1 to 37: the RMSNorm's one-row and
// many-rows kernels) at an odd stride and at one of whole 4-element groups (which the
// many-rows kernel reads 4 at a time), eager and replayed from a CUDA graph. Both ranks get
// x + (0 + p0 + p1) exactly, with the partials as stored.
TEST_F(PeerReduceTest, PulledSumsGiveTheHostSumsOnBothRanks) {
  constexpr int64_t kWidth = 264, kMaxRows = 37;
  constexpr float kEps = 1e-5f;
  for (const int64_t stride : {270, 268})
    for (const SumType type : {SumType::kF32, SumType::kF16, SumType::kBF16}) {
      SCOPED_TRACE(::testing::Message()
                   << "stride " << stride << " type " << static_cast<int>(type));
      const size_t element = static_cast<size_t>(sum_type_bytes(type));
      auto group = PeerAllReduce::create({0, 1}, 1024, kMaxRows * stride * element, type);
      ASSERT_TRUE(group.is_ok()) << group.status().to_string();
      // Each rank's partials as stored (bits) and as the kernels read them (floats).
      std::vector<std::vector<uint8_t>> bits(2);
      std::vector<std::vector<float>> value(2);
      for (int r = 0; r < 2; ++r) {
        const std::vector<float> p = random_floats(kMaxRows * stride, 700 + r, 4.0f);
        bits[r].resize(p.size() * element);
        value[r].resize(p.size());
        for (size_t i = 0; i < p.size(); ++i) {
          if (type == SumType::kF32) {
            std::memcpy(&bits[r][4 * i], &p[i], 4);
            value[r][i] = p[i];
          } else {
            const uint16_t h =
                type == SumType::kF16 ? float_to_half(p[i]).bits : float_to_bf16(p[i]).bits;
            std::memcpy(&bits[r][2 * i], &h, 2);
            value[r][i] = type == SumType::kF16 ? half_to_float(Half{h}) : bf16_to_float(BF16{h});
          }
        }
      }
      const std::vector<float> hidden0 = random_floats(kMaxRows * kWidth, 800);
      const std::vector<float> norm_weight = random_floats(kWidth, 801);
      std::vector<std::vector<std::vector<float>>> results(2);
      std::atomic<int> failures{0};
      on_both_ranks([&](int r) {
        cudaStream_t stream;
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        const PeerReduceView view = (*group)->view(r);
        DeviceArray<float> hidden(kMaxRows * kWidth), normed(kMaxRows * kWidth),
            weight(norm_weight);
        auto round = [&](int rows) {
          bool ok = cudaMemcpyAsync(hidden.get(), hidden0.data(), rows * kWidth * sizeof(float),
                                    cudaMemcpyHostToDevice, stream) == cudaSuccess;
          for (int slot = 0; slot < 2; ++slot) {
            ok =
                ok && cudaMemcpyAsync(view.pull_slot(slot), bits[r].data(), rows * stride * element,
                                      cudaMemcpyHostToDevice, stream) == cudaSuccess;
            ok = ok && peer_pull_signal(view, stream).is_ok();
            if (slot == 0) {
              ok = ok && rmsnorm(pulled_norm(view, 0, hidden.get(), weight.get(), normed.get(),
                                             rows, kWidth, stride, kEps),
                                 stream)
                             .is_ok();
            } else {
              ok = ok && peer_pull_add(view, 1, stride, hidden.get(), kWidth, rows, kWidth, stream)
                             .is_ok();
            }
          }
          if (!ok) ++failures;
        };
        auto collect = [&](int rows) {
          if (cudaStreamSynchronize(stream) != cudaSuccess) {
            ++failures;
            return;
          }
          std::vector<float> h = hidden.download(), y = normed.download();
          h.resize(static_cast<size_t>(rows * kWidth));
          y.resize(static_cast<size_t>(rows * kWidth));
          h.insert(h.end(), y.begin(), y.end());
          results[r].push_back(std::move(h));
        };
        for (int i = 0; i < 24; ++i) {
          round(1 + (i * 7) % kMaxRows);
          collect(1 + (i * 7) % kMaxRows);
        }
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
        round(kMaxRows);
        cudaStreamEndCapture(stream, &graph);
        if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) ++failures;
        for (int i = 0; i < 6; ++i) {
          cudaGraphLaunch(exec, stream);
          collect(kMaxRows);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(stream);
      });
      ASSERT_EQ(failures.load(), 0);
      ASSERT_EQ(results[0].size(), 30u);
      ASSERT_EQ(results[0], results[1]);  // bit-identical on both ranks
      for (const std::vector<float>& got : results[0]) {
        const int64_t rows = static_cast<int64_t>(got.size()) / (2 * kWidth);
        for (int64_t row = 0; row < rows; ++row) {
          double sum_sq = 0;
          std::vector<float> once(kWidth);
          for (int64_t c = 0; c < kWidth; ++c) {
            const size_t p = static_cast<size_t>(row * stride + c);
            const float sum = 0.0f + value[0][p] + value[1][p];
            once[c] = hidden0[row * kWidth + c] + sum;
            sum_sq += static_cast<double>(once[c]) * once[c];
            // Once by the norm, once by peer_pull_add: exact float adds.
            ASSERT_EQ(got[row * kWidth + c], once[c] + sum) << "row " << row << " element " << c;
          }
          const double inv_rms = 1.0 / std::sqrt(sum_sq / kWidth + kEps);
          for (int64_t c = 0; c < kWidth; ++c) {
            const double want = once[c] * inv_rms * norm_weight[c];
            ASSERT_NEAR(got[rows * kWidth + row * kWidth + c], want, 1e-4 * (1 + std::fabs(want)));
          }
        }
      }
    }
}

// Rank 0 reduces alone: its kernel waits for rank 1 until the group is aborted, then returns
// (no trap, the device stays usable).
TEST_F(PeerReduceTest, AWaitingRankReturnsOnceTheGroupIsAborted) {
  auto group = PeerAllReduce::create({0, 1}, 4096);
  ASSERT_TRUE(group.is_ok()) << group.status().to_string();
  cudaSetDevice(0);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  DeviceArray<float> data(4096);
  ASSERT_TRUE((*group)->run(0, data.get(), 4096, stream).is_ok());
  expect_waits_until_aborted(**group, stream);
}

// The same for a pulled sum: rank 0's norm waits for rank 1's signal until the group is aborted.
TEST_F(PeerReduceTest, AWaitingPulledSumReturnsOnceTheGroupIsAborted) {
  constexpr int64_t kWidth = 256, kRows = 4;
  auto group = PeerAllReduce::create({0, 1}, 1024, kRows * kWidth * 2, SumType::kF16);
  ASSERT_TRUE(group.is_ok()) << group.status().to_string();
  cudaSetDevice(0);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  DeviceArray<float> hidden(random_floats(kRows * kWidth, 900)), normed(kRows * kWidth),
      weight(random_floats(kWidth, 901));
  const PeerReduceView view = (*group)->view(0);
  ASSERT_TRUE(peer_pull_signal(view, stream).is_ok());
  ASSERT_TRUE(rmsnorm(pulled_norm(view, 0, hidden.get(), weight.get(), normed.get(), kRows, kWidth,
                                  kWidth, 1e-5f),
                      stream)
                  .is_ok());
  expect_waits_until_aborted(**group, stream);
}

}  // namespace
}  // namespace llamaserve::cuda
