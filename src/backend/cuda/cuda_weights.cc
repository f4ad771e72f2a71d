#include "backend/cuda/cuda_weights.h"

#include <algorithm>

#include "backend/cpu/rope.h"
#include "backend/cuda/check.h"
#include "quant/quant.h"

namespace llamaserve::cuda {
namespace {

// Visits every tensor of `range` the device holds: matrices via on_matrix(tensor), vectors
// (norms, biases) via on_vector(tensor). The tied output matrix is not visited (it shares
// token_embd's storage).
template <class OnMatrix, class OnVector>
Status for_each_tensor(const LoadedModel& model, const LayerRange& range, OnMatrix on_matrix,
                       OnVector on_vector) {
  const ModelWeights& w = model.weights;
  if (range.embeddings || (range.head && model.config.tied_output)) {
    LS_RETURN_IF_ERROR(on_matrix(w.token_embd));
  }
  for (int32_t l = range.begin; l < range.end; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    LS_RETURN_IF_ERROR(on_vector(lw.attn_norm));
    LS_RETURN_IF_ERROR(on_vector(lw.ffn_norm));
    for (const QTensor* t : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down}) {
      LS_RETURN_IF_ERROR(on_matrix(*t));
    }
    for (const std::optional<QTensor>* b : {&lw.bq, &lw.bk, &lw.bv}) {
      if (b->has_value()) LS_RETURN_IF_ERROR(on_vector(**b));
    }
  }
  if (range.head) {
    LS_RETURN_IF_ERROR(on_vector(w.output_norm));
    if (!model.config.tied_output) LS_RETURN_IF_ERROR(on_matrix(w.output));
  }
  return Status::ok();
}

Result<DeviceMatrixLayout> matrix_layout(const QTensor& t) {
  if (t.shape.size() != 2) {
    return make_error(StatusCode::kInvalidArgument, "{}: expected a matrix, got {} dims", t.name,
                      t.shape.size());
  }
  Result<DeviceMatrixLayout> layout = device_matrix_layout(t.type, t.rows(), t.cols());
  if (!layout.is_ok()) return layout.status().with_context(t.name);
  return layout;
}

uint64_t vector_bytes(const QTensor& t) {
  return align_up(static_cast<uint64_t>(t.cols()) * sizeof(float), kDeviceAlignment);
}

}  // namespace

Result<uint64_t> cuda_weight_bytes(const LoadedModel& model, const LayerRange& range) {
  uint64_t bytes = 0;
  LS_RETURN_IF_ERROR(for_each_tensor(
      model, range,
      [&](const QTensor& t) -> Status {
        LS_ASSIGN_OR_RETURN(const DeviceMatrixLayout layout, matrix_layout(t));
        bytes += align_up(layout.total_bytes(), kDeviceAlignment);
        return Status::ok();
      },
      [&](const QTensor& t) -> Status {
        bytes += vector_bytes(t);
        return Status::ok();
      }));
  bytes +=
      align_up(static_cast<uint64_t>(model.config.rope_dim / 2) * sizeof(float), kDeviceAlignment);
  return bytes;
}

Result<CudaWeights> upload_weights(const LoadedModel& model, const LayerRange& range,
                                   DevicePool& pool, void* staging, size_t staging_bytes,
                                   cudaStream_t stream, const LoadProgressFn& on_progress) {
  CudaWeights out;
  const uint64_t used_before = pool.used();
  std::vector<float> host;

  uint64_t total_bytes = 0;
  if (on_progress) {
    auto count = [&](const QTensor& t) -> Status {
      total_bytes += t.n_bytes;
      return Status::ok();
    };
    LS_RETURN_IF_ERROR(for_each_tensor(model, range, count, count));
  }
  uint64_t done_bytes = 0;
  auto uploaded = [&](const QTensor& t) {
    done_bytes += t.n_bytes;
    if (on_progress && t.n_bytes > 0) on_progress(done_bytes, total_bytes, t.name);
  };

  auto matrix = [&](const QTensor& t) -> Result<DeviceMatrix> {
    LS_ASSIGN_OR_RETURN(const DeviceMatrixLayout layout, matrix_layout(t));
    LS_ASSIGN_OR_RETURN(void* dst, pool.allocate(layout.total_bytes(), t.name));
    out.max_matrix_elems = std::max(out.max_matrix_elems, t.rows() * t.cols());
    Result<DeviceMatrix> m =
        upload_matrix(t.type, t.rows(), t.cols(), t.data, static_cast<uint8_t*>(dst), staging,
                      staging_bytes, stream);
    if (!m.is_ok()) return m.status().with_context(t.name);
    uploaded(t);
    return m;
  };
  // Vectors of any type become fp32 (GGUF norms are F32 already).
  auto vector = [&](const QTensor& t) -> Result<const float*> {
    host.resize(static_cast<size_t>(t.cols()));
    if (t.rows() != 1) {
      return make_error(StatusCode::kInvalidArgument, "{}: expected a vector", t.name);
    }
    LS_RETURN_IF_ERROR(dequantize_row(t.type, t.data, host.data(), t.cols()).with_context(t.name));
    LS_ASSIGN_OR_RETURN(float* dst, pool.allocate_array<float>(host.size(), t.name));
    LS_CUDA_CHECK(cudaMemcpyAsync(dst, host.data(), host.size() * sizeof(float),
                                  cudaMemcpyHostToDevice, stream));
    LS_CUDA_CHECK(cudaStreamSynchronize(stream));  // `host` is reused
    uploaded(t);
    return static_cast<const float*>(dst);
  };

  const ModelWeights& w = model.weights;
  if (range.embeddings || (range.head && model.config.tied_output)) {
    LS_ASSIGN_OR_RETURN(out.token_embd, matrix(w.token_embd));
  }
  for (int32_t l = range.begin; l < range.end; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    CudaLayerWeights d;
    LS_ASSIGN_OR_RETURN(d.attn_norm, vector(lw.attn_norm));
    LS_ASSIGN_OR_RETURN(d.ffn_norm, vector(lw.ffn_norm));
    // Q, K, V and gate, up one after the other: where their sizes are whole multiples of the
    // alignment, each group lies back to back and a prefill multiplies it as one matrix
    // (CudaBackend::continues_gemm).
    LS_ASSIGN_OR_RETURN(d.wq, matrix(lw.wq));
    LS_ASSIGN_OR_RETURN(d.wk, matrix(lw.wk));
    LS_ASSIGN_OR_RETURN(d.wv, matrix(lw.wv));
    LS_ASSIGN_OR_RETURN(d.wo, matrix(lw.wo));
    LS_ASSIGN_OR_RETURN(d.w_gate, matrix(lw.w_gate));
    LS_ASSIGN_OR_RETURN(d.w_up, matrix(lw.w_up));
    LS_ASSIGN_OR_RETURN(d.w_down, matrix(lw.w_down));
    if (lw.bq) {
      LS_ASSIGN_OR_RETURN(d.bq, vector(*lw.bq));
    }
    if (lw.bk) {
      LS_ASSIGN_OR_RETURN(d.bk, vector(*lw.bk));
    }
    if (lw.bv) {
      LS_ASSIGN_OR_RETURN(d.bv, vector(*lw.bv));
    }
    out.layers.push_back(d);
  }
  if (range.head) {
    LS_ASSIGN_OR_RETURN(out.output_norm, vector(w.output_norm));
    if (model.config.tied_output) {
      out.output = out.token_embd;
    } else {
      LS_ASSIGN_OR_RETURN(out.output, matrix(w.output));
    }
  }
  const auto* freqs = w.rope_freqs ? w.rope_freqs->f32() : nullptr;
  const std::vector<float> inv_freq = cpu::rope_inv_freq(model.config, freqs);
  LS_ASSIGN_OR_RETURN(float* freq_dst,
                      pool.allocate_array<float>(inv_freq.size(), "rope frequencies"));
  LS_CUDA_CHECK(cudaMemcpyAsync(freq_dst, inv_freq.data(), inv_freq.size() * sizeof(float),
                                cudaMemcpyHostToDevice, stream));
  LS_CUDA_CHECK(cudaStreamSynchronize(stream));
  out.inv_freq = freq_dst;
  out.bytes = pool.used() - used_before;
  return out;
}

}  // namespace llamaserve::cuda
