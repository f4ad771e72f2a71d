// How many CPUs this process may use, for "all cores" defaults: the CPUs of its affinity mask
// (taskset, a container's cpuset), capped by a cgroup CPU quota (a container's --cpus, a
// Kubernetes CPU limit). The count of online CPUs alone would start one spinning thread per
// host core in a container limited to a few, and a pool of more threads than it may run
// waits for its own threads' turns at every parallel region.
#pragma once

#include <filesystem>
#include <optional>
#include <string_view>

namespace llamaserve {

// The CPUs of the calling thread's affinity mask, capped by the cgroup quota of this
// process (rounded up), at least 1.
int usable_cpus();

// The CPU quota, in CPUs, that the cgroup files under `root` (normally /sys/fs/cgroup) set for
// the cgroup named in `proc_self_cgroup` (the text of /proc/self/cgroup) or any of its
// ancestors: the smallest, or nullopt when none is set. cgroup v2 (cpu.max) and v1
// (cpu.cfs_quota_us / cpu.cfs_period_us of the cpu controller) are both read.
std::optional<double> cgroup_cpu_limit(std::string_view proc_self_cgroup,
                                       const std::filesystem::path& root);

// The parsers behind it. cpu.max: "max PERIOD" (no limit) or "QUOTA PERIOD", in µs.
std::optional<double> parse_cpu_max(std::string_view cpu_max);
// cpu.cfs_quota_us ("-1": no limit) and cpu.cfs_period_us.
std::optional<double> parse_cfs_quota(std::string_view quota_us, std::string_view period_us);

}  // namespace llamaserve
