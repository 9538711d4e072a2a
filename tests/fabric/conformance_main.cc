// The conformance fixture, the instances, and the peer-process helper.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <mutex>

#include "common/tls_files.h"
#include "tests/fabric/conformance.h"

extern char** environ;

namespace asymnvm::fabric::conformance {

namespace {
// The TLS instances' certificates: a CA and one node certificate, made once per process.
const std::string& TlsDir() {
  static std::string dir;
  static std::once_flag once;
  std::call_once(once, [] {
    char tmpl[] = "/tmp/asymnvm-conf-tls.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return;
    Status st = WriteThrowawayCertificates(tmpl, {"node"});
    if (st.ok()) dir = tmpl;
  });
  return dir;
}
}  // namespace

void FabricConformance::SetUp() {
  inst_ = GetParam();
  if (inst_.tls) {
    ASSERT_FALSE(TlsDir().empty()) << "could not make the test certificates";
    // Peer processes (fabric_test_peer) take TLS from the environment (fabric/tls.h).
    ::setenv("ASYMNVM_FABRIC_TLS_CERT_FILE", (TlsDir() + "/node.crt").c_str(), 1);
    ::setenv("ASYMNVM_FABRIC_TLS_KEY_FILE", (TlsDir() + "/node.key").c_str(), 1);
    ::setenv("ASYMNVM_FABRIC_TLS_CA_CERT_FILE", (TlsDir() + "/ca.crt").c_str(), 1);
  }
  const char* env = std::getenv("ASYMNVM_TEST_SEED");
  seed_ = env != nullptr ? std::strtoull(env, nullptr, 0) : std::random_device{}();
  RecordProperty("seed", std::to_string(seed_));

  auto t = OpenFabric();
  if (!t.ok() && t.status().code() == StatusCode::kNotSupported) {
    GTEST_SKIP() << inst_.provider << " provider unavailable here: " << t.status().ToString();
  }
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  target_ = std::move(t).value();
  auto i = OpenFabric();
  ASSERT_TRUE(i.ok()) << i.status().ToString();
  init_ = std::move(i).value();
  const auto transports = target_->capabilities().transports;
  if (std::find(transports.begin(), transports.end(), inst_.transport) == transports.end()) {
    GTEST_SKIP() << inst_.provider << " provider does not offer transport " << inst_.transport;
  }
  auto tpd = target_->AllocPd();
  ASSERT_TRUE(tpd.ok()) << tpd.status().ToString();
  target_pd_ = std::move(tpd).value();
  auto ipd = init_->AllocPd();
  ASSERT_TRUE(ipd.ok()) << ipd.status().ToString();
  init_pd_ = std::move(ipd).value();
  auto icq = init_->CreateCq({});
  ASSERT_TRUE(icq.ok()) << icq.status().ToString();
  init_cq_ = std::move(icq).value();
  auto tcq = target_->CreateCq({});
  ASSERT_TRUE(tcq.ok()) << tcq.status().ToString();
  target_cq_ = std::move(tcq).value();
  auto l = target_->Listen(target_pd_.get(), NewAddress());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  listener_ = std::move(l).value();
}

void FabricConformance::TearDown() {
  if (HasFailure()) {
    std::fprintf(stderr, "[ seed ] %s: rerun with ASYMNVM_TEST_SEED=%llu\n",
                 InstanceName({inst_, 0}).c_str(), static_cast<unsigned long long>(seed_));
  }
  listener_.reset();
  init_cq_.reset();
  target_cq_.reset();
  init_pd_.reset();
  target_pd_.reset();
  init_.reset();
  target_.reset();
  if (inst_.tls) {
    ::unsetenv("ASYMNVM_FABRIC_TLS_CERT_FILE");
    ::unsetenv("ASYMNVM_FABRIC_TLS_KEY_FILE");
    ::unsetenv("ASYMNVM_FABRIC_TLS_CA_CERT_FILE");
  }
}

Result<std::unique_ptr<Fabric>> FabricConformance::OpenFabric(const std::string& secret) {
  FabricOptions o;
  o.provider = inst_.provider;
  o.cluster_secret = secret;
  if (inst_.tls) {
    o.tls_cert_file = TlsDir() + "/node.crt";
    o.tls_key_file = TlsDir() + "/node.key";
    o.tls_ca_cert_file = TlsDir() + "/ca.crt";
  }
  return Fabric::Open(o);
}

std::string FabricConformance::NewAddress() {
  static std::atomic<int> counter{0};
  const std::string unique = std::to_string(getpid()) + "-" + std::to_string(counter++);
  if (inst_.transport == "tcp") return "tcp://127.0.0.1:0";
  if (inst_.transport == "unix") return "unix:///tmp/asymnvm-conf-" + unique + ".sock";
  return "inproc://asymnvm-conf-" + unique;
}

Pair FabricConformance::ConnectPair(const ConnectionOptions& init_opts,
                                    const ConnectionOptions& target_opts) {
  Pair p;
  auto accepted = std::async(std::launch::async,
                             [this, target_opts] { return listener_->Accept(target_opts); });
  auto c = init_->Connect(init_pd_.get(), listener_->address(), init_opts);
  auto a = accepted.get();
  EXPECT_TRUE(c.ok()) << "Connect: " << c.status().ToString();
  EXPECT_TRUE(a.ok()) << "Accept: " << a.status().ToString();
  if (c.ok() && a.ok()) {
    p.init = std::move(c).value();
    p.target = std::move(a).value();
  }
  return p;
}

std::unique_ptr<GuardedRegion> FabricConformance::Region(ProtectionDomain* pd, size_t len,
                                                         uint32_t access, uint8_t fill) {
  auto r = std::make_unique<GuardedRegion>();
  // Shareable memory (a memfd), so the shm provider's direct path serves it; plain memory to the
  // other providers.
  auto shared = SharedMemory::Allocate(len + 2 * GuardedRegion::kGuard + 64);
  EXPECT_TRUE(shared.ok()) << shared.status().ToString();
  if (!shared.ok()) return r;
  r->shared = std::move(shared).value();
  r->storage = std::span<uint8_t>(r->shared->data(), r->shared->size());
  std::memset(r->storage.data(), kGuardByte, r->storage.size());
  uint8_t* p = r->storage.data() + GuardedRegion::kGuard;
  p += (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
  r->data = p;
  r->len = len;
  std::memset(p, fill, len);
  MemoryRegionOptions mo;
  mo.access = access;
  auto mr = pd->RegisterMemory(p, len, mo);
  EXPECT_TRUE(mr.ok()) << "RegisterMemory: " << mr.status().ToString();
  if (mr.ok()) r->mr = std::move(mr).value();
  return r;
}

std::vector<Completion> FabricConformance::WaitFor(CompletionQueue* cq, size_t n,
                                                   milliseconds timeout) {
  std::vector<Completion> got;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<Completion> buf(64);
  while (got.size() < n) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    size_t want = std::min(buf.size(), n - got.size());
    auto left = std::chrono::duration_cast<microseconds>(deadline - now);
    auto r =
        cq->Wait(std::span<Completion>(buf.data(), want), std::min(left, microseconds(100000)));
    if (!r.ok()) {
      ADD_FAILURE() << "CQ Wait: " << r.status().ToString();
      break;
    }
    for (size_t i = 0; i < *r; i++) got.push_back(buf[i]);
  }
  if (got.size() < n) {
    ADD_FAILURE() << "timed out after " << timeout.count() << " ms with " << got.size() << " of "
                  << n << " completions";
  }
  return got;
}

void FabricConformance::ExpectQuiet(CompletionQueue* cq, milliseconds grace) {
  Completion c;
  auto r = cq->Wait(std::span<Completion>(&c, 1), grace);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 0u) << "unexpected completion: wr_id " << c.wr_id << " " << OpcodeName(c.opcode)
                    << " " << CompletionStatusName(c.status);
}

WorkRequest FabricConformance::Write(uint64_t wr_id, const GuardedRegion& local, size_t loff,
                                     const GuardedRegion& remote, size_t roff, uint32_t len,
                                     bool signaled) {
  WorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = Opcode::kWrite;
  wr.signaled = signaled;
  wr.local_addr = local.data + loff;
  wr.length = len;
  wr.local_mr = local.mr.get();
  wr.remote_addr = remote.raddr(roff);
  wr.rkey = remote.rkey();
  return wr;
}

WorkRequest FabricConformance::Read(uint64_t wr_id, const GuardedRegion& local, size_t loff,
                                    const GuardedRegion& remote, size_t roff, uint32_t len) {
  WorkRequest wr = Write(wr_id, local, loff, remote, roff, len);
  wr.opcode = Opcode::kRead;
  return wr;
}

WorkRequest FabricConformance::Cas(uint64_t wr_id, const GuardedRegion* local, size_t loff,
                                   const GuardedRegion& remote, size_t roff, uint64_t expect,
                                   uint64_t swap) {
  WorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = Opcode::kCompareSwap;
  wr.local_addr = local ? local->data + loff : nullptr;
  wr.length = 8;
  wr.local_mr = local ? local->mr.get() : nullptr;
  wr.remote_addr = remote.raddr(roff);
  wr.rkey = remote.rkey();
  wr.compare_add = expect;
  wr.swap = swap;
  return wr;
}

WorkRequest FabricConformance::Faa(uint64_t wr_id, const GuardedRegion* local, size_t loff,
                                   const GuardedRegion& remote, size_t roff, uint64_t add) {
  WorkRequest wr = Cas(wr_id, local, loff, remote, roff, add, 0);
  wr.opcode = Opcode::kFetchAdd;
  return wr;
}

WorkRequest FabricConformance::Send(uint64_t wr_id, const GuardedRegion& local, size_t loff,
                                    uint32_t len) {
  WorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = Opcode::kSend;
  wr.local_addr = local.data + loff;
  wr.length = len;
  wr.local_mr = local.mr.get();
  return wr;
}

WorkRequest FabricConformance::Flush(uint64_t wr_id, const GuardedRegion& remote) {
  WorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = Opcode::kFlush;
  wr.remote_addr = remote.raddr();
  wr.rkey = remote.rkey();
  return wr;
}

// ---------------------------------------------------------------------------------------------

PeerProcess::~PeerProcess() {
  Kill();
  if (stdout_fd >= 0) close(stdout_fd);
}

void PeerProcess::Kill() {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  pid = -1;
}

Status PeerProcess::Spawn(const std::vector<std::string>& args,
                          const std::vector<std::string>& extra_env) {
#ifndef ASYMNVM_FABRIC_TEST_PEER
  return Status::NotSupported("fabric_test_peer path not compiled in");
#else
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::IoError("pipe", errno);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  std::string path = ASYMNVM_FABRIC_TEST_PEER;
  std::vector<std::string> all = {path};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store(extra_env);
  for (char** e = environ; *e != nullptr; e++) {
    if (std::strncmp(*e, "ASYMNVM_CRASH_AT=", 17) != 0) env_store.push_back(*e);
  }
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  int rc = posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  stdout_fd = fds[0];
  if (rc != 0) {
    pid = -1;
    return Status::IoError("posix_spawn " + path, rc);
  }
  return Status::Ok();
#endif
}

Result<std::string> PeerProcess::ReadLine(milliseconds timeout) {
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (line.find('\n') == std::string::npos) {
    auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Status::TimedOut("peer did not report in time");
    pollfd p{stdout_fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char c;
    ssize_t n = read(stdout_fd, &c, 1);  // byte by byte: nothing after the line is consumed
    if (n <= 0) return Status::ConnectionError("peer exited before reporting");
    line.push_back(c);
  }
  line.pop_back();
  return line;
}

Status PeerProcess::Start(const std::string& provider, const std::string& listen) {
  ASYMNVM_RETURN_IF_ERROR(Spawn({"--provider", provider, "--listen", listen}, {}));
  ASYMNVM_ASSIGN_OR_RETURN(std::string line, ReadLine(kWait));
  // "READY <address> <64 hex chars>"
  char addr[256], hex[80];
  if (std::sscanf(line.c_str(), "READY %255s %79s", addr, hex) != 2 || std::strlen(hex) != 64) {
    return Status::ProtocolError("bad peer line: " + line);
  }
  address = addr;
  uint8_t raw[RegionDescriptor::kEncodedSize];
  for (size_t i = 0; i < sizeof(raw); i++) {
    raw[i] = static_cast<uint8_t>(std::strtoul(std::string(hex + 2 * i, 2).c_str(), nullptr, 16));
  }
  auto d = RegionDescriptor::Decode(raw, sizeof(raw));
  if (!d.ok()) return d.status();
  region = *d;
  return Status::Ok();
}

Status PeerProcess::StartInitiator(const std::string& provider, const std::string& target,
                                   const RegionDescriptor& target_region,
                                   const std::string& crash_at) {
  uint8_t raw[RegionDescriptor::kEncodedSize];
  target_region.EncodeTo(raw);
  std::string hex;
  char two[3];
  for (uint8_t b : raw) {
    std::snprintf(two, sizeof(two), "%02x", b);
    hex += two;
  }
  ASYMNVM_RETURN_IF_ERROR(Spawn({"--provider", provider, "--connect", target, "--region", hex},
                                {"ASYMNVM_CRASH_AT=" + crash_at}));
  ASYMNVM_ASSIGN_OR_RETURN(std::string line, ReadLine(kWait));
  if (line != "CONNECTED") return Status::ProtocolError("bad peer line: " + line);
  return Status::Ok();
}

int PeerProcess::WaitExit(milliseconds timeout) {
  // The peer's stdout reaches EOF when it dies; poll on it instead of sleeping.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return -1;
    pollfd p{stdout_fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[256];
    if (read(stdout_fd, buf, sizeof(buf)) <= 0) break;
  }
  int st = 0;
  waitpid(pid, &st, 0);
  pid = -1;
  return st;
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricConformance,
                         ::testing::Values(Instance{"soft", "tcp"}, Instance{"soft", "unix"},
                                           Instance{"soft", "inproc"}, Instance{"shm", "unix"},
                                           Instance{"shm", "tcp"}, Instance{"verbs", "tcp"},
                                           Instance{"soft", "tcp", true},
                                           Instance{"shm", "tcp", true}),
                         InstanceName);

}  // namespace asymnvm::fabric::conformance
