#include "workloads/bench/floor.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace asymnvm::bench {
namespace {

constexpr uint64_t kWarmupOps = 200;

bool WriteAll(int fd, const void* buf, size_t len) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* buf, size_t len) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// Creates a connected (client, server) pair over tcp or unix.
Status SocketPair(const std::string& transport, Fd* client, Fd* server) {
  if (transport == "tcp") {
    Fd lfd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (lfd.get() < 0) return Status::IoError("floor/tcp: socket", errno);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(lfd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(lfd.get(), 1) != 0) {
      return Status::IoError("floor/tcp: bind/listen", errno);
    }
    socklen_t alen = sizeof(addr);
    if (::getsockname(lfd.get(), reinterpret_cast<sockaddr*>(&addr), &alen) != 0) {
      return Status::IoError("floor/tcp: getsockname", errno);
    }
    client->reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (client->get() < 0 ||
        ::connect(client->get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return Status::IoError("floor/tcp: connect", errno);
    }
    server->reset(::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (server->get() < 0) return Status::IoError("floor/tcp: accept", errno);
    int one = 1;
    ::setsockopt(client->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(server->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return Status::Ok();
  }
  if (transport == "unix") {
    Fd lfd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (lfd.get() < 0) return Status::IoError("floor/unix: socket", errno);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string path = "/tmp/asymnvm-bench-floor-" + std::to_string(::getpid()) + ".sock";
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    ::unlink(path.c_str());
    if (::bind(lfd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(lfd.get(), 1) != 0) {
      return Status::IoError("floor/unix: bind/listen " + path, errno);
    }
    client->reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (client->get() < 0 ||
        ::connect(client->get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::unlink(path.c_str());
      return Status::IoError("floor/unix: connect", errno);
    }
    server->reset(::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ::unlink(path.c_str());
    if (server->get() < 0) return Status::IoError("floor/unix: accept", errno);
    return Status::Ok();
  }
  return Status::InvalidArgument("floor: unknown transport '" + transport + "'");
}

Result<Measurement> SocketFloor(const std::string& transport, uint32_t size, const Budget& budget) {
  Fd client, server;
  ASYMNVM_RETURN_IF_ERROR(SocketPair(transport, &client, &server));
  std::thread echo([fd = server.get(), size] {
    std::vector<char> buf(size);
    char reply[kFloorReplyBytes] = {};
    while (ReadAll(fd, buf.data(), size)) {
      std::memcpy(reply, buf.data(), std::min<size_t>(size, sizeof(reply)));
      if (!WriteAll(fd, reply, sizeof(reply))) break;
    }
  });
  std::vector<char> out(size, 'f');
  char reply[kFloorReplyBytes];
  Measurement m;
  bool ok = true;
  for (uint64_t i = 0; i < kWarmupOps && ok; i++) {
    ok = WriteAll(client.get(), out.data(), size) && ReadAll(client.get(), reply, sizeof(reply));
  }
  Clock::time_point start = Clock::now();
  Clock::time_point deadline = start + budget.duration;
  Clock::time_point now = start;
  while (ok && now < deadline && (budget.max_ops == 0 || m.ops < budget.max_ops)) {
    Clock::time_point t0 = Clock::now();
    ok = WriteAll(client.get(), out.data(), size) && ReadAll(client.get(), reply, sizeof(reply));
    now = Clock::now();
    m.latency.Add(ElapsedNs(t0, now));
    m.ops++;
  }
  m.seconds = std::chrono::duration<double>(now - start).count();
  ::shutdown(client.get(), SHUT_RDWR);
  echo.join();
  if (!ok) return Status::IoError("floor/" + transport + ": ping-pong failed", errno);
  return m;
}

Result<Measurement> InprocFloor(uint32_t size, const Budget& budget) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    int turn = 0;  // 0: client's, 1: server's
    bool stop = false;
    std::vector<char> buf;
  } sh;
  sh.buf.resize(size);
  std::thread server([&sh, size] {
    std::vector<char> local(size);
    std::unique_lock<std::mutex> lk(sh.mu);
    for (;;) {
      sh.cv.wait(lk, [&] { return sh.turn == 1 || sh.stop; });
      if (sh.stop) return;
      std::memcpy(local.data(), sh.buf.data(), size);
      std::memcpy(sh.buf.data(), local.data(), std::min<size_t>(size, kFloorReplyBytes));
      sh.turn = 0;
      sh.cv.notify_all();
    }
  });
  std::vector<char> out(size, 'f');
  char reply[kFloorReplyBytes];
  auto one = [&] {
    std::unique_lock<std::mutex> lk(sh.mu);
    std::memcpy(sh.buf.data(), out.data(), size);
    sh.turn = 1;
    sh.cv.notify_all();
    sh.cv.wait(lk, [&] { return sh.turn == 0; });
    std::memcpy(reply, sh.buf.data(), std::min<size_t>(size, sizeof(reply)));
  };
  for (uint64_t i = 0; i < kWarmupOps; i++) one();
  Measurement m;
  Clock::time_point start = Clock::now();
  Clock::time_point deadline = start + budget.duration;
  Clock::time_point now = start;
  while (now < deadline && (budget.max_ops == 0 || m.ops < budget.max_ops)) {
    Clock::time_point t0 = Clock::now();
    one();
    now = Clock::now();
    m.latency.Add(ElapsedNs(t0, now));
    m.ops++;
  }
  m.seconds = std::chrono::duration<double>(now - start).count();
  {
    std::lock_guard<std::mutex> lk(sh.mu);
    sh.stop = true;
  }
  sh.cv.notify_all();
  server.join();
  return m;
}

}  // namespace

Result<Measurement> RunFloor(const std::string& transport, uint32_t size, const Budget& budget) {
  if (size == 0) return Status::InvalidArgument("floor: size must be > 0");
  if (transport == "inproc") return InprocFloor(size, budget);
  return SocketFloor(transport, size, budget);
}

}  // namespace asymnvm::bench
