// A front-end application built against the installed package only: it starts two installed
// asymnvm-backend daemons on temporary pools, opens a B+tree and a queue through the SDK on the
// first and a hash table partitioned over both (frontend::Cluster), writes and reads them back,
// reopens and reads again, and stops the daemons with SIGTERM. Exit code 0 only if every value
// round-trips and the daemons exit cleanly.
//
//   asymnvm_sdk_consumer PATH-TO-asymnvm-backend
#include <arpa/inet.h>
#include <asymnvm/cluster.h>
#include <asymnvm/frontend.h>
#include <asymnvm/session_metrics.h>
#include <asymnvm/structures/partitioned.h>
#include <asymnvm/structures/structure.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
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

// Starts `bin` on `pool`; its address (the "listening ADDR" line) in *address. false on failure.
static bool StartDaemon(const char* bin, const std::string& pool, pid_t* pid,
                        std::string* address) {
  int out[2];
  if (pipe(out) != 0) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  std::vector<std::string> args = {bin, "--pool", pool, "--size", "64M", "--log-level", "warn"};
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  if (posix_spawn(pid, bin, &fa, nullptr, av.data(), environ) != 0) {
    std::fprintf(stderr, "cannot start %s\n", bin);
    return false;
  }
  close(out[1]);
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  close(out[0]);
  if (line.rfind("listening ", 0) != 0) {
    std::fprintf(stderr, "back-end did not start: '%s'\n", line.c_str());
    return false;
  }
  *address = line.substr(10);
  return true;
}

// GET /metrics from HOST:PORT over a plain socket (as a Prometheus server would); "" on failure.
static std::string Scrape(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr) != 1) return "";
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: " + address + "\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

// An SDK application exposes its Session's counters with one call (doc/operations.md §SDK
// applications): the scrape must show exactly what Session::counters() says.
static int CheckSessionMetrics(const frontend::Session& s) {
  auto m = metrics::SessionMetrics::Start("127.0.0.1:0");
  if (!m.ok()) return Fail("session metrics", m.status());
  (*m)->Publish(s);
  const frontend::Counters c = s.counters();
  const std::string body = Scrape((*m)->address());
  const std::string id = std::to_string(s.frontend_id());
  for (auto [name, value] : {std::pair{"op_logs_total", c.op_logs},
                             {"round_trips_total", c.fabric.round_trips},
                             {"remote_reads_total", c.remote_reads}}) {
    const std::string line = std::string("asymnvm_session_") + name + "{frontend=\"" + id + "\"} " +
                             std::to_string(value) + "\n";
    if (body.find(line) == std::string::npos) {
      std::fprintf(stderr, "session metrics: '%s' not in the scrape of %s:\n%s\n", line.c_str(),
                   (*m)->address().c_str(), body.c_str());
      return 1;
    }
  }
  if (c.op_logs == 0 || c.fabric.round_trips == 0) {
    std::fprintf(stderr, "session metrics: counters still zero after the writes\n");
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PATH-TO-asymnvm-backend\n", argv[0]);
    return 2;
  }
  char dir[] = "/tmp/asymnvm-sdk-consumer-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  const std::string pools[2] = {std::string(dir) + "/pool0", std::string(dir) + "/pool1"};
  pid_t pids[2];
  std::string addresses[2];
  for (int i = 0; i < 2; i++) {
    if (!StartDaemon(argv[1], pools[i], &pids[i], &addresses[i])) return 1;
  }
  frontend::SessionOptions so;
  so.backends = {addresses[0], addresses[1]};
  so.frontend_id = 7;
  int rc = 0;
  for (int round = 0; round < 2 && rc == 0; round++) {
    auto cluster = frontend::Cluster::Open(so);
    if (!cluster.ok()) return Fail("cluster", cluster.status());
    frontend::Session* s = &(*cluster)->session(0);
    structures::Options uo;
    uo.key_size = 16;  // byte-string keys "user:<k>"
    auto users =
        structures::OpenPartitioned(**cluster, structures::Kind::kHashTable, "consumer-users", uo);
    if (!users.ok()) return Fail("open partitioned hash", users.status());
    auto tree = structures::OpenMap(*s, structures::Kind::kBPlusTree, "consumer-tree");
    auto queue = structures::OpenSequence(*s, structures::Kind::kQueue, "consumer-queue");
    if (!tree.ok()) return Fail("open tree", tree.status());
    if (!queue.ok()) return Fail("open queue", queue.status());
    if (round == 0) {
      for (uint64_t k = 0; k < 500; k++) {
        std::string v = "value-" + std::to_string(k * 7);
        Status st =
            (*tree)->Put(k, std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size()));
        if (!st.ok()) return Fail("put", st);
      }
      for (uint64_t k = 0; k < 200; k++) {
        std::string v = "user-" + std::to_string(k);
        Status st = (*users)->Put("user:" + std::to_string(k),
                                  std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size()));
        if (!st.ok()) return Fail("partitioned put", st);
      }
      Status st = (*queue)->Push(std::span(reinterpret_cast<const uint8_t*>("first"), 5));
      if (st.ok()) st = (*tree)->Sync();
      if (st.ok()) st = (*queue)->Sync();
      if (st.ok()) st = (*users)->Sync();
      if (!st.ok()) return Fail("sync", st);
      if (CheckSessionMetrics(*s) != 0) return 1;
    }
    for (uint64_t k = 0; k < 200; k++) {
      structures::Value v;
      Status st = (*users)->Get("user:" + std::to_string(k), &v);
      if (!st.ok()) return Fail("partitioned get", st);
      if (std::string(v.begin(), v.end()) != "user-" + std::to_string(k)) {
        std::fprintf(stderr, "round %d: partitioned key %llu has the wrong value\n", round,
                     static_cast<unsigned long long>(k));
        rc = 1;
      }
    }
    for (uint64_t k = 0; k < 500; k++) {
      structures::Value v;
      Status st = (*tree)->Get(k, &v);
      if (!st.ok()) return Fail("get", st);
      if (std::string(v.begin(), v.end()) != "value-" + std::to_string(k * 7)) {
        std::fprintf(stderr, "round %d: key %llu has the wrong value\n", round,
                     static_cast<unsigned long long>(k));
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
  for (int i = 0; i < 2; i++) {
    kill(pids[i], SIGTERM);
    int status = 0;
    waitpid(pids[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "back-end %d exit status %d\n", i, status);
      rc = 1;
    }
    std::remove(pools[i].c_str());
  }
  rmdir(dir);
  if (rc == 0) {
    std::printf(
        "SDK consumer: 500 B+tree keys, a queue and 200 byte-string keys of a hash partitioned "
        "over two "
        "back-ends written, reopened and read back ok; session metrics scraped\n");
  }
  return rc;
}
