// Superblock encoding/validation and Pool::Create/Open refusals, including the pool lock.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "asymnvm/pm.h"
#include "pm/pm_test_util.h"

namespace asymnvm::pm {
namespace {

using testing::PatchFile;
using testing::ReadFileBytes;
using testing::TempDir;
using testing::WriteFileBytes;

constexpr uint64_t kPoolSize = kMinPoolSize;

Superblock SampleSuperblock() {
  Superblock sb;
  sb.pool_size = 64ull << 20;
  for (size_t i = 0; i < sb.uuid.size(); ++i) sb.uuid[i] = static_cast<uint8_t>(0xA0 + i);
  sb.layout = "asymnvm-backend";
  sb.create_time_ns = 1700000000123456789ull;
  sb.flags = 0x0123456789abcdefull;
  return sb;
}

void ExpectSameSuperblock(const Superblock& a, const Superblock& b) {
  EXPECT_EQ(a.layout_version, b.layout_version);
  EXPECT_EQ(a.pool_size, b.pool_size);
  EXPECT_EQ(a.uuid, b.uuid);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.create_time_ns, b.create_time_ns);
  EXPECT_EQ(a.flags, b.flags);
}

std::vector<uint8_t> Encoded(const Superblock& sb) {
  std::vector<uint8_t> buf(kSuperblockSize);
  EncodeSuperblock(sb, buf.data());
  return buf;
}

// Creates a pool file and closes it.
void MakePool(const std::string& path, const std::string& layout = "asymnvm") {
  PoolOptions opts;
  opts.layout = layout;
  auto pool = Pool::Create(path, kPoolSize, opts);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
}

Status OpenStatus(const std::string& path, const std::string& layout = "asymnvm") {
  PoolOptions opts;
  opts.layout = layout;
  auto pool = Pool::Open(path, opts);
  return pool.ok() ? Status::Ok() : pool.status();
}

void ExpectOpenFails(const std::string& path, StatusCode code, const std::string& fragment) {
  Status st = OpenStatus(path);
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find(path), std::string::npos)
      << "message lacks the path: " << st.message();
  EXPECT_NE(st.message().find(fragment), std::string::npos)
      << "message lacks '" << fragment << "': " << st.message();
}

TEST(SuperblockCodec, RoundTrip_DecodesEveryField) {
  Superblock sb = SampleSuperblock();
  auto buf = Encoded(sb);
  EXPECT_EQ(0, std::memcmp(buf.data(), "ASYMNVM\0", 8));
  Superblock out;
  ASSERT_TRUE(DecodeSuperblock(buf.data(), buf.size(), &out).ok());
  ExpectSameSuperblock(sb, out);
  EXPECT_EQ(Encoded(out), buf);
}

TEST(SuperblockCodec, EmptyAndMaxLengthLayout_RoundTrip) {
  for (std::string layout : {std::string(), std::string(31, 'x')}) {
    Superblock sb = SampleSuperblock();
    sb.layout = layout;
    auto buf = Encoded(sb);
    Superblock out;
    ASSERT_TRUE(DecodeSuperblock(buf.data(), buf.size(), &out).ok());
    EXPECT_EQ(out.layout, layout);
  }
}

TEST(SuperblockCodec, OverlongLayout_IsTruncatedTo31Characters) {
  Superblock sb = SampleSuperblock();
  sb.layout = std::string(40, 'y');
  auto buf = Encoded(sb);
  Superblock out;
  ASSERT_TRUE(DecodeSuperblock(buf.data(), buf.size(), &out).ok());
  EXPECT_EQ(out.layout, std::string(31, 'y'));
}

TEST(SuperblockCodec, WrongMagic_IsCorruptionNotOurPool) {
  auto buf = Encoded(SampleSuperblock());
  buf[0] = 'X';
  Status st = DecodeSuperblock(buf.data(), buf.size(), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("not an AsymNVM pool"), std::string::npos) << st.message();
}

TEST(SuperblockCodec, EveryByteFlipped_IsCorruption) {
  const auto good = Encoded(SampleSuperblock());
  for (size_t i = 0; i < kSuperblockSize; ++i) {
    auto buf = good;
    buf[i] ^= 0x5a;
    Status st = DecodeSuperblock(buf.data(), buf.size(), nullptr);
    ASSERT_EQ(st.code(), StatusCode::kCorruption) << "byte " << i << ": " << st.ToString();
    const char* expected = i < 8 ? "not an AsymNVM pool" : "checksum mismatch";
    ASSERT_NE(st.message().find(expected), std::string::npos)
        << "byte " << i << ": " << st.message();
  }
}

TEST(SuperblockCodec, OtherLayoutVersion_IsNotSupported) {
  for (uint32_t version : {0u, 2u, 0xffffffffu}) {
    Superblock sb = SampleSuperblock();
    sb.layout_version = version;
    auto buf = Encoded(sb);
    Status st = DecodeSuperblock(buf.data(), buf.size(), nullptr);
    EXPECT_EQ(st.code(), StatusCode::kNotSupported) << version << ": " << st.ToString();
  }
}

TEST(SuperblockCodec, ShortBuffer_IsCorruption) {
  auto buf = Encoded(SampleSuperblock());
  for (size_t len : {size_t{0}, size_t{8}, size_t{95}, kSuperblockSize - 1}) {
    Status st = DecodeSuperblock(buf.data(), len, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << len;
  }
}

TEST(SuperblockCodec, PoolSizeBelowMinimum_IsCorruption) {
  Superblock sb = SampleSuperblock();
  sb.pool_size = kMinPoolSize - 1;
  auto buf = Encoded(sb);
  EXPECT_EQ(DecodeSuperblock(buf.data(), buf.size(), nullptr).code(), StatusCode::kCorruption);
}

TEST(SuperblockCodec, RandomBytes_NeverDecode) {
  const uint64_t seed = 20240601;
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> buf(kSuperblockSize);
  for (int iter = 0; iter < 200; ++iter) {
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    if (iter % 2 == 0) std::memcpy(buf.data(), Superblock::kMagic, 8);  // past the magic check
    EXPECT_EQ(DecodeSuperblock(buf.data(), buf.size(), nullptr).code(), StatusCode::kCorruption);
  }
}

TEST(PoolCreate, NewPool_OpensWithSameSuperblock) {
  TempDir dir;
  std::string path = dir.File("pool");
  PoolOptions opts;
  opts.layout = "unit-test";
  Superblock created;
  {
    auto pool = Pool::Create(path, 2 * kPoolSize, opts);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    created = (*pool)->superblock();
    EXPECT_EQ(created.pool_size, 2 * kPoolSize);
    EXPECT_EQ((*pool)->size(), 2 * kPoolSize);
    EXPECT_EQ((*pool)->user_size(), 2 * kPoolSize - kSuperblockSize);
    EXPECT_EQ((*pool)->user_base(), (*pool)->base() + kSuperblockSize);
    EXPECT_NE(created.create_time_ns, 0u);
    EXPECT_NE(UuidToString(created.uuid), UuidToString({}));
    std::string description = (*pool)->Describe();
    EXPECT_NE(description.find(path), std::string::npos) << description;
    EXPECT_NE(description.find((*pool)->is_dax() ? "DAX" : "not DAX"), std::string::npos);
    EXPECT_NE(description.find(PersistModeName((*pool)->mode())), std::string::npos);
    EXPECT_NE(description.find("unit-test"), std::string::npos);
  }
  auto pool = Pool::Open(path, opts);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  ExpectSameSuperblock(created, (*pool)->superblock());
  // The on-file bytes are exactly the encoding of the superblock.
  auto bytes = ReadFileBytes(path);
  ASSERT_GE(bytes.size(), kSuperblockSize);
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.begin() + kSuperblockSize), Encoded(created));
}

TEST(PoolCreate, TwoPools_GetDifferentUuids) {
  TempDir dir;
  auto a = Pool::Create(dir.File("a"), kPoolSize, {});
  auto b = Pool::Create(dir.File("b"), kPoolSize, {});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->superblock().uuid, (*b)->superblock().uuid);
}

TEST(PoolCreate, ExistingFile_IsAlreadyExistsAndFileUntouched) {
  TempDir dir;
  std::string path = dir.File("pool");
  WriteFileBytes(path, {1, 2, 3});
  auto pool = Pool::Create(path, kPoolSize, {});
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(pool.status().message().find(path), std::string::npos);
  EXPECT_EQ(ReadFileBytes(path), (std::vector<uint8_t>{1, 2, 3}));
}

TEST(PoolCreate, BadSizeOrLayout_IsInvalidArgumentAndNoFile) {
  TempDir dir;
  std::string path = dir.File("pool");
  EXPECT_EQ(Pool::Create(path, kMinPoolSize - 4096, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Pool::Create(path, 0, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Pool::Create(path, kMinPoolSize + 1, {}).status().code(), StatusCode::kInvalidArgument);
  PoolOptions opts;
  opts.layout = std::string(32, 'z');
  EXPECT_EQ(Pool::Create(path, kMinPoolSize, opts).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(PoolCreate, MissingDirectory_IsNotFound) {
  TempDir dir;
  auto pool = Pool::Create(dir.File("no/such/dir/pool"), kPoolSize, {});
  EXPECT_EQ(pool.status().code(), StatusCode::kNotFound) << pool.status().ToString();
}

TEST(PoolOpen, MissingFile_IsNotFound) {
  TempDir dir;
  ExpectOpenFails(dir.File("absent"), StatusCode::kNotFound, "no such file");
}

TEST(PoolOpen, TruncatedFile_IsCorruptionAtEveryLength) {
  TempDir dir;
  std::string path = dir.File("pool");
  MakePool(path);
  auto original = ReadFileBytes(path);
  for (uint64_t len :
       {uint64_t{0}, uint64_t{1}, uint64_t{100}, kSuperblockSize - 1, kSuperblockSize,
        kSuperblockSize + 1, uint64_t{8192}, kPoolSize - 4096, kPoolSize - 1}) {
    SCOPED_TRACE("length " + std::to_string(len));
    WriteFileBytes(path, original);
    ASSERT_EQ(0, truncate(path.c_str(), static_cast<off_t>(len)));
    ExpectOpenFails(path, StatusCode::kCorruption, "truncated");
  }
  WriteFileBytes(path, original);
  EXPECT_TRUE(OpenStatus(path).ok());
}

TEST(PoolOpen, RecordedSizeLargerThanFile_IsCorruption) {
  TempDir dir;
  std::string path = dir.File("pool");
  MakePool(path);
  auto head = ReadFileBytes(path);
  Superblock sb;
  ASSERT_TRUE(DecodeSuperblock(head.data(), head.size(), &sb).ok());
  sb.pool_size = 4 * kPoolSize;
  PatchFile(path, 0, Encoded(sb));
  ExpectOpenFails(path, StatusCode::kCorruption, "truncated");
}

TEST(PoolOpen, FileLargerThanRecordedSize_IsCorruption) {
  TempDir dir;
  std::string path = dir.File("pool");
  MakePool(path);
  ASSERT_EQ(0, truncate(path.c_str(), static_cast<off_t>(kPoolSize + 4096)));
  ExpectOpenFails(path, StatusCode::kCorruption, "size mismatch");
}

TEST(PoolOpen, WrongMagic_IsCorruptionNotAnAsymNvmPool) {
  TempDir dir;
  std::string path = dir.File("pool");
  MakePool(path);
  PatchFile(path, 3, {'X'});
  ExpectOpenFails(path, StatusCode::kCorruption, "not an AsymNVM pool");
}

TEST(PoolOpen, FlippedSuperblockByte_IsChecksumCorruption) {
  TempDir dir;
  std::string path = dir.File("pool");
  MakePool(path);
  const auto original = ReadFileBytes(path);
  const uint64_t seed = 77;
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 16; ++i) {
    uint64_t off = 8 + rng() % (kSuperblockSize - 8);
    SCOPED_TRACE("offset " + std::to_string(off));
    PatchFile(path, off, {static_cast<uint8_t>(original[off] ^ (1u << (rng() % 8)))});
    ExpectOpenFails(path, StatusCode::kCorruption, "checksum mismatch");
    PatchFile(path, off, {original[off]});
  }
  EXPECT_TRUE(OpenStatus(path).ok());
}

TEST(PoolOpen, OtherLayoutVersion_IsNotSupported) {
  TempDir dir;
  std::string path = dir.File("pool");
  MakePool(path);
  auto head = ReadFileBytes(path);
  Superblock sb;
  ASSERT_TRUE(DecodeSuperblock(head.data(), head.size(), &sb).ok());
  sb.layout_version = kLayoutVersion + 1;
  PatchFile(path, 0, Encoded(sb));
  ExpectOpenFails(path, StatusCode::kNotSupported, "version");
}

TEST(PoolOpen, LayoutMismatch_IsInvalidArgumentAndEmptyAcceptsAny) {
  TempDir dir;
  std::string path = dir.File("pool");
  MakePool(path, "kv-shard");
  Status st = OpenStatus(path, "asymnvm-backend");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find(path), std::string::npos);
  EXPECT_NE(st.message().find("kv-shard"), std::string::npos);
  EXPECT_TRUE(OpenStatus(path, "kv-shard").ok());
  EXPECT_TRUE(OpenStatus(path, "").ok());
}

TEST(PoolOpen, RandomBytesFile_IsCorruptionNotAnAsymNvmPool) {
  TempDir dir;
  std::string path = dir.File("random");
  const uint64_t seed = 4242;
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> bytes(kPoolSize);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  WriteFileBytes(path, bytes);
  ExpectOpenFails(path, StatusCode::kCorruption, "not an AsymNVM pool");
}

TEST(PoolOpen, ElfFile_IsCorruptionNotAnAsymNvmPool) {
  TempDir dir;
  std::string path = dir.File("elf");
  auto exe = ReadFileBytes("/proc/self/exe");
  ASSERT_GT(exe.size(), kSuperblockSize);
  ASSERT_EQ(exe[1], 'E');
  WriteFileBytes(path, exe);
  ExpectOpenFails(path, StatusCode::kCorruption, "not an AsymNVM pool");
}

TEST(PoolOpen, Directory_IsRefused) {
  TempDir dir;
  Status st = OpenStatus(dir.path());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(dir.path()), std::string::npos) << st.message();
}

TEST(PoolOpen, ZeroedSuperblockAfterCrashedCreate_IsRefused) {
  // What a crash between ftruncate and the superblock write leaves behind.
  TempDir dir;
  std::string path = dir.File("pool");
  WriteFileBytes(path, std::vector<uint8_t>(kPoolSize, 0));
  ExpectOpenFails(path, StatusCode::kCorruption, "not an AsymNVM pool");
}

TEST(PoolLock, SecondOpenInSameProcess_IsFailedPrecondition) {
  TempDir dir;
  std::string path = dir.File("pool");
  auto first = Pool::Create(path, kPoolSize, {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Status st = OpenStatus(path);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("in use by another process"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(path), std::string::npos);
  first.value().reset();  // closes the first Pool, releasing the lock
  EXPECT_TRUE(OpenStatus(path).ok());
}

TEST(PoolLock, OpenFromAnotherProcess_IsFailedPreconditionUntilClosed) {
  TempDir dir;
  std::string path = dir.File("pool");
  auto child_open_code = [&]() -> int {
    pid_t pid = fork();
    if (pid == 0) {
      Status st = OpenStatus(path);
      _exit(static_cast<int>(st.code()));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  {
    auto pool = Pool::Create(path, kPoolSize, {});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    EXPECT_EQ(child_open_code(), static_cast<int>(StatusCode::kFailedPrecondition));
  }
  EXPECT_EQ(child_open_code(), static_cast<int>(StatusCode::kOk));
}

TEST(PoolOpenOrCreate, MissingThenExisting_CreatesThenOpensSamePool) {
  TempDir dir;
  std::string path = dir.File("pool");
  std::array<uint8_t, 16> uuid{};
  {
    auto pool = Pool::OpenOrCreate(path, kPoolSize, {});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    uuid = (*pool)->superblock().uuid;
  }
  auto pool = Pool::OpenOrCreate(path, 2 * kPoolSize, {});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ((*pool)->superblock().uuid, uuid);
  EXPECT_EQ((*pool)->size(), kPoolSize);
}

}  // namespace
}  // namespace asymnvm::pm
