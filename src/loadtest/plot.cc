#include "loadtest/plot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace llamaserve::loadtest {

Status run_gnuplot(const std::string& gnuplot, const std::string& script_path) {
  std::vector<char*> argv = {const_cast<char*>(gnuplot.c_str()),
                             const_cast<char*>(script_path.c_str()), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, gnuplot.c_str(), nullptr, nullptr, argv.data(), ::environ);
  if (spawned != 0) {
    return make_error(StatusCode::kNotFound, "cannot run '{}': {}", gnuplot,
                      std::strerror(spawned));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      return make_error(StatusCode::kInternal, "waitpid: {}", std::strerror(errno));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return make_error(StatusCode::kNotFound, "cannot run '{}'", gnuplot);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return make_error(StatusCode::kInternal, "'{} {}' failed (status {})", gnuplot, script_path,
                      status);
  }
  return Status::ok();
}

}  // namespace llamaserve::loadtest
