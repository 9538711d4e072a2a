// Byte transports under the soft NIC: a stream socket (tcp, unix) or an in-process pipe pair.
//
// A Channel moves bytes between two connected NIC endpoints. Send never blocks: bytes the
// transport cannot take now are queued and written by the NIC thread when the transport becomes
// writable (OnWritable). Read is called by the owning NIC thread only.
// Thread safety: Send/ShutdownWrite/Shutdown from any thread; Read/OnWritable from the NIC thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "asymnvm/status.h"
#include "common/thread_annotations.h"

namespace asymnvm::fabric::soft {

class Channel {
 public:
  enum class ReadStatus { kData, kWouldBlock, kEof, kError };
  virtual ~Channel() = default;
  // The fd the NIC registers in its epoll set, and whether it is edge-triggered.
  virtual int poll_fd() const = 0;
  virtual bool edge_triggered() const = 0;
  // Queues `len` bytes for the peer (written immediately when possible). false once broken.
  virtual bool Send(const uint8_t* data, size_t len) = 0;
  // Reads up to `cap` bytes into `out`; *n receives the count for kData.
  virtual ReadStatus Read(uint8_t* out, size_t cap, size_t* n) = 0;
  virtual void OnWritable() = 0;
  // Half-close after every queued byte is written: the peer reads them, then EOF.
  virtual void ShutdownWrite() = 0;
  // Both directions, immediately; the peer sees EOF.
  virtual void Shutdown() = 0;
};

// Takes ownership of a connected stream socket (made non-blocking here).
std::unique_ptr<Channel> MakeSocketChannel(int fd);

// ---- inproc ------------------------------------------------------------------------------------

// One direction of an in-process connection: a byte queue plus the receiver's eventfd.
struct InprocPipe {
  InprocPipe();
  ~InprocPipe();
  Mutex mu;
  std::vector<uint8_t> buf ASYMNVM_GUARDED_BY(mu);
  size_t start ASYMNVM_GUARDED_BY(mu) = 0;  // bytes before `start` are consumed
  bool closed ASYMNVM_GUARDED_BY(mu) = false;
  int efd = -1;
};

std::unique_ptr<Channel> MakeInprocChannel(std::shared_ptr<InprocPipe> in,
                                           std::shared_ptr<InprocPipe> out);

// A connect request parked at an inproc listener until Accept takes it.
struct InprocPending {
  enum class State { kWaiting, kAccepted, kRefused, kCancelled };
  Mutex mu;
  std::condition_variable cv;
  State state ASYMNVM_GUARDED_BY(mu) = State::kWaiting;
  std::string secret;
  std::vector<uint8_t> client_blob;
  std::vector<uint8_t> server_blob ASYMNVM_GUARDED_BY(mu);
  std::shared_ptr<InprocPipe> c2s = std::make_shared<InprocPipe>();
  std::shared_ptr<InprocPipe> s2c = std::make_shared<InprocPipe>();
};

struct InprocListenerState {
  Mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<InprocPending>> pending ASYMNVM_GUARDED_BY(mu);
  bool closed ASYMNVM_GUARDED_BY(mu) = false;
};

// Process-global registry of inproc listener names. kAlreadyExists when the name is taken.
Status RegisterInproc(const std::string& name, std::shared_ptr<InprocListenerState> state);
void UnregisterInproc(const std::string& name);
std::shared_ptr<InprocListenerState> FindInproc(const std::string& name);

// Constant-time comparison of cluster secrets (false on length mismatch).
bool SecretsEqual(const std::string& a, const std::string& b);

}  // namespace asymnvm::fabric::soft
