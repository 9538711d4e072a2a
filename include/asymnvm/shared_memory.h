// Shareable DRAM for the fabric (doc/fabric.md §shm).
//
// SharedMemory is anonymous memory backed by a memfd. Any provider can register it; the shm
// provider can then let a peer on the same host map it, so one-sided requests on it are the peer's
// own loads and stores (an ordinary heap buffer is reachable only through the channel).
// Thread safety: Allocate, Find and destruction may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "asymnvm/status.h"

namespace asymnvm::fabric {

class SharedMemory {
 public:
  // Zero-filled. Errors: kInvalidArgument (length 0), kIoError (memfd_create / ftruncate / mmap).
  static Result<std::unique_ptr<SharedMemory>> Allocate(size_t length);
  ~SharedMemory();  // unmaps and closes
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  // The live SharedMemory holding [addr, addr + length), if any: its fd (still owned by it) and
  // the offset of addr in it.
  static bool Find(const void* addr, size_t length, int* fd, uint64_t* offset);

 private:
  SharedMemory(uint8_t* data, size_t size, int fd) : data_(data), size_(size), fd_(fd) {}
  uint8_t* data_;
  size_t size_;
  int fd_;
};

}  // namespace asymnvm::fabric
