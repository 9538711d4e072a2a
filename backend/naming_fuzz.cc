// libFuzzer target: the naming space as a back-end finds it in its pool at open (backend/naming.h,
// doc/backend.md §Naming space). Input: byte 0 = flags (0x01 strict open, 0x02 "fix the slots":
// give every live slot a plausible name length, its name hash and a CRC that verifies, so the
// fuzzer reaches the lookups), byte 1 = names to create afterwards; the rest is the area (8 slots
// of 256 bytes, zero-filled past the input).
// Properties: Open never reads outside the area; a strict Open that succeeds leaves Check() empty;
// every listed entry is a live slot whose CRC verifies, with a name of at most 63 bytes; a lookup
// of a listed name finds that name; Create never reuses a live or corrupt slot (Check() does not
// change) and what it creates is found by Lookup until Remove.
#include <cstdint>
#include <string>
#include <vector>

#include "asymnvm/pm.h"
#include "backend/naming.h"
#include "common/checksum.h"
#include "common/coding.h"
#include "tests/fuzz/fuzz_util.h"

using namespace asymnvm;
using namespace asymnvm::backend;

namespace {

constexpr uint64_t kAreaOffset = 64;
constexpr uint64_t kSlots = 8;
constexpr uint64_t kArea = kSlots * kNamingSlotSize;

void FixSlots(uint8_t* area) {
  for (uint64_t i = 0; i < kSlots; i++) {
    uint8_t* s = area + i * kNamingSlotSize;
    if (GetLe32(s + 4) != 1) continue;
    const uint32_t len = GetLe32(s + 12) % (kMaxNameLength + 1);
    PutLe32(s + 12, len);
    PutLe64(s + 112, Hash64(s + 16, len, 0x6e616d65));
    PutLe32(s, Crc32c(s + 8, 120));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t flags = in.U8();
  const uint8_t creates = in.U8() % 4;
  std::vector<uint64_t> words((kAreaOffset + kArea) / 8, 0);
  uint8_t* base = reinterpret_cast<uint8_t*>(words.data());
  const auto area = in.Bytes(kArea);
  if (!area.empty()) std::memcpy(base + kAreaOffset, area.data(), area.size());
  if (flags & 2) FixSlots(base + kAreaOffset);
  const bool strict = (flags & 1) != 0;
  auto ns =
      NamingSpace::Open(base, kAreaOffset, kArea, pm::DramPersister(), /*format=*/false, strict);
  if (!ns.ok()) {
    ASYMNVM_FUZZ_CHECK(strict && ns.status().code() == StatusCode::kCorruption);
    return 0;
  }
  const auto problems = (*ns)->Check();
  if (strict) ASYMNVM_FUZZ_CHECK(problems.empty());
  const auto list = (*ns)->List();
  ASYMNVM_FUZZ_CHECK(list.size() == (*ns)->live());
  for (const NamingEntry& e : list) {
    ASYMNVM_FUZZ_CHECK(e.slot < kSlots && e.name.size() <= kMaxNameLength);
    const uint8_t* s = base + kAreaOffset + uint64_t{e.slot} * kNamingSlotSize;
    ASYMNVM_FUZZ_CHECK(GetLe32(s + 4) == 1 && GetLe32(s) == Crc32c(s + 8, 120));
    ASYMNVM_FUZZ_CHECK(e.root_addr ==
                       kAreaOffset + uint64_t{e.slot} * kNamingSlotSize + kRootWordOffset);
    auto found = (*ns)->Lookup(e.name);
    if (found.ok()) ASYMNVM_FUZZ_CHECK(found->name == e.name);
  }
  // Creates: names from the rest of the input.
  for (uint8_t k = 0; k < creates; k++) {
    const uint8_t len = 1 + in.U8() % kMaxNameLength;
    const auto bytes = in.Bytes(len);
    const std::string name(bytes.begin(), bytes.end());
    const uint32_t type = 1 + in.U8();
    auto c = (*ns)->Create(name, type, {1, 2, 3, 4});
    ASYMNVM_FUZZ_CHECK((*ns)->Check().size() == problems.size());
    if (!c.ok()) {
      const StatusCode code = c.status().code();
      ASYMNVM_FUZZ_CHECK(code == StatusCode::kInvalidArgument ||
                         code == StatusCode::kAlreadyExists ||
                         code == StatusCode::kResourceExhausted);
      continue;
    }
    auto l = (*ns)->Lookup(name);
    ASYMNVM_FUZZ_CHECK(l.ok() && l->slot == c->slot && l->type == type && l->name == name);
    if (k % 2 == 1) {
      ASYMNVM_FUZZ_CHECK((*ns)->Remove(name).ok());
      // Gone — unless a damaged area holds another live slot of that name that the probe only
      // reaches past the new tombstone (a state the naming space never writes itself).
      auto gone = (*ns)->Lookup(name);
      ASYMNVM_FUZZ_CHECK(gone.status().code() == StatusCode::kNotFound ||
                         (gone.ok() && gone->slot != c->slot));
    }
  }
  return 0;
}
