// Test helpers: hostile and slow peers of a listener (doc/fabric.md §Handshake tests).
//
//   PeerFlood   n connections that never speak (silent) or send junk (garbage), held open.
//   StallProxy  a one-connection TCP proxy that stalls the client → server direction once, after
//               the first `stall_after` bytes (the handshake HELLO is 24 bytes), to simulate a
//               client that is slow mid-handshake.
// Header-only; tests only.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "asymnvm/status.h"
#include "fabric/bootstrap.h"

namespace asymnvm::fabric::testing {

class PeerFlood {
 public:
  PeerFlood() = default;
  PeerFlood(const PeerFlood&) = delete;
  PeerFlood& operator=(const PeerFlood&) = delete;
  ~PeerFlood() {
    for (int fd : fds_) ::close(fd);
  }
  // Opens n connections to `address`; `garbage` sends 64 junk bytes on each. Fails on the first
  // connection that cannot be opened within `timeout`.
  Status Open(const std::string& address, size_t n, bool garbage,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
    auto ep = ParseAddress(address);
    if (!ep.ok()) return ep.status();
    for (size_t i = 0; i < n; i++) {
      auto fd = ConnectSocket(*ep, timeout);
      if (!fd.ok()) return fd.status().WithContext("flood connection " + std::to_string(i));
      fds_.push_back(*fd);
      if (garbage) {
        uint8_t junk[64];
        for (size_t j = 0; j < sizeof junk; j++) junk[j] = static_cast<uint8_t>(0xA5 ^ (i + j));
        Status st = WriteFull(*fd, junk, sizeof junk, std::chrono::steady_clock::now() + timeout);
        if (!st.ok()) return st.WithContext("flood connection " + std::to_string(i));
      }
    }
    return Status::Ok();
  }
  size_t size() const { return fds_.size(); }

 private:
  std::vector<int> fds_;
};

class StallProxy {
 public:
  StallProxy(std::string target, size_t stall_after, std::chrono::milliseconds stall)
      : target_(std::move(target)), stall_after_(stall_after), stall_(stall) {}
  ~StallProxy() {
    if (stop_fd_ >= 0) {
      uint64_t one = 1;
      (void)!::write(stop_fd_, &one, sizeof one);
    }
    if (thread_.joinable()) thread_.join();
    for (int fd : {listen_fd_, stop_fd_}) {
      if (fd >= 0) ::close(fd);
    }
  }
  Status Start() {
    auto ep = ParseAddress("tcp://127.0.0.1:0");
    Endpoint bound;
    auto l = ListenSocket(*ep, &bound);
    if (!l.ok()) return l.status();
    listen_fd_ = *l;
    address_ = FormatAddress(bound);
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    thread_ = std::thread([this] { Run(); });
    return Status::Ok();
  }
  const std::string& address() const { return address_; }
  bool stalled() const { return stalled_; }

 private:
  void Run() {
    pollfd lp[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(lp, 2, 30000) <= 0 || (lp[1].revents & POLLIN)) return;
    int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    auto ep = ParseAddress(target_);
    auto s = ConnectSocket(*ep, std::chrono::milliseconds(10000));
    if (!s.ok()) {
      ::close(c);
      return;
    }
    size_t forwarded = 0;
    uint8_t buf[16384];
    for (;;) {
      pollfd p[3] = {{c, POLLIN, 0}, {*s, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      if (::poll(p, 3, -1) < 0) break;
      if (p[2].revents & POLLIN) break;
      bool done = false;
      for (int dir = 0; dir < 2 && !done; dir++) {
        if (p[dir].revents == 0) continue;
        int from = dir == 0 ? c : *s, to = dir == 0 ? *s : c;
        size_t cap = sizeof buf;
        if (dir == 0 && !stalled_ && forwarded < stall_after_) cap = stall_after_ - forwarded;
        ssize_t r = ::recv(from, buf, cap, 0);
        if (r <= 0) {
          done = true;
          break;
        }
        if (!WriteFull(to, buf, static_cast<size_t>(r),
                       std::chrono::steady_clock::now() + std::chrono::seconds(10))
                 .ok()) {
          done = true;
          break;
        }
        if (dir == 0) {
          forwarded += static_cast<size_t>(r);
          if (!stalled_ && forwarded >= stall_after_) {
            std::this_thread::sleep_for(stall_);  // the simulated slow peer
            stalled_ = true;
          }
        }
      }
      if (done) break;
    }
    ::close(c);
    ::close(*s);
  }

  std::string target_;
  size_t stall_after_;
  std::chrono::milliseconds stall_;
  int listen_fd_ = -1, stop_fd_ = -1;
  std::string address_;
  std::thread thread_;
  std::atomic<bool> stalled_{false};
};

}  // namespace asymnvm::fabric::testing
