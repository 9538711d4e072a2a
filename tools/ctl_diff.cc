// asymnvm-ctl diff PRIMARY_POOL MIRROR_POOL (doc/tools.md §diff, doc/mirror.md): compares two
// stopped pools region by region (superblock, back-end header page, naming space, allocation
// bitmap, b-log, OQ area, data area; positions from the first pool's back-end header) and names
// the first differing byte range of each region that differs. Each file is read through a
// read-only shared mapping under a shared flock, so a pool held by a running back-end or mirror
// (exclusive flock) is refused.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "asymnvm/pm.h"
#include "backend/layout.h"
#include "tools/ctl.h"

namespace asymnvm::tools {
namespace {

struct Mapped {
  int fd = -1;
  const uint8_t* p = nullptr;
  uint64_t size = 0;
  ~Mapped() {
    if (p) ::munmap(const_cast<uint8_t*>(p), size);
    if (fd >= 0) ::close(fd);
  }
};

Status MapReadOnly(const std::string& path, Mapped* m) {
  m->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (m->fd < 0) return Status::IoError("open " + path, errno);
  if (::flock(m->fd, LOCK_SH | LOCK_NB) != 0) {
    return Status::FailedPrecondition(path +
                                      " is held by a running process (back-end or mirror); "
                                      "stop it first (diff compares stopped pools)");
  }
  struct stat st {};
  if (::fstat(m->fd, &st) != 0) return Status::IoError("stat " + path, errno);
  m->size = static_cast<uint64_t>(st.st_size);
  if (m->size < 2 * pm::kSuperblockSize)
    return Status::InvalidArgument(path + ": too small for a pool");
  void* a = ::mmap(nullptr, m->size, PROT_READ, MAP_SHARED, m->fd, 0);
  if (a == MAP_FAILED) return Status::IoError("mmap " + path, errno);
  m->p = static_cast<const uint8_t*>(a);
  return Status::Ok();
}

}  // namespace

int RunDiff(const std::string& a_path, const std::string& b_path, bool json, std::ostream& out,
            std::ostream& err) {
  Mapped a, b;
  for (auto [path, m] : {std::pair{&a_path, &a}, std::pair{&b_path, &b}}) {
    Status s = MapReadOnly(*path, m);
    if (!s.ok()) {
      err << "asymnvm-ctl diff: " << s.ToString() << "\n";
      return kCtlFailed;
    }
  }
  nlohmann::ordered_json j;
  j["a"] = a_path;
  j["b"] = b_path;
  if (a.size != b.size) {
    j["identical"] = false;
    j["size_a"] = a.size;
    j["size_b"] = b.size;
    if (json) {
      out << j.dump(2) << "\n";
    } else {
      out << a_path << " (" << a.size << " bytes) and " << b_path << " (" << b.size
          << " bytes) differ in size\n";
    }
    return kCtlDiffer;
  }
  struct R {
    std::string name;
    uint64_t off, size;
  };
  std::vector<R> regions = {
      {"superblock", 0, pm::kSuperblockSize},
      {"backend-header", backend::kBackendHeaderOffset, backend::kBackendHeaderSize}};
  auto layout = backend::DecodeLayout(a.p + backend::kBackendHeaderOffset, a.size);
  if (layout.ok()) {
    regions.push_back({"naming", layout->naming.offset, layout->naming.size});
    regions.push_back({"bitmap", layout->bitmap.offset, layout->bitmap.size});
    regions.push_back({"b-log", layout->rowan.offset, layout->rowan.size});
    regions.push_back({"oq", layout->oq.offset, layout->oq.size});
    regions.push_back({"data", layout->data.offset, layout->data.size});
  } else {
    regions.push_back({"rest", 2 * pm::kSuperblockSize, a.size - 2 * pm::kSuperblockSize});
    j["note"] = "no back-end header in " + a_path + " (" + layout.status().message() +
                "): compared as one range";
  }
  bool identical = true;
  j["regions"] = nlohmann::ordered_json::array();
  for (const R& r : regions) {
    if (r.off + r.size > a.size) continue;
    uint64_t first = UINT64_MAX, last = 0, differing = 0;
    bool run_open = true;
    // Compare in 4 KiB blocks (memcmp), then bytes inside the differing blocks.
    for (uint64_t o = r.off; o < r.off + r.size; o += 4096) {
      const uint64_t n = std::min<uint64_t>(4096, r.off + r.size - o);
      if (std::memcmp(a.p + o, b.p + o, n) == 0) continue;
      for (uint64_t i = o; i < o + n; i++) {
        if (a.p[i] == b.p[i]) continue;
        differing++;
        // The first differing range: differing bytes with gaps below 64 bytes.
        if (first == UINT64_MAX) {
          first = last = i;
        } else if (run_open && i - last < 64) {
          last = i;
        } else {
          run_open = false;
        }
      }
    }
    nlohmann::ordered_json rj = {
        {"region", r.name}, {"offset", r.off}, {"size", r.size}, {"identical", differing == 0}};
    if (differing) {
      identical = false;
      rj["first_differing"] = {first, last + 1};
      rj["differing_bytes"] = differing;
    }
    j["regions"].push_back(rj);
    if (!json) {
      out << "  " << r.name << " @" << r.off << " (" << r.size << " bytes): ";
      if (differing == 0) {
        out << "identical\n";
      } else {
        out << "DIFFERS: first differing range [" << first << ", " << last + 1 << "), " << differing
            << " byte(s) differ in the region\n";
      }
    }
  }
  j["identical"] = identical;
  if (json) {
    out << j.dump(2) << "\n";
  } else {
    out << a_path << " vs " << b_path << ": "
        << (identical ? "identical (every region)" : "regions differ") << "\n";
  }
  return identical ? kCtlOk : kCtlDiffer;
}

}  // namespace asymnvm::tools
