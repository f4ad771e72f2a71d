#include "core/cpu_count.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace llamaserve {
namespace {

TEST(CpuCount, ParsesCgroupV2CpuMax) {
  EXPECT_EQ(parse_cpu_max("max 100000\n"), std::nullopt);
  EXPECT_EQ(parse_cpu_max("400000 100000\n"), 4.0);
  EXPECT_EQ(parse_cpu_max("150000 100000"), 1.5);
  for (const char* bad : {"", "max", "100000", "-1 100000", "0 100000", "100000 0", "1e5 100000",
                          "100000 100000 7", "abc def", " 5 "}) {
    EXPECT_EQ(parse_cpu_max(bad), std::nullopt) << bad;
  }
}

TEST(CpuCount, ParsesCgroupV1Quota) {
  EXPECT_EQ(parse_cfs_quota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(parse_cfs_quota("250000\n", "100000\n"), 2.5);
  EXPECT_EQ(parse_cfs_quota("250000", "0"), std::nullopt);
  EXPECT_EQ(parse_cfs_quota("x", "100000"), std::nullopt);
}

class CgroupTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        std::filesystem::temp_directory_path() / ("cpu_count_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::filesystem::path& relative, const std::string& text) {
    std::filesystem::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << text;
  }
  std::filesystem::path root_;
};

// cgroup v2: the smallest quota of the cgroup and its ancestors.
TEST_F(CgroupTreeTest, V2TakesTheSmallestQuotaUpTheTree) {
  write("cpu.max", "max 100000\n");
  write("kubepods/cpu.max", "800000 100000\n");
  write("kubepods/pod1/cpu.max", "max 100000\n");
  write("kubepods/pod1/ctr/cpu.max", "200000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/kubepods/pod1/ctr\n", root_), 2.0);
  EXPECT_EQ(cgroup_cpu_limit("0::/kubepods/pod1\n", root_), 8.0);
  EXPECT_EQ(cgroup_cpu_limit("0::/\n", root_), std::nullopt);
  // A container that sees its cgroup at the root of its mount: the root's own file.
  write("cpu.max", "300000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/elsewhere/not/mounted\n", root_), 3.0);
  // A path that climbs out of the mount reads the mount only.
  EXPECT_EQ(cgroup_cpu_limit("0::/../../etc\n", root_), 3.0);
}

TEST_F(CgroupTreeTest, V1ReadsTheCpuController) {
  write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n");
  write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  const std::string cgroup =
      "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n";
  EXPECT_EQ(cgroup_cpu_limit(cgroup, root_), 1.5);
  EXPECT_EQ(cgroup_cpu_limit("12:memory:/docker/abc\n", root_), std::nullopt);
  EXPECT_EQ(cgroup_cpu_limit("garbage\n::\n7\n", root_), std::nullopt);
}

// A process allowed one CPU counts one, whatever the machine has.
TEST(CpuCount, FollowsTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const int n = usable_cpus();
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(n, 1);
  EXPECT_GE(usable_cpus(), 1);
  EXPECT_LE(usable_cpus(), CPU_COUNT(&saved));
}

}  // namespace
}  // namespace llamaserve
