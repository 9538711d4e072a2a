// libFuzzer target: the bootstrap channel (fabric/bootstrap.h, doc/fabric.md §Handshake) —
// endpoint addresses, and the authenticated handshake as each side parses its peer's bytes: the
// blocking server (verbs provider), the HandshakeAcceptor state machine (soft provider listeners)
// and the client, each against a peer played by this target from the input over a local socket.
// Input: byte 0 = mode (0 address, 1 server, 2 acceptor, 3 client); byte 1 = flags (0x01 honest
// hello, 0x02 honest proof: the HMAC over the real nonces, 0x04 honest blob length); then u8
// verdict (mode 3), u32 blob length, the hello/proof bytes when not honest, and the blob.
// Properties: an address that parses formats to one that parses to the same endpoint; a server
// side accepts exactly when the peer's hello is well formed, its proof verifies and its blob
// length is within the bytes sent and kMaxBlob, and then hands over exactly those blob bytes; the
// client likewise, and only after an accepting verdict; every proof a side sends verifies; no side
// hangs on a peer that stops sending (the peer half-closes: every wait ends at EOF).
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/coding.h"
#include "fabric/bootstrap.h"
#include "tests/fuzz/fuzz_util.h"

using namespace asymnvm;
using namespace asymnvm::fabric;

namespace {

constexpr char kSecret[] = "fuzz-cluster-secret";
constexpr uint32_t kMagic = 0x4D564E41;
constexpr size_t kNonce = 16, kMac = 32, kHello = 24;
constexpr auto kTimeout = std::chrono::milliseconds(3000);
const std::vector<uint8_t> kServerBlob = {'s', 'e', 'r', 'v', 'e', 'r'};
const std::vector<uint8_t> kClientBlob = {'c', 'l', 'i', 'e', 'n', 't'};

std::vector<uint8_t> Mac(uint8_t role, const uint8_t* nonce_c, const uint8_t* nonce_s,
                         std::span<const uint8_t> blob) {
  std::vector<uint8_t> msg(1 + 2 * kNonce + blob.size());
  msg[0] = role;
  std::memcpy(msg.data() + 1, nonce_c, kNonce);
  std::memcpy(msg.data() + 1 + kNonce, nonce_s, kNonce);
  if (!blob.empty()) std::memcpy(msg.data() + 1 + 2 * kNonce, blob.data(), blob.size());
  std::vector<uint8_t> out(kMac);
  unsigned int len = kMac;
  HMAC(EVP_sha256(), kSecret, static_cast<int>(sizeof kSecret - 1), msg.data(), msg.size(),
       out.data(), &len);
  return out;
}

bool HelloValid(const uint8_t* h) {
  return GetLe32(h) == kMagic && GetLe16(h + 4) == 1 && GetLe16(h + 6) == 0;
}

// The peer's side of the socket: whole reads and writes within the deadline, false on EOF/error.
bool ReadAll(int fd, uint8_t* buf, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  return ReadFull(fd, buf, n, deadline).ok();
}
bool WriteAll(int fd, const std::vector<uint8_t>& b) {
  if (b.empty()) return true;
  return WriteFull(fd, b.data(), b.size(), std::chrono::steady_clock::now() + kTimeout).ok();
}

struct Plan {
  uint8_t flags = 0;
  uint8_t verdict = 0;
  uint32_t len_field = 0;
  std::vector<uint8_t> raw_hello, raw_mac, blob;
  uint32_t len() const { return (flags & 4) ? static_cast<uint32_t>(blob.size()) : len_field; }
};

Plan ReadPlan(fuzz::Input& in) {
  Plan p;
  p.flags = in.U8();
  p.verdict = in.U8();
  p.len_field = in.U32();
  if (!(p.flags & 1)) p.raw_hello = in.Bytes(kHello);
  if (!(p.flags & 2)) p.raw_mac = in.Bytes(kMac);
  p.raw_hello.resize(kHello, 0);
  p.raw_mac.resize(kMac, 0);
  p.blob = in.Rest();
  return p;
}

std::vector<uint8_t> Hello(const Plan& p, uint8_t nonce_seed) {
  if (!(p.flags & 1)) return p.raw_hello;
  std::vector<uint8_t> h(kHello, 0);
  PutLe32(h.data(), kMagic);
  PutLe16(h.data() + 4, 1);
  for (size_t i = 0; i < kNonce; i++) h[8 + i] = static_cast<uint8_t>(nonce_seed + i);
  return h;
}

// Plays a client against a server side on `fd`; returns whether that side should accept and
// the blob it should hand over.
bool PlayClient(int fd, const Plan& p, std::vector<uint8_t>* expect_blob) {
  const auto hello = Hello(p, 1);
  if (!WriteAll(fd, hello)) return false;
  uint8_t challenge[kHello + kMac];
  if (!ReadAll(fd, challenge, sizeof challenge)) {
    ::shutdown(fd, SHUT_WR);
    ASYMNVM_FUZZ_CHECK(!HelloValid(hello.data()));  // a server answers every well-formed hello
    return false;
  }
  ASYMNVM_FUZZ_CHECK(HelloValid(hello.data()) && HelloValid(challenge));
  // The server's proof verifies.
  ASYMNVM_FUZZ_CHECK(Mac('S', hello.data() + 8, challenge + 8, {}) ==
                     std::vector<uint8_t>(challenge + kHello, challenge + kHello + kMac));
  const uint32_t len = p.len();
  const size_t signed_len = std::min<size_t>(len, p.blob.size());
  const auto honest =
      Mac('C', hello.data() + 8, challenge + 8, std::span<const uint8_t>(p.blob).first(signed_len));
  const auto mac = (p.flags & 2) ? honest : p.raw_mac;
  std::vector<uint8_t> msg = mac;
  msg.resize(kMac + 4);
  PutLe32(msg.data() + kMac, len);
  msg.insert(msg.end(), p.blob.begin(), p.blob.end());
  (void)WriteAll(fd, msg);
  ::shutdown(fd, SHUT_WR);
  const bool ok = mac == honest && len <= p.blob.size() && len <= kMaxBlob;
  if (ok) expect_blob->assign(p.blob.begin(), p.blob.begin() + len);
  // The verdict and the server's blob when accepted.
  uint8_t verdict = 1;
  if (ReadAll(fd, &verdict, 1)) {
    ASYMNVM_FUZZ_CHECK((verdict == 0) == ok);
    if (ok) {
      uint8_t l[4];
      ASYMNVM_FUZZ_CHECK(ReadAll(fd, l, 4) && GetLe32(l) == kServerBlob.size());
      std::vector<uint8_t> b(kServerBlob.size());
      ASYMNVM_FUZZ_CHECK(ReadAll(fd, b.data(), b.size()) && b == kServerBlob);
    }
  } else {
    ASYMNVM_FUZZ_CHECK(!ok);
  }
  return ok;
}

void Address(fuzz::Input& in) {
  const auto b = in.Rest();
  const std::string a(b.begin(), b.end());
  auto ep = ParseAddress(a);
  if (!ep.ok()) {
    ASYMNVM_FUZZ_CHECK(ep.status().code() == StatusCode::kInvalidArgument);
    return;
  }
  auto again = ParseAddress(FormatAddress(*ep));
  ASYMNVM_FUZZ_CHECK(again.ok());
  ASYMNVM_FUZZ_CHECK(again->kind == ep->kind && again->host == ep->host &&
                     again->port == ep->port && again->path == ep->path);
}

void Server(fuzz::Input& in) {
  const Plan p = ReadPlan(in);
  int sv[2];
  ASYMNVM_FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  Status st;
  std::vector<uint8_t> got;
  std::thread server([&] {
    st = HandshakeServer(sv[0], kSecret, kServerBlob, &got, kTimeout);
    ::shutdown(sv[0], SHUT_RDWR);  // as the caller's close would: the peer sees EOF
  });
  std::vector<uint8_t> expect;
  const bool ok = PlayClient(sv[1], p, &expect);
  server.join();
  ::close(sv[0]);
  ::close(sv[1]);
  ASYMNVM_FUZZ_CHECK(st.ok() == ok);
  if (ok) ASYMNVM_FUZZ_CHECK(got == expect);
  if (!st.ok()) ASYMNVM_FUZZ_CHECK(st.code() != StatusCode::kTimedOut);  // EOF, never a hang
}

// One listener and acceptor for the process (a unix socket in the temp directory).
struct AcceptorFixture {
  Endpoint ep;
  int listen_fd = -1;
  std::unique_ptr<HandshakeAcceptor> acceptor;
  AcceptorFixture() {
    ep.kind = Endpoint::Kind::kUnix;
    ep.path = "/tmp/asymnvm-bootstrap-fuzz-" + std::to_string(::getpid()) + ".sock";
    Endpoint bound;
    auto fd = ListenSocket(ep, &bound);
    ASYMNVM_FUZZ_CHECK(fd.ok());
    listen_fd = *fd;
    HandshakeLimits limits;
    limits.log_lines_per_second = 0;
    acceptor = std::make_unique<HandshakeAcceptor>(listen_fd, kSecret, "fuzz", limits);
  }
  ~AcceptorFixture() {
    acceptor.reset();
    ::close(listen_fd);
    ::unlink(ep.path.c_str());
  }
};

uint64_t Finished(const HandshakeAcceptorStats& s) {
  return s.accepted + s.refused + s.timed_out + s.evicted;
}

void Acceptor(fuzz::Input& in) {
  static AcceptorFixture fx;
  const Plan p = ReadPlan(in);
  const uint64_t before = Finished(fx.acceptor->stats());
  std::atomic<bool> stop{false};
  std::atomic<int> naccepted{0};
  std::vector<std::vector<uint8_t>> accepted;  // read after the loop ends
  std::thread loop([&] {
    while (!stop.load()) {
      auto peer = fx.acceptor->Accept(kServerBlob, std::chrono::milliseconds(1));
      if (peer.ok()) {
        accepted.push_back(peer->blob);
        ::close(peer->fd);
        naccepted++;
      }
    }
  });
  auto fd = ConnectSocket(fx.ep, kTimeout);
  ASYMNVM_FUZZ_CHECK(fd.ok());
  std::vector<uint8_t> expect;
  const bool ok = PlayClient(*fd, p, &expect);
  ::close(*fd);
  // The acceptor finishes this peer (accepts or refuses it) within the deadline.
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (Finished(fx.acceptor->stats()) == before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // An accepted peer is returned by a later Accept call: give the loop until the deadline.
  while (ok && naccepted.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  stop = true;
  loop.join();
  // One more round with no peer: the acceptor refreshes its pending count at the top of a round
  // (a refusal is counted as it happens, the pending count after it).
  auto none = fx.acceptor->Accept(kServerBlob, std::chrono::milliseconds(1));
  if (none.ok()) {
    accepted.push_back(none->blob);
    ::close(none->fd);
  }
  const auto s = fx.acceptor->stats();
  ASYMNVM_FUZZ_CHECK(Finished(s) == before + 1);
  ASYMNVM_FUZZ_CHECK(s.pending == 0);
  ASYMNVM_FUZZ_CHECK(accepted.size() == (ok ? 1u : 0u));
  if (ok) ASYMNVM_FUZZ_CHECK(accepted[0] == expect);
}

void Client(fuzz::Input& in) {
  const Plan p = ReadPlan(in);
  int sv[2];
  ASYMNVM_FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  Status st;
  std::vector<uint8_t> got;
  std::thread client([&] {
    st = HandshakeClient(sv[0], kSecret, kClientBlob, &got, kTimeout);
    ::shutdown(sv[0], SHUT_RDWR);
  });
  const int fd = sv[1];
  bool ok = false;
  std::vector<uint8_t> expect;
  uint8_t hello_c[kHello];
  ASYMNVM_FUZZ_CHECK(ReadAll(fd, hello_c, kHello) && HelloValid(hello_c));
  const auto hello_s = Hello(p, 101);
  const auto honest = Mac('S', hello_c + 8, hello_s.data() + 8, {});
  const auto mac = (p.flags & 2) ? honest : p.raw_mac;
  std::vector<uint8_t> reply = hello_s;
  reply.insert(reply.end(), mac.begin(), mac.end());
  (void)WriteAll(fd, reply);
  const bool proof_ok = HelloValid(hello_s.data()) && mac == honest;
  uint8_t proof[kMac + 4];
  if (ReadAll(fd, proof, sizeof proof)) {
    ASYMNVM_FUZZ_CHECK(proof_ok);  // the client goes on only after our proof verified
    ASYMNVM_FUZZ_CHECK(GetLe32(proof + kMac) == kClientBlob.size());
    std::vector<uint8_t> blob(kClientBlob.size());
    ASYMNVM_FUZZ_CHECK(ReadAll(fd, blob.data(), blob.size()) && blob == kClientBlob);
    ASYMNVM_FUZZ_CHECK(Mac('C', hello_c + 8, hello_s.data() + 8, blob) ==
                       std::vector<uint8_t>(proof, proof + kMac));
    const uint32_t len = p.len();
    std::vector<uint8_t> msg = {p.verdict, 0, 0, 0, 0};
    PutLe32(msg.data() + 1, len);
    msg.insert(msg.end(), p.blob.begin(), p.blob.end());
    (void)WriteAll(fd, msg);
    ok = p.verdict == 0 && len <= p.blob.size() && len <= kMaxBlob;
    if (ok) expect.assign(p.blob.begin(), p.blob.begin() + len);
  } else {
    ASYMNVM_FUZZ_CHECK(!proof_ok);
  }
  ::shutdown(fd, SHUT_WR);
  client.join();
  ::close(sv[0]);
  ::close(sv[1]);
  ASYMNVM_FUZZ_CHECK(st.ok() == ok);
  if (ok) ASYMNVM_FUZZ_CHECK(got == expect);
  if (!st.ok()) ASYMNVM_FUZZ_CHECK(st.code() != StatusCode::kTimedOut);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  switch (in.U8() % 4) {
    case 0:
      Address(in);
      break;
    case 1:
      Server(in);
      break;
    case 2:
      Acceptor(in);
      break;
    default:
      Client(in);
      break;
  }
  return 0;
}
