// fabric::SharedMemory (include/asymnvm/shared_memory.h): memfd-backed memory the shm provider can
// share.
#include "asymnvm/shared_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>

#include "common/thread_annotations.h"

namespace asymnvm::fabric {
namespace {

struct Live {
  size_t size;
  int fd;
};

// Live SharedMemory objects by start address (for the shm provider's RegisterMemory).
Mutex& RegistryMu() {
  static Mutex mu;
  return mu;
}
std::map<uintptr_t, Live>& Registry() {
  static std::map<uintptr_t, Live> m;
  return m;
}

}  // namespace

Result<std::unique_ptr<SharedMemory>> SharedMemory::Allocate(size_t length) {
  if (length == 0) return Status::InvalidArgument("SharedMemory: length 0");
  int fd = ::memfd_create("asymnvm-region", MFD_CLOEXEC);
  if (fd < 0) return Status::IoError("SharedMemory: memfd_create", errno);
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0) {
    int e = errno;
    ::close(fd);
    return Status::IoError("SharedMemory: ftruncate", e);
  }
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    ::close(fd);
    return Status::IoError("SharedMemory: mmap", e);
  }
  {
    MutexLock lock(RegistryMu());
    Registry()[reinterpret_cast<uintptr_t>(p)] = Live{length, fd};
  }
  return std::unique_ptr<SharedMemory>(new SharedMemory(static_cast<uint8_t*>(p), length, fd));
}

SharedMemory::~SharedMemory() {
  {
    MutexLock lock(RegistryMu());
    Registry().erase(reinterpret_cast<uintptr_t>(data_));
  }
  ::munmap(data_, size_);
  ::close(fd_);
}

bool SharedMemory::Find(const void* addr, size_t length, int* fd, uint64_t* offset) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  MutexLock lock(RegistryMu());
  auto& m = Registry();
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  const uintptr_t start = it->first;
  if (a - start > it->second.size || length > it->second.size - (a - start)) return false;
  *fd = it->second.fd;
  *offset = a - start;
  return true;
}

}  // namespace asymnvm::fabric
