// A CUPTI injection library that records when each kernel ran, as it ran: no replay, no
// serialization, so programmatic dependent launch, graphs and concurrent kernels keep their
// overlap (unlike Nsight Compute, which replays each kernel alone). Loaded by the CUDA driver:
//
//   CUDA_INJECTION64_PATH=libkernel_timeline.so KERNEL_TIMELINE_CSV=out.csv
//       llamaserve bench ... --profile-steps 4 --profile-batch 1
//
// Only the kernels of work submitted between cudaProfilerStart and cudaProfilerStop (the steps
// that `llamaserve bench --profile-steps` marks) are written, at exit, one CSV row each:
// the submitting call's correlation id and name, the kernel's start and end (ns, the CUPTI
// clock), its stream, grid and block sizes and its demangled name. scripts/kernel_timeline.py
// turns the rows into a per-kernel breakdown of a step.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct KernelRow {
  uint32_t correlation;
  uint64_t start, end;
  uint32_t stream;
  int32_t grid, block;
  std::string name;  // mangled, as CUPTI gives it (demangled for the rows written)
};

struct Recorder {
  std::mutex mu;
  bool in_range = false;
  std::unordered_map<uint32_t, std::string> calls;  // correlation id -> API name, in range
  std::vector<KernelRow> kernels;
  CUpti_SubscriberHandle subscriber = nullptr;
};

Recorder& recorder() {
  static Recorder* r = new Recorder();  // (never destroyed: used from exit handlers)
  return *r;
}

void check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* message = nullptr;
  cuptiGetResultString(result, &message);
  std::fprintf(stderr, "kernel_timeline: %s: %s\n", what, message != nullptr ? message : "?");
}

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

constexpr size_t kBufferBytes = 8u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Recorder& r = recorder();
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    std::lock_guard<std::mutex> lock(r.mu);
    r.kernels.push_back({k->correlationId, k->start, k->end, k->streamId,
                         k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ,
                         k->name != nullptr ? k->name : "?"});
  }
  std::free(buffer);
}

// Runtime API calls: the profiler range's bounds, and the correlation ids of the calls in it.
void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API) return;
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite != CUPTI_API_ENTER) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000) {
    r.in_range = true;
  } else if (id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000) {
    r.in_range = false;
  } else if (r.in_range) {
    r.calls.emplace(info->correlationId, info->functionName);
  }
}

void write_csv() {
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
  Recorder& r = recorder();
  const char* path = std::getenv("KERNEL_TIMELINE_CSV");
  FILE* f = std::fopen(path != nullptr ? path : "kernel-timeline.csv", "w");
  if (f == nullptr) {
    std::perror("kernel_timeline: output");
    return;
  }
  std::lock_guard<std::mutex> lock(r.mu);
  std::fprintf(f, "correlation,call,start_ns,end_ns,stream,grid,block,kernel\n");
  size_t written = 0;
  for (const KernelRow& k : r.kernels) {
    const auto call = r.calls.find(k.correlation);
    if (call == r.calls.end()) continue;
    std::string name = demangle(k.name.c_str());
    for (char& c : name) {
      if (c == '"') c = '\'';
    }
    std::fprintf(f, "%u,%s,%llu,%llu,%u,%d,%d,\"%s\"\n", k.correlation, call->second.c_str(),
                 static_cast<unsigned long long>(k.start), static_cast<unsigned long long>(k.end),
                 k.stream, k.grid, k.block, name.c_str());
    ++written;
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_timeline: %zu kernels of %zu in the profiler range\n", written,
               r.kernels.size());
}

}  // namespace

// Called by the CUDA driver at initialization (CUDA_INJECTION64_PATH).
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  Recorder& r = recorder();
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "callbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "kernel activity");
  check(cuptiSubscribe(&r.subscriber, on_api, nullptr), "subscribe");
  check(cuptiEnableDomain(1, r.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API), "runtime callbacks");
  std::atexit(write_csv);
  return 1;
}
