// asymnvm-ctl coord: look at and edit a coordinator by hand (doc/tools.md §coord, doc/coord.md).
//
//   asymnvm-ctl coord ls URI PATH                       children of PATH, one per line
//   asymnvm-ctl coord get URI PATH [--stat]             data of PATH (and version, owner)
//   asymnvm-ctl coord set URI PATH DATA [--version N] [--create]
//   asymnvm-ctl coord rm URI PATH [--version N]
#include <CLI/CLI.hpp>

#include "asymnvm/coord.h"
#include "tools/ctl.h"

namespace asymnvm::tools {

int RunCtlCoord(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"asymnvm-ctl coord: list, read and edit coordinator nodes (dir:PATH or zk:H:P)",
               "asymnvm-ctl coord"};
  app.require_subcommand(1);
  std::string uri, path, data;
  int64_t version = coord::kAnyVersion;
  bool stat = false, create = false;
  auto common = [&](CLI::App* c) {
    c->add_option("URI", uri, "dir:PATH or zk:HOST:PORT[,HOST:PORT...][/chroot]")->required();
    c->add_option("PATH", path, "Node path, e.g. /asymnvm/frontends")->required();
  };
  auto* ls = app.add_subcommand("ls", "List the children of a node");
  common(ls);
  auto* get = app.add_subcommand("get", "Print a node's data");
  common(get);
  get->add_flag("--stat", stat, "Also print version, ephemeral owner and creation id");
  auto* set = app.add_subcommand("set", "Replace a node's data (compare-and-set with --version)");
  common(set);
  set->add_option("DATA", data, "New data")->required();
  set->add_option("--version", version, "Expected version (default: any)");
  set->add_flag("--create", create, "Create the node (persistent) if it does not exist");
  auto* rm = app.add_subcommand("rm", "Delete a node (it must have no children)");
  common(rm);
  rm->add_option("--version", version, "Expected version (default: any)");

  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e, out, err);
    return rc == 0 ? kCtlOk : kCtlUsage;
  }
  auto fail = [&](const Status& st) {
    err << "asymnvm-ctl coord: " << st.ToString() << "\n";
    return kCtlFailed;
  };
  coord::Options options;
  options.connect_timeout = std::chrono::milliseconds(5000);
  auto c = coord::Coordinator::Open(uri, options);
  if (!c.ok()) return fail(c.status());
  coord::Coordinator& co = **c;
  if (ls->parsed()) {
    auto kids = co.Children(path);
    if (!kids.ok()) return fail(kids.status());
    for (const auto& k : *kids) out << k << "\n";
    return kCtlOk;
  }
  if (get->parsed()) {
    auto n = co.Get(path);
    if (!n.ok()) return fail(n.status());
    out << n->data << "\n";
    if (stat) {
      out << "version " << n->version << "\n"
          << "ephemeral " << (n->ephemeral ? "yes" : "no") << "\n"
          << "owner_session " << n->owner_session << "\n"
          << "creation_id " << n->creation_id << "\n";
    }
    return kCtlOk;
  }
  if (set->parsed()) {
    auto v = co.Set(path, data, version);
    if (!v.ok() && v.status().code() == StatusCode::kNotFound && create) {
      auto created = co.Create(path, data, coord::kPersistent);
      if (!created.ok()) return fail(created.status());
      out << "created " << *created << " version 0\n";
      return kCtlOk;
    }
    if (!v.ok()) return fail(v.status());
    out << "version " << *v << "\n";
    return kCtlOk;
  }
  Status st = co.Delete(path, version);
  if (!st.ok()) return fail(st);
  return kCtlOk;
}

}  // namespace asymnvm::tools
