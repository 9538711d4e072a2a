// Randomized kill -9 torture of the main job, in the spirit of RocksDB's crash test: many rounds
// on ONE data directory; each round starts asymnvm-job and, at a random moment (start-up, replay,
// verification of earlier runs, the workload, shutdown), SIGKILLs a random victim: the job itself
// or one of its two asymnvm-backend daemons. Every round starts by verifying everything earlier
// rounds acknowledged (the job exits 3 when the data differs), and a last clean round must verify
// it all. Exit 3 anywhere fails the test at once, naming the seed and the round.
//
//   ASYMNVM_TORTURE_ROUNDS  rounds (default 6: the default suite; the `long` label runs 500)
//   ASYMNVM_TORTURE_SEED    seed (default 1; printed, so a failing series can be re-run)
//   ASYMNVM_TORTURE_JOB_BIN the asymnvm-job binary (default: the build tree's)
//   ASYMNVM_TORTURE_KEEP    keep the data directory of a failed series in this directory
//   ASYMNVM_TORTURE_PM_MODE the back-ends' --pm-mode (default flush; msync = the disk-durable
//                           redo-log mode, the job's default on a disk)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// ASYMNVM_TORTURE_JOB_BIN overrides the job binary (a long series runs on a copy while the build
// tree changes; the job finds asymnvm-backend next to itself).
const std::string kJob = std::getenv("ASYMNVM_TORTURE_JOB_BIN") != nullptr
                             ? std::getenv("ASYMNVM_TORTURE_JOB_BIN")
                             : ASYMNVM_JOB_BIN;

uint64_t EnvU64(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : def;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The pid the job printed for back-end `i` ("back-end I: pid P serving at ..."), or -1.
pid_t BackendPid(const std::string& out, int i) {
  const std::string key = "back-end " + std::to_string(i) + ": pid ";
  const size_t at = out.find(key);
  if (at == std::string::npos) return -1;
  return static_cast<pid_t>(std::strtol(out.c_str() + at + key.size(), nullptr, 10));
}

bool Locked(const std::string& pool) {
  const int fd = open(pool.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0;
  close(fd);
  return held;
}

struct Job {
  pid_t pid = -1;
  std::string log;
};

Job Spawn(const std::string& args, const std::string& log) {
  Job j;
  j.log = log;
  j.pid = fork();
  if (j.pid == 0) {
    const std::string cmd = "exec " + kJob + " " + args + " >" + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return j;
}

// Waits for the job to exit (up to `limit`); returns its wait status, or -1 (then it was killed).
int Reap(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (Clock::now() < deadline) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

std::string Describe(int status) {
  if (status == -1) return "hung (killed by the test)";
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exit " + std::to_string(WEXITSTATUS(status));
}

class JobTorture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/asymnvm-torture-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    const char* keep = std::getenv("ASYMNVM_TORTURE_KEEP");
    if (HasFailure() && keep != nullptr && *keep != '\0') {
      std::error_code ec;
      fs::create_directories(keep, ec);
      fs::rename(dir_, fs::path(keep) / fs::path(dir_).filename(), ec);
      std::printf("torture: data directory kept in %s\n", keep);
      return;
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void WaitPoolsFree(const std::string& data) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while ((Locked(data + "/asymnvm.pool") || Locked(data + "/asymnvm-1.pool")) &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_FALSE(Locked(data + "/asymnvm.pool") || Locked(data + "/asymnvm-1.pool"))
        << "a back-end of a dead job kept its pool locked for 60 s";
  }
  std::string dir_;
};

TEST_F(JobTorture, RandomKillsNeverLoseAcknowledgedData) {
  const uint64_t rounds = EnvU64("ASYMNVM_TORTURE_ROUNDS", 6);
  const uint64_t seed = EnvU64("ASYMNVM_TORTURE_SEED", 1);
  std::printf(
      "torture: seed %llu, %llu rounds (ASYMNVM_TORTURE_SEED / ASYMNVM_TORTURE_ROUNDS), pm mode "
      "%s\n",
      static_cast<unsigned long long>(seed), static_cast<unsigned long long>(rounds),
      std::getenv("ASYMNVM_TORTURE_PM_MODE") ? std::getenv("ASYMNVM_TORTURE_PM_MODE") : "flush");
  std::mt19937_64 rng(seed);
  const std::string data = dir_ + "/data";
  const char* mode_env = std::getenv("ASYMNVM_TORTURE_PM_MODE");
  const std::string mode = mode_env != nullptr && *mode_env != '\0' ? mode_env : "flush";
  const std::string base = "--data-dir " + data + " --pool-size 256M --pm-mode " + mode;
  int verified_rounds = 0, kills[3] = {0, 0, 0}, finished_before_kill = 0;
  for (uint64_t round = 0; round < rounds; round++) {
    const uint64_t ops = 200 + rng() % 1800;
    // 0 the job, 1 back-end 0, 2 back-end 1; one round in eight kills nothing (a run completes).
    const int victim = static_cast<int>(rng() % 3);
    const bool spare = rng() % 8 == 0;
    // Start-up, replay and verification take about a second here; the workload about as long.
    const auto delay = std::chrono::microseconds(rng() % 4000000);
    const std::string log = dir_ + "/round-" + std::to_string(round) + ".log";
    Job j = Spawn(base + " --ops " + std::to_string(ops), log);
    ASSERT_GT(j.pid, 0);
    const auto start = Clock::now();
    int status = 0;
    bool exited = false;
    if (spare) {
      status = Reap(j.pid, std::chrono::seconds(300));
      exited = true;
    }
    while (!exited && Clock::now() - start < delay) {  // a random moment, unless the job ends first
      if (waitpid(j.pid, &status, WNOHANG) == j.pid) {
        exited = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::string what = spare ? "nothing (a spared round)" : "nothing (the job ended first)";
    if (!exited) {
      if (victim == 0) {
        kill(j.pid, SIGKILL);
        what = "the job";
      } else {
        const pid_t be = BackendPid(ReadFile(log), victim - 1);
        if (be > 0 && kill(be, SIGKILL) == 0) {
          what = "back-end " + std::to_string(victim - 1);
        } else {
          kill(j.pid, SIGKILL);  // the back-end is not up yet: start-up is the job's moment
          what = "the job (back-end " + std::to_string(victim - 1) + " not started yet)";
        }
      }
      status = Reap(j.pid, std::chrono::seconds(180));
    }
    const std::string out = ReadFile(log);
    const std::string where =
        "seed " + std::to_string(seed) + " round " + std::to_string(round) + ": killed " + what +
        " after " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(delay).count()) +
        " ms; job " + Describe(status) + "\n" + out;
    ASSERT_NE(status, -1) << where;
    if (WIFEXITED(status)) {
      // 3 = the data differs from what was acknowledged: the one outcome never allowed.
      ASSERT_NE(WEXITSTATUS(status), 3) << where;
      // A dead back-end is "interrupted" (4), never a generic failure; a clean end is 0.
      ASSERT_TRUE(WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 4) << where;
      if (WEXITSTATUS(status) == 4) {
        EXPECT_NE(out.find("run the job again"), std::string::npos) << where;
      }
    } else {
      // Only the job itself may die of a signal, and only of ours.
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
                  what.rfind("the job", 0) == 0)
          << where;
    }
    if (spare) {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << where;
    }
    if (exited) finished_before_kill++;
    if (!exited) kills[victim]++;
    if (out.find("verified ") != std::string::npos) verified_rounds++;
    std::printf(
        "torture: round %llu: %llu ops, killed %s at %lld ms: %s%s\n",
        static_cast<unsigned long long>(round), static_cast<unsigned long long>(ops), what.c_str(),
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(delay).count()),
        Describe(status).c_str(), out.find("verified ") != std::string::npos ? ", verified" : "");
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      std::istringstream lines(out);
      for (std::string l; std::getline(lines, l);) {
        if (l.rfind("asymnvm-job: ", 0) == 0 && l.find("reopening") == std::string::npos &&
            l.find("creating") == std::string::npos) {
          std::printf("torture:   %s\n", l.c_str());
        }
      }
    }
    std::fflush(stdout);
    std::error_code ec;
    fs::remove(log, ec);
    WaitPoolsFree(data);
    if (HasFatalFailure()) return;
  }
  // The last word: a clean run verifies everything every round acknowledged.
  Job j = Spawn(base + " --ops 100", dir_ + "/final.log");
  const int status = Reap(j.pid, std::chrono::seconds(300));
  const std::string out = ReadFile(dir_ + "/final.log");
  ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "seed " << seed << ": final clean run: " << Describe(status) << "\n"
      << out;
  EXPECT_NE(out.find("verified "), std::string::npos) << out;
  std::printf(
      "torture: seed %llu: %llu rounds (kills: job %d, back-end 0 %d, back-end 1 %d; %d ended "
      "before the kill), %d rounds verified earlier data, final run verified: 0 failures\n",
      static_cast<unsigned long long>(seed), static_cast<unsigned long long>(rounds), kills[0],
      kills[1], kills[2], finished_before_kill, verified_rounds);
}

}  // namespace
