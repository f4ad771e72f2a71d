#include "jni_support.h"

namespace llamaserve::jni {
namespace {

// Pinned by load_java_types; the JVM keeps them valid until JNI_OnUnload.
struct JavaTypes {
  jclass event_class = nullptr;
  jmethodID event_ctor = nullptr;
  jclass engine_exception_class = nullptr;
  jmethodID engine_exception_ctor = nullptr;
};
JavaTypes g_types;

jclass pin_class(JNIEnv* env, const char* name) {
  jclass local = env->FindClass(name);
  if (local == nullptr) return nullptr;
  auto global = static_cast<jclass>(env->NewGlobalRef(local));
  env->DeleteLocalRef(local);
  return global;
}

}  // namespace

bool load_java_types(JNIEnv* env) {
  g_types.event_class = pin_class(env, "io/llamaserve/engine/NativeEvent");
  if (g_types.event_class == nullptr) return false;
  // (byte[] text, int tokenCount, int finishReason, int errorCode, byte[] errorMessage,
  //  int promptTokens, int completionTokens, double queueMs, double ttftMs, double totalMs,
  //  double decodeTokensPerSecond)
  g_types.event_ctor = env->GetMethodID(g_types.event_class, "<init>", "([BIII[BIIDDDD)V");
  if (g_types.event_ctor == nullptr) return false;
  g_types.engine_exception_class = pin_class(env, "io/llamaserve/engine/LlamaEngineException");
  if (g_types.engine_exception_class == nullptr) return false;
  // (int code, byte[] messageUtf8)
  g_types.engine_exception_ctor =
      env->GetMethodID(g_types.engine_exception_class, "<init>", "(I[B)V");
  return g_types.engine_exception_ctor != nullptr;
}

void unload_java_types(JNIEnv* env) {
  if (g_types.event_class != nullptr) env->DeleteGlobalRef(g_types.event_class);
  if (g_types.engine_exception_class != nullptr) {
    env->DeleteGlobalRef(g_types.engine_exception_class);
  }
  g_types = JavaTypes{};
}

void throw_java(JNIEnv* env, const char* class_name, const char* message) {
  if (env->ExceptionCheck()) return;  // keep the first exception
  jclass type = env->FindClass(class_name);
  if (type == nullptr) return;  // FindClass left NoClassDefFoundError pending
  env->ThrowNew(type, message);
  env->DeleteLocalRef(type);
}

void throw_status(JNIEnv* env, const Status& status) {
  if (env->ExceptionCheck()) return;
  // The message goes over as UTF-8 bytes: NewStringUTF expects modified UTF-8, which
  // differs from what a path or a prompt holds.
  const std::string& message = status.message();
  jbyteArray bytes = env->NewByteArray(static_cast<jsize>(message.size()));
  if (bytes == nullptr) return;
  env->SetByteArrayRegion(bytes, 0, static_cast<jsize>(message.size()),
                          reinterpret_cast<const jbyte*>(message.data()));
  jobject error = env->NewObject(g_types.engine_exception_class, g_types.engine_exception_ctor,
                                 static_cast<jint>(status.code()), bytes);
  env->DeleteLocalRef(bytes);
  if (error == nullptr) return;
  env->Throw(static_cast<jthrowable>(error));
  env->DeleteLocalRef(error);
}

void check_java(JNIEnv* env) {
  if (env->ExceptionCheck()) throw JavaExceptionPending{};
}

std::string bytes_of(JNIEnv* env, jbyteArray array, const char* what) {
  if (array == nullptr) {
    throw_java(env, "java/lang/IllegalArgumentException", what);
    throw JavaExceptionPending{};
  }
  const jsize length = env->GetArrayLength(array);
  std::string out(static_cast<size_t>(length), '\0');
  env->GetByteArrayRegion(array, 0, length, reinterpret_cast<jbyte*>(out.data()));
  check_java(env);
  return out;
}

std::vector<std::string> byte_arrays_of(JNIEnv* env, jobjectArray arrays, const char* what) {
  std::vector<std::string> out;
  if (arrays == nullptr) return out;
  const jsize count = env->GetArrayLength(arrays);
  out.reserve(static_cast<size_t>(count));
  for (jsize i = 0; i < count; ++i) {
    auto element = static_cast<jbyteArray>(env->GetObjectArrayElement(arrays, i));
    check_java(env);
    out.push_back(bytes_of(env, element, what));
    env->DeleteLocalRef(element);
  }
  return out;
}

jbyteArray new_byte_array(JNIEnv* env, std::string_view bytes) {
  jbyteArray array = env->NewByteArray(static_cast<jsize>(bytes.size()));
  check_java(env);
  env->SetByteArrayRegion(array, 0, static_cast<jsize>(bytes.size()),
                          reinterpret_cast<const jbyte*>(bytes.data()));
  check_java(env);
  return array;
}

std::vector<int32_t> ints_of(JNIEnv* env, jintArray array, const char* what) {
  if (array == nullptr) {
    throw_java(env, "java/lang/IllegalArgumentException", what);
    throw JavaExceptionPending{};
  }
  const jsize length = env->GetArrayLength(array);
  std::vector<int32_t> out(static_cast<size_t>(length));
  static_assert(sizeof(jint) == sizeof(int32_t));
  env->GetIntArrayRegion(array, 0, length, reinterpret_cast<jint*>(out.data()));
  check_java(env);
  return out;
}

jintArray new_int_array(JNIEnv* env, const std::vector<int32_t>& values) {
  jintArray array = env->NewIntArray(static_cast<jsize>(values.size()));
  check_java(env);
  env->SetIntArrayRegion(array, 0, static_cast<jsize>(values.size()),
                         reinterpret_cast<const jint*>(values.data()));
  check_java(env);
  return array;
}

jobject new_event(JNIEnv* env, const EventFields& f) {
  jbyteArray text = new_byte_array(env, f.text);
  jbyteArray error_message = new_byte_array(env, f.error_message);
  jobject event = env->NewObject(
      g_types.event_class, g_types.event_ctor, text, static_cast<jint>(f.token_count),
      static_cast<jint>(f.finish_reason), static_cast<jint>(f.error_code), error_message,
      static_cast<jint>(f.prompt_tokens), static_cast<jint>(f.completion_tokens), f.queue_ms,
      f.ttft_ms, f.total_ms, f.decode_tokens_per_s);
  env->DeleteLocalRef(text);
  env->DeleteLocalRef(error_message);
  check_java(env);
  return event;
}

}  // namespace llamaserve::jni
