#include "core/cpu_count.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace llamaserve {
namespace {

std::string_view trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\n");
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t\n") - begin + 1);
}

// A whole decimal integer, nothing else.
std::optional<long long> parse_integer(std::string_view s) {
  s = trim(s);
  long long value = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || error != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::optional<double> quota_over_period(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<double>(quota) / static_cast<double>(period);
}

// The first 4 KiB of a small pseudo-file, or nullopt when it cannot be read.
std::optional<std::string> read_small_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text(4096, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

std::optional<double> smaller(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// `mount`/`cgroup` and each of its ancestors up to `mount` (where the cgroup's own directory is
// missing, as when a container sees its cgroup at the root of its mount: `mount` alone).
std::vector<std::filesystem::path> cgroup_dirs(const std::filesystem::path& mount,
                                               std::string_view cgroup) {
  std::vector<std::filesystem::path> dirs;
  std::error_code error;
  if (!std::filesystem::is_directory(mount, error)) return dirs;
  const std::filesystem::path relative =
      std::filesystem::path(std::string(cgroup)).relative_path().lexically_normal();
  std::filesystem::path dir = mount / relative;
  if (relative.empty() || relative.string().starts_with("..") ||
      !std::filesystem::is_directory(dir, error)) {
    return {mount};
  }
  for (; dir != mount && dir.has_relative_path(); dir = dir.parent_path()) dirs.push_back(dir);
  dirs.push_back(mount);
  return dirs;
}

}  // namespace

std::optional<double> parse_cpu_max(std::string_view cpu_max) {
  cpu_max = trim(cpu_max);
  const size_t space = cpu_max.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view quota = cpu_max.substr(0, space);
  const auto period = parse_integer(cpu_max.substr(space + 1));
  if (quota == "max" || !period) return std::nullopt;
  const auto q = parse_integer(quota);
  if (!q) return std::nullopt;
  return quota_over_period(*q, *period);
}

std::optional<double> parse_cfs_quota(std::string_view quota_us, std::string_view period_us) {
  const auto quota = parse_integer(quota_us);
  const auto period = parse_integer(period_us);
  if (!quota || !period) return std::nullopt;
  return quota_over_period(*quota, *period);
}

std::optional<double> cgroup_cpu_limit(std::string_view proc_self_cgroup,
                                       const std::filesystem::path& root) {
  std::optional<double> limit;
  std::istringstream lines{std::string(proc_self_cgroup)};
  std::string line;
  while (std::getline(lines, line)) {
    // "ID:CONTROLLERS:PATH"; cgroup v2 is "0::PATH".
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string_view controllers =
        std::string_view(line).substr(first + 1, second - first - 1);
    const std::string_view path = std::string_view(line).substr(second + 1);
    if (line.starts_with("0::")) {
      for (const auto& dir : cgroup_dirs(root, path)) {
        if (const auto text = read_small_file(dir / "cpu.max")) {
          limit = smaller(limit, parse_cpu_max(*text));
        }
      }
      continue;
    }
    bool has_cpu = false;
    for (size_t begin = 0; begin <= controllers.size();) {
      const size_t end = std::min(controllers.find(',', begin), controllers.size());
      has_cpu |= controllers.substr(begin, end - begin) == "cpu";
      begin = end + 1;
    }
    if (!has_cpu) continue;
    // The controller's mount is named after its controllers ("cpu,cpuacct"), often with a
    // "cpu" link beside it; read the second only when it is another name.
    std::vector<std::string_view> mounts = {controllers};
    if (controllers != "cpu") mounts.push_back("cpu");
    for (const std::string_view mount_name : mounts) {
      for (const auto& dir : cgroup_dirs(root / std::string(mount_name), path)) {
        const auto quota = read_small_file(dir / "cpu.cfs_quota_us");
        const auto period = read_small_file(dir / "cpu.cfs_period_us");
        if (quota && period) limit = smaller(limit, parse_cfs_quota(*quota, *period));
      }
    }
  }
  return limit;
}

int usable_cpus() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  n = std::max(1, n);
  if (const auto text = read_small_file("/proc/self/cgroup")) {
    if (const auto limit = cgroup_cpu_limit(*text, "/sys/fs/cgroup")) {
      n = std::min(n, std::max(1, static_cast<int>(std::ceil(*limit))));
    }
  }
  return n;
}

}  // namespace llamaserve
