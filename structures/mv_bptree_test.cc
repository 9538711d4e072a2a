// Multi-version B+tree: the multi-version suite of mv_bst_test.cc, run with a small fan-out (4)
// so every test splits and collapses nodes.
#define MV_TEST_KIND Kind::kMvBPlusTree
#define MV_TEST_BPTREE 1
#define MV_TEST_PARAM 4
#include "structures/mv_bst_test.cc"  // NOLINT(bugprone-suspicious-include)

// Byte-string keys particular to the MV-B+tree (the conformance suite runs the random model at
// fan-out 4 with keys of 24 and 256 bytes): the node-size rule for the fan-out, long keys at the
// default fan-out through Puts, PutBatch and Deletes, and the node layout of both key kinds.
namespace asymnvm::structures {
namespace {

// The i-th byte key of at most `max` bytes (max >= 16; injective): long shared prefixes, NUL
// and 0xFF runs, short keys.
Key MvByteKey(uint64_t i, uint32_t max) {
  static const char kFill[] = {'p', '\0', '\xff'};
  std::string prefix = i % 4 == 3 ? std::string() : std::string(max - 12, kFill[i % 4]);
  return Key(prefix + std::to_string(i));
}

void ExpectByteModel(Map& m, const std::map<Key, Value>& model) {
  for (const auto& [k, v] : model) {
    Value got;
    Status st = m.Get(k, &got);
    ASSERT_TRUE(st.ok()) << k << ": " << st.ToString();
    EXPECT_EQ(got, v) << k;
  }
  std::vector<KeyValue> all;
  ASSERT_TRUE(m.Scan(Key(std::string()), model.size() + 10, &all).ok());
  EXPECT_EQ(all, std::vector<KeyValue>(model.begin(), model.end()));
  EXPECT_EQ(m.Count().value(), model.size());
  Status vs = m.Verify();
  EXPECT_TRUE(vs.ok()) << vs.ToString();
}

class MvBPlusTreeBytesTest : public StructuresTest {};

// Nodes stay within 4120 B (the integer-key node at F = 256): at key_size 256 (264-byte slots,
// 272 B per entry) an explicit fan-out of at most 15, and a default of 7 (a node within 2 KiB).
TEST_F(MvBPlusTreeBytesTest, FanOutLimitAndDefaultForLongKeys) {
  auto s = OpenSession(50, Level::kRcb);
  Options o;
  o.key_size = kMaxKeySize;
  o.param = 16;
  Status big = internal::OpenMvBPlusTree(*s, "f16", o).status();
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("at most 15"), std::string::npos) << big.ToString();
  o.param = 15;
  EXPECT_TRUE(internal::OpenMvBPlusTree(*s, "f15", o).ok());
  o.param = 0;
  auto d = internal::OpenMvBPlusTree(*s, "default", o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->structure().params[1], 7u);
  o.key_size = 24;  // 32-byte slots: 40 B per entry, 32 of them in 1304 B
  auto d24 = internal::OpenMvBPlusTree(*s, "default24", o);
  ASSERT_TRUE(d24.ok());
  EXPECT_EQ((*d24)->structure().params[1], 32u);
  o.key_size = 0;
  o.param = 256;
  EXPECT_TRUE(internal::OpenMvBPlusTree(*s, "i256", o).ok());
}

// 256-byte keys at the default fan-out (7) and at the largest allowed one (15): ascending inserts
// (the deepest, half-full shape), a random PutBatch, deletes; a reader of another session after
// a back-end restart sees the same.
TEST_F(MvBPlusTreeBytesTest, LongKeysAscendingBatchedAndDeleted) {
  for (uint64_t f : {0, 15}) {
    SCOPED_TRACE("fan-out " + std::to_string(f));
    const std::string name = "long" + std::to_string(f);
    std::map<Key, Value> model;
    {
      auto s = OpenSession(51, Level::kRcb);
      Options o;
      o.key_size = kMaxKeySize;
      o.param = f;
      auto m = internal::OpenMvBPlusTree(*s, name, o);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      // Ascending: one long spine of half-full nodes.
      for (uint64_t i = 0; i < 1500; i++) {
        const Key k(std::string(240, 'a') + std::to_string(100000 + i));
        model[k] = TestValue(i, 0, 8);
        Status st = (*m)->Put(k, model[k]);
        ASSERT_TRUE(st.ok()) << i << ": " << st.ToString();
      }
      std::mt19937_64 rng(51 + f);
      std::vector<KeyValue> kvs;
      for (int i = 0; i < 800; i++) {
        const uint64_t id = rng() % 2000;
        kvs.emplace_back(MvByteKey(id, kMaxKeySize), TestValue(id, 1, 1 + rng() % 64));
      }
      Status st = (*m)->PutBatch(kvs);
      ASSERT_TRUE(st.ok()) << st.ToString();
      for (const auto& kv : internal::SortedUnique(kvs)) model[kv.first] = kv.second;
      std::vector<Key> keys;
      for (const auto& kv : model) keys.push_back(kv.first);
      std::shuffle(keys.begin(), keys.end(), rng);
      for (size_t i = 0; i < keys.size() / 2; i++) {
        ASSERT_TRUE((*m)->Delete(keys[i]).ok()) << keys[i];
        model.erase(keys[i]);
      }
      ExpectByteModel(**m, model);
    }
    RestartBackend();
    auto s = OpenSession(52, Level::kRc);
    Options ro;
    ro.access = Access::kReader;
    auto r = internal::OpenMvBPlusTree(*s, name, ro);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->key_size(), kMaxKeySize);
    ExpectByteModel(**r, model);
  }
}

// Integer keys keep the node layout from before byte keys (24 + 16F bytes: keys u64 at +24, value
// pointers at +24 + 8F); a byte-key node has its key slots there and the pointers after F slots.
TEST_F(MvBPlusTreeBytesTest, NodeLayoutOfIntegerAndByteKeys) {
  auto s = OpenSession(53, Level::kRc);
  for (uint32_t ks : {0u, 10u}) {
    SCOPED_TRACE("key_size " + std::to_string(ks));
    Options o;
    o.key_size = ks;
    o.param = 4;
    auto m = internal::OpenMvBPlusTree(*s, "layout" + std::to_string(ks), o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const Key k1 = ks == 0 ? Key(7) : Key("seven"), k2 = ks == 0 ? Key(9) : Key("x");
    ASSERT_TRUE((*m)->Put(k2, Value{1, 2, 3}).ok());
    ASSERT_TRUE((*m)->Put(k1, Value{4}).ok());
    ASSERT_TRUE((*m)->Sync().ok());
    const uint64_t anchor = s->ReadWord((*m)->structure().root_addr).value();
    const uint64_t root = s->ReadWord(anchor + internal::mv::kRootOff).value();
    const uint32_t kslot = internal::KeySlotBytes(ks);
    std::vector<uint8_t> node(24 + (kslot + 8) * 4);
    EXPECT_EQ(node.size(), ks == 0 ? 24u + 16 * 4 : 24u + 24 * 4);
    ASSERT_TRUE(s->Read(internal::mv::Addr(root), node).ok());
    EXPECT_EQ(internal::GetU32(node.data()), 0x5442564du);  // "MVBT"
    EXPECT_EQ(internal::GetU32(node.data() + 16), 1u);      // a leaf
    EXPECT_EQ(internal::GetU32(node.data() + 20), 2u);
    if (ks == 0) {
      EXPECT_EQ(internal::GetU64(node.data() + 24), 7u);
      EXPECT_EQ(internal::GetU64(node.data() + 32), 9u);
    } else {
      const std::vector<uint8_t> want{5, 0, 's', 'e', 'v', 'e', 'n', 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                      1, 0, 'x', 0,   0,   0,   0,   0, 0, 0, 0, 0, 0, 0, 0, 0};
      EXPECT_EQ(std::vector<uint8_t>(node.begin() + 24, node.begin() + 56), want);
    }
    // The value pointers follow the F key slots and name value blocks ("MVVL").
    for (int i = 0; i < 2; i++) {
      const uint64_t vp = internal::GetU64(node.data() + 24 + kslot * 4 + 8 * i);
      uint8_t magic[4];
      ASSERT_TRUE(s->Read(internal::mv::Addr(vp), magic).ok());
      EXPECT_EQ(internal::GetU32(magic), internal::mv::kValueMagic);
    }
  }
}

// Byte-key op logs (Put, Delete, a vector) re-executed by Session::Replay, then published: a
// reader of another session sees them. An integer key in a byte-key op log is corruption.
TEST_F(MvBPlusTreeBytesTest, ReplayReexecutesByteKeyOpLogs) {
  Options o;
  o.key_size = 40;
  o.param = 4;
  std::map<Key, Value> model;
  {
    auto s = OpenSession(54, Level::kRcb);
    auto m = internal::OpenMvBPlusTree(*s, "rp", o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    for (uint64_t i = 0; i < 20; i++) {
      model[MvByteKey(i, 40)] = TestValue(i, 0, 8);
      ASSERT_TRUE((*m)->Put(MvByteKey(i, 40), model[MvByteKey(i, 40)]).ok());
    }
  }
  auto s = OpenSession(54, Level::kRcb);
  RegisterReplays(*s);
  auto m = internal::OpenMvBPlusTree(*s, "rp", o);
  ASSERT_TRUE(m.ok());
  const uint64_t opn = s->recovered_opn();
  const uint32_t sid = (*m)->structure().id;
  FakeFetcher f;
  auto op = [&](uint64_t seq, uint16_t type, std::vector<uint8_t> payload) {
    frontend::RecoveredOp r;
    r.op_seq = opn + seq;
    r.structure_id = sid;
    r.op_type = type;
    r.payload = std::move(payload);
    return r;
  };
  std::vector<KeyValue> vec;
  for (uint64_t i = 100; i < 130; i++) vec.emplace_back(MvByteKey(i, 40), TestValue(i, 2, 12));
  vec.emplace_back(MvByteKey(3, 40), TestValue(3, 3, 5));
  vec = internal::SortedUnique(vec);
  f.ops = {op(1, 1, internal::EncodeKeyValue(MvByteKey(50, 40), TestValue(50, 1, 30))),
           op(2, 2, internal::EncodeKeyValue(MvByteKey(4, 40), {})),
           op(3, internal::kOpPutVector, internal::EncodeVector(vec)),
           op(4, 2, internal::EncodeKeyValue(MvByteKey(5, 40), {}))};
  ASSERT_TRUE(s->Replay(&f).ok());
  model[MvByteKey(50, 40)] = TestValue(50, 1, 30);
  model.erase(MvByteKey(4, 40));
  for (const auto& kv : vec) model[kv.first] = kv.second;
  model.erase(MvByteKey(5, 40));
  ExpectByteModel(**m, model);
  auto s2 = OpenSession(55, Level::kRcb);
  Options ro;
  ro.access = Access::kReader;
  auto r = internal::OpenMvBPlusTree(*s2, "rp", ro);
  ASSERT_TRUE(r.ok());
  ExpectByteModel(**r, model);
  f.ops = {op(5, 1, internal::EncodeKeyValue(Key(7), TestValue(7, 0, 4)))};
  EXPECT_FALSE(s->Replay(&f).ok());
}

}  // namespace
}  // namespace asymnvm::structures
