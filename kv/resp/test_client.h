// TEST HELPER: a blocking RESP client over a TCP socket for the gateway's server tests. Waits for
// observable state (whole reply frames, EOF) with a generous deadline; never sleeps.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

namespace asymnvm::kv::resp::testing {

// Length of the first complete reply frame in `s`, 0 if incomplete, -1 if malformed.
inline long FrameLength(std::string_view s, size_t pos = 0) {
  if (pos >= s.size()) return 0;
  size_t nl = s.find("\r\n", pos);
  if (nl == std::string_view::npos) return 0;
  char t = s[pos];
  std::string head(s.substr(pos + 1, nl - pos - 1));
  size_t after = nl + 2;
  auto num = [&]() -> long { return head.empty() ? -2 : std::stol(head); };
  switch (t) {
    case '+':
    case '-':
    case ':':
    case '_':
    case ',':
    case '#':
    case '(':
      return static_cast<long>(after - pos);
    case '$':
    case '=':
    case '!': {
      long n = num();
      if (n < 0) return static_cast<long>(after - pos);
      if (s.size() < after + static_cast<size_t>(n) + 2) return 0;
      return static_cast<long>(after + n + 2 - pos);
    }
    case '*':
    case '~':
    case '%':
    case '>': {
      long n = num();
      if (n < 0) return static_cast<long>(after - pos);
      if (t == '%') n *= 2;
      size_t p = after;
      for (long i = 0; i < n; ++i) {
        long l = FrameLength(s, p);
        if (l <= 0) return l;
        p += static_cast<size_t>(l);
      }
      return static_cast<long>(p - pos);
    }
    default:
      return -1;
  }
}

class TestClient {
 public:
  explicit TestClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  }
  ~TestClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  bool Send(std::string_view data) {
    while (!data.empty()) {
      ssize_t w = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (w <= 0) return false;
      data.remove_prefix(static_cast<size_t>(w));
    }
    return true;
  }
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  // Reads until `n` whole replies arrived; returns them ("" entries on EOF/timeout).
  std::vector<std::string> Read(size_t n, int timeout_ms = 20000) {
    std::vector<std::string> out;
    while (out.size() < n) {
      long l = FrameLength(buf_);
      if (l < 0) break;
      if (l > 0) {
        out.push_back(buf_.substr(0, static_cast<size_t>(l)));
        buf_.erase(0, static_cast<size_t>(l));
        continue;
      }
      if (!Fill(timeout_ms)) break;
    }
    return out;
  }
  std::string Call(std::string_view inline_cmd) {
    Send(std::string(inline_cmd) + "\r\n");
    auto r = Read(1);
    return r.empty() ? "" : r[0];
  }
  // True when the server closed the connection (EOF) within the deadline.
  bool WaitClosed(int timeout_ms = 20000) {
    for (;;) {
      size_t before = buf_.size();
      if (!Fill(timeout_ms)) return eof_;
      if (buf_.size() == before) return eof_;
    }
  }

 private:
  bool Fill(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char tmp[65536];
    ssize_t r = ::recv(fd_, tmp, sizeof tmp, 0);
    if (r <= 0) {
      eof_ = true;
      return false;
    }
    buf_.append(tmp, static_cast<size_t>(r));
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buf_;
};

}  // namespace asymnvm::kv::resp::testing
