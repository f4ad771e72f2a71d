#include "jinja/errors.h"

namespace llamaserve::jinja {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kSyntax: return "syntax";
    case ErrorKind::kRuntime: return "runtime";
    case ErrorKind::kRaised: return "raised";
    case ErrorKind::kLimit: return "limit";
  }
  return "unknown";
}

}  // namespace llamaserve::jinja
