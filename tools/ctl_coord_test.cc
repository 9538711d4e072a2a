// asymnvm-ctl coord over an embedded coordinator: ls / get / set / rm and their errors.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <sstream>

#include "asymnvm/coord.h"
#include "tools/ctl.h"

namespace asymnvm::tools {
namespace {

struct CtlRun {
  int rc;
  std::string out, err;
};
CtlRun Ctl(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int rc = RunCtl(args, out, err);
  return {rc, out.str(), err.str()};
}

TEST(CtlCoord, ListsReadsWritesAndRemovesNodes) {
  char tmpl[] = "/tmp/asymnvm-ctl-coord-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string uri = std::string("dir:") + tmpl;
  {
    auto c = coord::Coordinator::Open(uri);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->EnsurePath("/asymnvm/frontends").ok());
    ASSERT_TRUE((*c)->Create("/asymnvm/frontends/7", "epoch=3").ok());
  }
  CtlRun r = Ctl({"coord", "ls", uri, "/asymnvm/frontends"});
  EXPECT_EQ(r.rc, kCtlOk) << r.err;
  EXPECT_EQ(r.out, "7\n");
  r = Ctl({"coord", "get", uri, "/asymnvm/frontends/7", "--stat"});
  EXPECT_EQ(r.rc, kCtlOk) << r.err;
  EXPECT_EQ(r.out.rfind("epoch=3\nversion 0\n", 0), 0u) << r.out;
  r = Ctl({"coord", "set", uri, "/asymnvm/frontends/7", "epoch=4", "--version", "5"});
  EXPECT_EQ(r.rc, kCtlFailed);
  EXPECT_NE(r.err.find("Aborted"), std::string::npos) << r.err;
  r = Ctl({"coord", "set", uri, "/asymnvm/frontends/7", "epoch=4", "--version", "0"});
  EXPECT_EQ(r.rc, kCtlOk) << r.err;
  EXPECT_EQ(r.out, "version 1\n");
  r = Ctl({"coord", "set", uri, "/asymnvm/kv", "m", "--create"});
  EXPECT_EQ(r.rc, kCtlOk) << r.err;
  r = Ctl({"coord", "rm", uri, "/asymnvm/frontends"});
  EXPECT_EQ(r.rc, kCtlFailed);  // has children
  r = Ctl({"coord", "rm", uri, "/asymnvm/frontends/7"});
  EXPECT_EQ(r.rc, kCtlOk) << r.err;
  r = Ctl({"coord", "get", uri, "/asymnvm/frontends/7"});
  EXPECT_EQ(r.rc, kCtlFailed);
  EXPECT_NE(r.err.find("NotFound"), std::string::npos) << r.err;
  EXPECT_EQ(Ctl({"coord", "ls", "etcd:x", "/"}).rc, kCtlFailed);
  EXPECT_EQ(Ctl({"coord", "frobnicate", uri, "/"}).rc, kCtlUsage);
  EXPECT_EQ(Ctl({"coord", "ls", uri}).rc, kCtlUsage);
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
}

}  // namespace
}  // namespace asymnvm::tools
