// Helpers shared by the libFuzzer targets (doc/fuzz.md): a property check that names what failed
// before aborting (libFuzzer then saves the input as a crash), and a reader of fuzz input fields.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

namespace asymnvm::fuzz {

#define ASYMNVM_FUZZ_CHECK(cond)                                                             \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "fuzz property failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

// Takes fields from the front of the input; past the end every read returns zeros.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t U8() {
    uint8_t v = 0;
    Take(&v, 1);
    return v;
  }
  uint16_t U16() {
    uint16_t v = 0;
    Take(&v, 2);
    return v;
  }
  uint32_t U32() {
    uint32_t v = 0;
    Take(&v, 4);
    return v;
  }
  uint64_t U64() {
    uint64_t v = 0;
    Take(&v, 8);
    return v;
  }
  std::vector<uint8_t> Bytes(size_t n) {
    n = std::min(n, remaining());
    std::vector<uint8_t> v(data_ + pos_, data_ + pos_ + n);
    pos_ += n;
    return v;
  }
  // The rest of the input, as an exact-size heap copy (ASan flags any read past its end).
  std::vector<uint8_t> Rest() { return Bytes(remaining()); }
  size_t remaining() const { return size_ - pos_; }
  bool empty() const { return pos_ >= size_; }

 private:
  void Take(void* out, size_t n) {
    const size_t k = std::min(n, remaining());
    if (k > 0) std::memcpy(out, data_ + pos_, k);
    pos_ += k;
  }
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace asymnvm::fuzz
