// The native methods of io.llamaserve.engine.NativeBridge. Each converts its arguments,
// calls EmbeddedEngine or a RequestHandle, and converts the result; all of it inside
// guarded(), so a C++ failure becomes a Java exception and never a crash.
//
// Pointers: the Java side owns every pointer handed out here (engine: LlamaEngine,
// request: GenerationHandle) and guarantees it is live and released once; a 0 is refused.
// Text crosses as UTF-8 byte[] in both directions (JNI's String functions use modified
// UTF-8, which encodes characters outside the BMP differently).
#include <jni.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "embedded_engine.h"
#include "jni_support.h"

using llamaserve::ChatMessage;
using llamaserve::FinishReason;
using llamaserve::GenerationEvent;
using llamaserve::RequestHandle;
using llamaserve::Status;
using llamaserve::StatusCode;
using namespace llamaserve::jni;

namespace {

// The numbers LlamaEngineException.Code and NativeEvent use.
static_assert(static_cast<int>(StatusCode::kInvalidArgument) == 1);
static_assert(static_cast<int>(StatusCode::kIo) == 10);
static_assert(static_cast<int>(FinishReason::kStop) == 1);
static_assert(static_cast<int>(FinishReason::kTimeout) == 5);

constexpr int kSamplingFloats = 6;  // see NativeBridge.submit

EmbeddedEngine& engine_at(JNIEnv* env, jlong pointer) {
  if (pointer == 0) {
    throw_java(env, "java/lang/IllegalStateException", "the engine is closed");
    throw JavaExceptionPending{};
  }
  return *reinterpret_cast<EmbeddedEngine*>(pointer);
}

RequestHandle& request_at(JNIEnv* env, jlong pointer) {
  if (pointer == 0) {
    throw_java(env, "java/lang/IllegalStateException", "the generation handle is closed");
    throw JavaExceptionPending{};
  }
  return *reinterpret_cast<RequestHandle*>(pointer);
}

[[noreturn]] void fail(JNIEnv* env, const Status& status) {
  throw_status(env, status);
  throw JavaExceptionPending{};
}

std::chrono::milliseconds clamp_ms(jlong ms) {
  return std::chrono::milliseconds(std::clamp<jlong>(ms, 0, 24LL * 3600 * 1000));
}

}  // namespace

extern "C" {

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM* vm, void* /*reserved*/) {
  JNIEnv* env = nullptr;
  if (vm->GetEnv(reinterpret_cast<void**>(&env), JNI_VERSION_1_8) != JNI_OK) return JNI_ERR;
  if (!load_java_types(env)) return JNI_ERR;
  return JNI_VERSION_1_8;
}

JNIEXPORT void JNICALL JNI_OnUnload(JavaVM* vm, void* /*reserved*/) {
  JNIEnv* env = nullptr;
  if (vm->GetEnv(reinterpret_cast<void**>(&env), JNI_VERSION_1_8) == JNI_OK) {
    unload_java_types(env);
  }
}

// kv_sequences: 0 = the KV cache of ModelService's default (context x max_running per
// replica); n >= 1 = context_tokens x n tokens, which needs context_tokens > 0.
JNIEXPORT jlong JNICALL Java_io_llamaserve_engine_NativeBridge_open(
    JNIEnv* env, jclass, jbyteArray model_path, jbyteArray chat_template, jbyteArray device,
    jint tensor_parallel, jint pipeline_parallel, jint replicas, jdouble gpu_memory_utilization,
    jint threads, jlong context_tokens, jint kv_sequences, jint max_running, jint max_waiting,
    jint max_batch_tokens) {
  return guarded(env, jlong{0}, [&] {
    llamaserve::ModelSpec spec;
    spec.path = bytes_of(env, model_path, "modelPath must not be null");
    if (chat_template != nullptr) spec.chat_template = bytes_of(env, chat_template, "");
    spec.layout.device = bytes_of(env, device, "device must not be null");
    spec.layout.tensor_parallel = tensor_parallel;
    spec.layout.pipeline_parallel = pipeline_parallel;
    spec.layout.replicas = replicas;
    spec.layout.gpu_memory_utilization = gpu_memory_utilization;
    spec.layout.threads = threads;
    spec.context_tokens = context_tokens;
    spec.engine.max_running = max_running;
    spec.engine.max_waiting = max_waiting;
    spec.engine.max_batch_tokens = max_batch_tokens;
    if (kv_sequences < 0) {
      fail(env, llamaserve::make_error(StatusCode::kInvalidArgument,
                                       "kvSequences must be >= 0, got {}", kv_sequences));
    }
    if (kv_sequences > 0 && context_tokens <= 0) {
      fail(env, llamaserve::make_error(StatusCode::kInvalidArgument,
                                       "kvSequences {} needs contextTokens > 0 (got {}); 0 "
                                       "sizes the KV cache as contextTokens x maxRunning",
                                       kv_sequences, context_tokens));
    }
    if (kv_sequences > 0) spec.kv_cache_tokens = context_tokens * kv_sequences;
    auto engine = EmbeddedEngine::open(spec);
    if (!engine.is_ok()) fail(env, engine.status());
    return reinterpret_cast<jlong>(std::move(engine).value().release());
  });
}

JNIEXPORT void JNICALL Java_io_llamaserve_engine_NativeBridge_close(JNIEnv* env, jclass,
                                                                    jlong engine) {
  // Stops the engines (open requests end with kCancelled) and frees the model and the
  // executors' device memory.
  guarded_void(env, [&] { delete &engine_at(env, engine); });
}

JNIEXPORT jbyteArray JNICALL Java_io_llamaserve_engine_NativeBridge_describe(JNIEnv* env, jclass,
                                                                             jlong engine) {
  return guarded(env, jbyteArray{nullptr},
                 [&] { return new_byte_array(env, engine_at(env, engine).describe()); });
}

JNIEXPORT jint JNICALL Java_io_llamaserve_engine_NativeBridge_maxContext(JNIEnv* env, jclass,
                                                                         jlong engine) {
  return guarded(env, jint{0}, [&] { return jint{engine_at(env, engine).max_context()}; });
}

JNIEXPORT jlongArray JNICALL Java_io_llamaserve_engine_NativeBridge_stats(JNIEnv* env, jclass,
                                                                          jlong engine) {
  return guarded(env, jlongArray{nullptr}, [&] {
    const llamaserve::EngineStats s = engine_at(env, engine).stats();
    // Order: see EngineStats.java.
    const jlong values[] = {s.waiting,
                            s.running,
                            s.kv_blocks_total,
                            s.kv_blocks_free,
                            static_cast<jlong>(s.requests_finished),
                            static_cast<jlong>(s.prompt_tokens_total),
                            static_cast<jlong>(s.generated_tokens_total),
                            static_cast<jlong>(s.preemptions_total),
                            static_cast<jlong>(s.steps_total)};
    constexpr jsize kCount = sizeof(values) / sizeof(values[0]);
    jlongArray out = env->NewLongArray(kCount);
    check_java(env);
    env->SetLongArrayRegion(out, 0, kCount, values);
    check_java(env);
    return out;
  });
}

// sampling = {temperature, top_p, min_p, repetition_penalty, presence_penalty,
// frequency_penalty}. A chat request when roles is non-null (roles[i] goes with contents[i]),
// otherwise prompt_text is the raw prompt.
JNIEXPORT jlong JNICALL Java_io_llamaserve_engine_NativeBridge_submit(
    JNIEnv* env, jclass, jlong engine, jbyteArray id, jobjectArray roles, jobjectArray contents,
    jbyteArray prompt_text, jint max_tokens, jfloatArray sampling, jint top_k, jboolean has_seed,
    jlong seed, jobjectArray stop_strings, jboolean ignore_eos, jlong timeout_ms) {
  return guarded(env, jlong{0}, [&] {
    EmbeddedEngine& target = engine_at(env, engine);
    EmbeddedRequest request;
    if (id != nullptr) request.id = bytes_of(env, id, "");
    request.chat = roles != nullptr;
    if (request.chat) {
      std::vector<std::string> role_list = byte_arrays_of(env, roles, "a message role is null");
      std::vector<std::string> content_list =
          byte_arrays_of(env, contents, "a message content is null");
      if (role_list.size() != content_list.size()) {
        fail(env, Status(StatusCode::kInvalidArgument, "roles and contents differ in length"));
      }
      for (size_t i = 0; i < role_list.size(); ++i) {
        request.messages.push_back(
            ChatMessage{std::move(role_list[i]), std::move(content_list[i])});
      }
    } else {
      request.prompt_text = bytes_of(env, prompt_text, "the prompt must not be null");
    }
    request.max_new_tokens = max_tokens;
    if (sampling == nullptr || env->GetArrayLength(sampling) != kSamplingFloats) {
      fail(env, Status(StatusCode::kInvalidArgument, "sampling must hold 6 floats"));
    }
    jfloat values[kSamplingFloats];
    env->GetFloatArrayRegion(sampling, 0, kSamplingFloats, values);
    check_java(env);
    llamaserve::SamplingParams& s = request.sampling;
    s.temperature = values[0];
    s.top_p = values[1];
    s.min_p = values[2];
    s.repetition_penalty = values[3];
    s.presence_penalty = values[4];
    s.frequency_penalty = values[5];
    s.top_k = top_k;
    if (has_seed) s.seed = static_cast<uint64_t>(seed);
    request.stop_strings = byte_arrays_of(env, stop_strings, "a stop string is null");
    request.ignore_eos = ignore_eos;
    if (timeout_ms < 0) fail(env, Status(StatusCode::kInvalidArgument, "timeout must be >= 0"));
    request.timeout = clamp_ms(timeout_ms);
    auto handle = target.submit(std::move(request));
    if (!handle.is_ok()) fail(env, handle.status());
    return reinterpret_cast<jlong>(new RequestHandle(std::move(handle).value()));
  });
}

// The next event, or null when none arrived within timeout_ms (or the finish event has
// already been returned).
JNIEXPORT jobject JNICALL Java_io_llamaserve_engine_NativeBridge_next(JNIEnv* env, jclass,
                                                                      jlong request,
                                                                      jlong timeout_ms) {
  return guarded(env, jobject{nullptr}, [&]() -> jobject {
    std::optional<GenerationEvent> event = request_at(env, request).next(clamp_ms(timeout_ms));
    if (!event) return nullptr;
    EventFields fields;
    if (event->kind == GenerationEvent::Kind::kDelta) {
      fields.text = event->text;
      fields.token_count = static_cast<int32_t>(event->tokens.size());
      return new_event(env, fields);
    }
    fields.finish_reason = static_cast<int32_t>(event->finish_reason);
    fields.error_code = static_cast<int32_t>(event->error.code());
    fields.error_message = event->error.message();
    fields.prompt_tokens = event->usage.prompt_tokens;
    fields.completion_tokens = event->usage.completion_tokens;
    fields.queue_ms = event->usage.queue_ms;
    fields.ttft_ms = event->usage.ttft_ms;
    fields.total_ms = event->usage.total_ms;
    fields.decode_tokens_per_s = event->usage.decode_tokens_per_s;
    return new_event(env, fields);
  });
}

JNIEXPORT void JNICALL Java_io_llamaserve_engine_NativeBridge_cancel(JNIEnv* env, jclass,
                                                                     jlong request) {
  guarded_void(env, [&] { request_at(env, request).cancel(); });
}

// Frees the handle; a request still running is cancelled (RequestHandle's destructor).
JNIEXPORT void JNICALL Java_io_llamaserve_engine_NativeBridge_release(JNIEnv* env, jclass,
                                                                      jlong request) {
  guarded_void(env, [&] { delete &request_at(env, request); });
}

JNIEXPORT jintArray JNICALL Java_io_llamaserve_engine_NativeBridge_tokenize(JNIEnv* env, jclass,
                                                                            jlong engine,
                                                                            jbyteArray text,
                                                                            jboolean add_special) {
  return guarded(env, jintArray{nullptr}, [&] {
    EmbeddedEngine& target = engine_at(env, engine);
    const std::string bytes = bytes_of(env, text, "text must not be null");
    return new_int_array(env, target.tokenize(bytes, add_special));
  });
}

JNIEXPORT jbyteArray JNICALL Java_io_llamaserve_engine_NativeBridge_detokenize(JNIEnv* env, jclass,
                                                                               jlong engine,
                                                                               jintArray tokens) {
  return guarded(env, jbyteArray{nullptr}, [&] {
    EmbeddedEngine& target = engine_at(env, engine);
    const std::vector<int32_t> ids = ints_of(env, tokens, "tokens must not be null");
    auto text = target.detokenize(ids);
    if (!text.is_ok()) fail(env, text.status());
    return new_byte_array(env, *text);
  });
}

}  // extern "C"
