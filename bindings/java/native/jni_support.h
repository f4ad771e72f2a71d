// Helpers for the JNI boundary: converting byte[] (UTF-8) and arrays, throwing Java
// exceptions, and the guard that keeps every C++ exception on this side.
//
// Convention: a helper that calls into the JVM and finds a Java exception pending throws
// JavaExceptionPending; guarded() catches it and returns to Java, where the pending
// exception is raised. Any other C++ exception becomes a Java exception in guarded(), so
// nothing ever unwinds into the JVM.
#pragma once

#include <jni.h>

#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace llamaserve::jni {

struct JavaExceptionPending {};

// Looks up and pins (global refs) the classes and constructors the shim creates. Called
// from JNI_OnLoad; false (with a Java exception pending) if one is missing.
bool load_java_types(JNIEnv* env);
void unload_java_types(JNIEnv* env);

// Throws io.llamaserve.engine.LlamaEngineException carrying status.code() and its message.
void throw_status(JNIEnv* env, const Status& status);
void throw_java(JNIEnv* env, const char* class_name, const char* message);

// Throws JavaExceptionPending if a Java exception is pending.
void check_java(JNIEnv* env);

// The bytes of a byte[] (null -> IllegalArgumentException naming `what`).
std::string bytes_of(JNIEnv* env, jbyteArray array, const char* what);
// The byte[] elements of a byte[][] (null array = empty; a null element is an error).
std::vector<std::string> byte_arrays_of(JNIEnv* env, jobjectArray arrays, const char* what);
jbyteArray new_byte_array(JNIEnv* env, std::string_view bytes);
std::vector<int32_t> ints_of(JNIEnv* env, jintArray array, const char* what);
jintArray new_int_array(JNIEnv* env, const std::vector<int32_t>& values);

// A NativeEvent object (see NativeEvent.java for the field meanings).
struct EventFields {
  std::string_view text;
  int32_t token_count = 0;
  int32_t finish_reason = 0;  // 0 = a text delta
  int32_t error_code = 0;
  std::string_view error_message;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  double queue_ms = 0;
  double ttft_ms = 0;
  double total_ms = 0;
  double decode_tokens_per_s = 0;
};
jobject new_event(JNIEnv* env, const EventFields& fields);

// Runs `body`; converts every C++ exception into a pending Java exception and then
// returns `on_exception`. The only way out of a JNI entry point.
template <typename R, typename Body>
R guarded(JNIEnv* env, R on_exception, Body&& body) noexcept {
  try {
    return body();
  } catch (const JavaExceptionPending&) {
    // Already pending; Java raises it when the native method returns.
  } catch (const std::bad_alloc&) {
    throw_java(env, "java/lang/OutOfMemoryError", "native allocation failed in llamaserve_jni");
  } catch (const std::exception& e) {
    throw_status(env, Status(StatusCode::kInternal, std::string("native error: ") + e.what()));
  } catch (...) {
    throw_status(env, Status(StatusCode::kInternal, "native error: unknown C++ exception"));
  }
  return on_exception;
}

template <typename Body>
void guarded_void(JNIEnv* env, Body&& body) noexcept {
  guarded(env, 0, [&] {
    body();
    return 0;
  });
}

}  // namespace llamaserve::jni
