// A front-end application built against the installed package only: it starts the installed
// asymnvm-backend daemon on a temporary pool, opens a B+tree and a queue through the SDK, writes
// and reads them back, reopens the session and reads again, and stops the daemon with SIGTERM.
// Exit code 0 only if every value round-trips and the daemon exits cleanly.
//
//   asymnvm_sdk_consumer PATH-TO-asymnvm-backend
#include <asymnvm/frontend.h>
#include <asymnvm/structures/structure.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

extern char** environ;
using namespace asymnvm;

static int Fail(const char* what, const Status& st) {
  std::fprintf(stderr, "%s: %s\n", what, st.ToString().c_str());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PATH-TO-asymnvm-backend\n", argv[0]);
    return 2;
  }
  char dir[] = "/tmp/asymnvm-sdk-consumer-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  const std::string pool = std::string(dir) + "/pool";
  int out[2];
  if (pipe(out) != 0) return 1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  std::vector<std::string> args = {argv[1], "--pool", pool, "--size", "64M", "--log-level", "warn"};
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, argv[1], &fa, nullptr, av.data(), environ) != 0) {
    std::fprintf(stderr, "cannot start %s\n", argv[1]);
    return 1;
  }
  close(out[1]);
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  if (line.rfind("listening ", 0) != 0) {
    std::fprintf(stderr, "back-end did not start: '%s'\n", line.c_str());
    return 1;
  }
  const std::string address = line.substr(10);
  frontend::SessionOptions so;
  so.backends = {address};
  so.frontend_id = 7;
  int rc = 0;
  for (int round = 0; round < 2 && rc == 0; round++) {
    auto s = frontend::Session::Open(so);
    if (!s.ok()) return Fail("session", s.status());
    auto tree = structures::OpenMap(**s, structures::Kind::kBPlusTree, "consumer-tree");
    auto queue = structures::OpenSequence(**s, structures::Kind::kQueue, "consumer-queue");
    if (!tree.ok()) return Fail("open tree", tree.status());
    if (!queue.ok()) return Fail("open queue", queue.status());
    if (round == 0) {
      for (uint64_t k = 0; k < 500; k++) {
        std::string v = "value-" + std::to_string(k * 7);
        Status st = (*tree)->Put(k, std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size()));
        if (!st.ok()) return Fail("put", st);
      }
      Status st = (*queue)->Push(std::span(reinterpret_cast<const uint8_t*>("first"), 5));
      if (st.ok()) st = (*tree)->Sync();
      if (st.ok()) st = (*queue)->Sync();
      if (!st.ok()) return Fail("sync", st);
    }
    for (uint64_t k = 0; k < 500; k++) {
      structures::Value v;
      Status st = (*tree)->Get(k, &v);
      if (!st.ok()) return Fail("get", st);
      if (std::string(v.begin(), v.end()) != "value-" + std::to_string(k * 7)) {
        std::fprintf(stderr, "round %d: key %llu has the wrong value\n", round, static_cast<unsigned long long>(k));
        rc = 1;
      }
    }
    structures::Value front;
    Status st = (*queue)->Peek(&front);
    if (!st.ok() || std::string(front.begin(), front.end()) != "first") {
      std::fprintf(stderr, "round %d: queue front wrong: %s\n", round, st.ToString().c_str());
      rc = 1;
    }
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "back-end exit status %d\n", status);
    rc = 1;
  }
  std::remove(pool.c_str());
  rmdir(dir);
  if (rc == 0) std::printf("SDK consumer: 500 B+tree keys and a queue written, reopened and read back ok\n");
  return rc;
}
