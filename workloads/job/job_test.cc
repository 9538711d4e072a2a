// RunJob in-process (workloads/job/job.h): a small run on a temporary data directory, a second
// run that verifies it, and options that are refused with an error Status before anything is
// touched. The kill -9 and failover campaigns run the binary (job_torture_test.cc, bench_test.cc).
#include "workloads/job/job.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "pm/pm_test_util.h"

namespace asymnvm::job {
namespace {

JobOptions SmallJob(const std::string& dir) {
  JobOptions o;
  o.data_dir = dir + "/data";
  o.ops = 300;
  o.structures = {"hash", "stack", "pbptree"};
  o.backends = 2;
  o.pool_size = "64M";
  o.pm_mode = "flush";
  o.backend_bin = ASYMNVM_BACKEND_BIN;
  return o;
}

uint64_t Elements(const JobReport& r) {
  uint64_t n = 0;
  for (const auto& s : r.structures) n += s.elements;
  return n;
}

TEST(RunJob, SmallRun_ReportsEveryOperationAndTheNextRunVerifiesIt) {
  pm::testing::TempDir dir;
  auto first = RunJob(SmallJob(dir.path()));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->showed_runs);
  EXPECT_EQ(first->run, 0u);
  EXPECT_EQ(first->ops, 300u);
  EXPECT_EQ(first->verified_elements, 0u);
  ASSERT_EQ(first->structures.size(), 3u);
  uint64_t ops = 0;
  for (const auto& s : first->structures) {
    ops += s.ops;
    EXPECT_EQ(s.read_mismatches, 0u) << s.name;
  }
  EXPECT_EQ(ops, 300u);
  EXPECT_GT(Elements(*first), 0u);
  EXPECT_EQ(first->backends, 2u);
  EXPECT_EQ(first->pools, 2u);
  EXPECT_TRUE(first->stop_failure_text.empty()) << first->stop_failure_text;
  ASSERT_EQ(first->stop_lines.size(), 2u);
  EXPECT_EQ(first->stop_lines[0].rfind("back-end 0: ", 0), 0u) << first->stop_lines[0];

  // The second run reopens both pools and verifies every element the first left.
  auto second = RunJob(SmallJob(dir.path()));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->run, 1u);
  EXPECT_EQ(second->verified_elements, Elements(*first));
  EXPECT_EQ(second->total_read_mismatches(), 0u);
}

TEST(RunJob, WrongOptions_AreAnErrorStatusBeforeAnythingIsTouched) {
  pm::testing::TempDir dir;
  JobOptions o = SmallJob(dir.path());
  o.kill_primary_after = 10;  // without a mirror to promote
  auto r = RunJob(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_EQ(JobExitCode(r.status()), kExitUsage);

  o = SmallJob(dir.path());
  o.structures = {"hash", "heap"};
  r = RunJob(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(JobExitCode(r.status()), kExitUsage) << r.status().ToString();

  o = SmallJob(dir.path());
  o.mirrors = 1;
  o.kill_primary_after = o.ops;  // must be less than ops
  r = RunJob(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(JobExitCode(r.status()), kExitUsage) << r.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(o.data_dir));
}

TEST(RunJob, MissingBackendBinary_IsAFailureStatusNotAnExit) {
  pm::testing::TempDir dir;
  JobOptions o = SmallJob(dir.path());
  o.backend_bin = dir.path() + "/no-such-asymnvm-backend";
  auto r = RunJob(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(JobExitCode(r.status()), kExitFailure) << r.status().ToString();
}

}  // namespace
}  // namespace asymnvm::job
