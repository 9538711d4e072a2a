// asymnvm-ctl cluster --coord URI [--json] [--kv-cluster NAME] [--timeout-ms N] [--secret-file P]
// [--no-probe]: one view of everything the coordinator knows (doc/operations.md §Cluster view).
//
// From the coordinator: back-end groups (/asymnvm/groups/<uuid>: the state's term, primary and
// in-sync set, the live primary registration and live mirror nodes), KV clusters
// (/asymnvm/kv/<name>: the shard map — each shard's primary and backups, synced or joining — the
// live servers and the configuration manager) and front-end ids (/asymnvm/frontends/<id>: epoch,
// live lease holder). Unless --no-probe, each live back-end primary is asked for its status
// (mirrors configured and in sync, their lag, every front-end's incarnation) and, per front-end,
// the structures whose writer lock it holds (kLockedBy).
//
// Exit codes (a script acts on the highest): 0 healthy; 1 the coordinator cannot be read; 2 bad
// arguments; 7 degraded replication (a mirror configured but not in sync, a KV shard with fewer
// synced backups than rf - 1); 8 a KV shard without any synced backup (rf > 1), or a back-end
// group whose mirrors are all out of sync, or that was promoted (term > 1) and has no mirror since
// (single copy); 9 unavailable: a group without a live
// primary, a shard whose primary is not a live server.
#include <CLI/CLI.hpp>
#include <iomanip>
#include <set>
#include <sstream>

#include "asymnvm/coord.h"
#include "backend/registration.h"
#include "backend/rpc.h"
#include "fabric/oq/oq.h"
#include "kv/shard_map.h"
#include "mirror/group.h"
#include "tools/ctl.h"

namespace asymnvm::tools {

namespace {

using Json = nlohmann::ordered_json;

// The structures front-end `fe` holds the writer lock of, from the primary at `address`.
Result<std::vector<uint32_t>> LockedBy(oq::Client& client, uint64_t fe) {
  backend::PayloadWriter w;
  w.U64(fe);
  std::vector<uint8_t> response;
  ASYMNVM_RETURN_IF_ERROR(client.Call(0, backend::kLockedBy, w.bytes(), &response));
  backend::PayloadReader r(response, "locked by");
  const uint32_t n = r.U32();
  std::vector<uint32_t> slots;
  for (uint32_t i = 0; i < n && r.status().ok(); i++) slots.push_back(r.U32());
  ASYMNVM_RETURN_IF_ERROR(r.status());
  return slots;
}

struct Prober {
  std::chrono::milliseconds timeout;
  std::string secret_file;
  std::unique_ptr<fabric::Fabric> fab;
  std::unique_ptr<fabric::ProtectionDomain> pd;

  // Status JSON of the primary plus "locks": {fe: [slots]}; an "error" member when unreachable.
  Json Probe(const std::string& address) {
    Json out;
    auto st = FetchStatus(address, timeout, secret_file);
    if (!st.ok()) {
      out["error"] = st.status().ToString();
      return out;
    }
    out = Json::parse(*st);
    if (!fab) {
      fabric::FabricOptions fo;
      fo.secret_file = secret_file;
      auto f = fabric::Fabric::Open(fo);
      if (!f.ok()) return out;
      fab = std::move(f).value();
      auto p = fab->AllocPd();
      if (!p.ok()) return out;
      pd = std::move(p).value();
    }
    oq::ClientOptions co;
    co.fabric = fab.get();
    co.pd = pd.get();
    co.server_address = address;
    co.timeout = timeout;
    co.window = 1;
    auto client = oq::Client::Connect(co);
    if (!client.ok()) return out;
    Json locks = Json::object();
    for (const auto& f : out["frontends"]) {
      const uint64_t fe = f["id"].get<uint64_t>();
      auto slots = LockedBy(**client, fe);
      if (slots.ok() && !slots->empty()) locks[std::to_string(fe)] = *slots;
    }
    out["locks"] = locks;
    return out;
  }
};

int Worse(int a, int b) { return std::max(a, b); }

}  // namespace

int RunCtlCluster(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"asymnvm-ctl cluster: everything the coordinator knows, with health exit codes"};
  std::string uri, only_kv, secret_file;
  bool json = false, no_probe = false;
  int timeout_ms = 3000;
  app.add_option("--coord", uri, "coordinator URI (dir:PATH | zk:HOST:PORT[,...][/chroot])")
      ->required();
  app.add_flag("--json", json, "print JSON");
  app.add_option("--kv-cluster", only_kv, "only this KV cluster (default: every one)");
  app.add_flag("--no-probe", no_probe,
               "do not ask live primaries for their status (coordinator facts only)");
  app.add_option("--timeout-ms", timeout_ms, "per-daemon connect / call timeout")
      ->check(CLI::Range(1, 600000));
  app.add_option("--secret-file", secret_file, "cluster secret for probing the back-ends");
  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e, out, err);
    return rc == 0 ? kCtlOk : kCtlUsage;
  }
  auto c = coord::Coordinator::Open(uri);
  if (!c.ok()) {
    err << "asymnvm-ctl cluster: coordinator " << uri << ": " << c.status().ToString() << "\n";
    return kCtlFailed;
  }
  coord::Coordinator& co = **c;
  Prober prober{std::chrono::milliseconds(timeout_ms), secret_file, nullptr, nullptr};
  int rc = kCtlOk;
  std::vector<std::string> problems;
  auto problem = [&](int code, const std::string& what) {
    rc = Worse(rc, code);
    problems.push_back(what);
  };
  auto children = [&](const std::string& p) -> std::vector<std::string> {
    auto ch = co.Children(p);
    return ch.ok() ? *ch : std::vector<std::string>{};
  };
  auto get = [&](const std::string& p) -> std::optional<std::string> {
    auto n = co.Get(p);
    if (!n.ok()) return std::nullopt;
    return n->data;
  };
  if (auto root = co.Exists("/asymnvm"); !root.ok()) {
    err << "asymnvm-ctl cluster: coordinator " << uri << ": " << root.status().ToString() << "\n";
    return kCtlFailed;
  }

  Json view;
  view["coordinator"] = uri;
  // ---- back-end groups
  Json groups = Json::array();
  for (const auto& uuid : children("/asymnvm/groups")) {
    const std::string base = "/asymnvm/groups/" + uuid;
    Json g;
    g["group"] = uuid;
    mirror::GroupState state;
    if (auto s = get(base + "/state")) {
      auto d = mirror::DecodeGroupState(*s);
      if (d.ok()) state = *d;
    }
    g["term"] = state.term;
    g["primary_name"] = state.primary;
    g["in_sync"] = state.insync;
    auto reg = get(base + "/primary");
    g["primary_live"] = reg.has_value();
    const std::string address = reg ? backend::RegistrationField(*reg, "address") : "";
    g["primary_address"] = address;
    Json live_mirrors = Json::array();
    for (const auto& m : children(base + "/mirrors")) live_mirrors.push_back(m);
    g["mirror_nodes"] = live_mirrors;
    if (!reg) {
      problem(9, "group " + uuid + ": no live primary (term " + std::to_string(state.term) + ")");
    } else if (!no_probe) {
      Json st = prober.Probe(address);
      if (st.contains("error")) {
        g["probe_error"] = st["error"];
        problem(9, "group " + uuid + ": primary " + address +
                       " registered but not answering: " + st["error"].get<std::string>());
      } else {
        const uint64_t configured = st.value("mirrors_configured", uint64_t{0});
        const uint64_t insync = st.value("mirrors_in_sync", uint64_t{0});
        g["mirrors_configured"] = configured;
        g["mirrors_in_sync"] = insync;
        Json mirrors = Json::array();
        if (st.contains("mirrors")) {
          for (const auto& m : st["mirrors"]) {
            mirrors.push_back({{"address", m.value("address", "")},
                               {"name", m.value("name", "")},
                               {"state", m.value("state", "")},
                               {"max_lag_bytes", m.value("max_lag_bytes", uint64_t{0})},
                               {"drops", m.value("drops", uint64_t{0})},
                               {"last_error", m.value("last_error", "")}});
          }
        }
        g["mirrors"] = mirrors;
        g["frontends"] = st["frontends"];
        g["locks"] = st["locks"];
        if (configured > 0 && insync == 0) {
          problem(8, "group " + uuid + ": none of its " + std::to_string(configured) +
                         " mirror(s) in sync (single copy)");
        } else if (configured == 0 && state.term > 1) {
          // A failover happened (the term rose), so the group had a mirror: the promoted one
          // forwards to none until the old primary rejoins. One copy, as above.
          problem(8, "group " + uuid + ": promoted at term " + std::to_string(state.term) +
                         " and no mirror since (single copy): rejoin the old primary's host as "
                         "a mirror (doc/mirror.md §Rejoin)");
        } else if (insync < configured) {
          problem(7, "group " + uuid + ": " + std::to_string(insync) + " of " +
                         std::to_string(configured) + " mirror(s) in sync");
        }
      }
    }
    groups.push_back(g);
  }
  view["backend_groups"] = groups;

  // ---- KV clusters
  Json kvs = Json::array();
  for (const auto& name : children("/asymnvm/kv")) {
    if (!only_kv.empty() && name != only_kv) continue;
    const std::string base = "/asymnvm/kv/" + name;
    auto map_text = get(base + "/map");
    if (!map_text) continue;  // not a cluster (e.g. the legacy /asymnvm/kv/shardmap)
    Json k;
    k["cluster"] = name;
    std::set<std::string> live;
    for (const auto& s : children(base + "/servers")) live.insert(s);
    k["manager"] = get(base + "/manager").value_or("");
    auto m = kv::ShardMap::Decode(*map_text);
    if (!m.ok()) {
      k["map_error"] = m.status().ToString();
      problem(7, "kv cluster " + name + ": shard map unreadable: " + m.status().ToString());
      kvs.push_back(k);
      continue;
    }
    k["epoch"] = m->epoch;
    k["rf"] = m->rf;
    Json servers = Json::array();
    for (const auto& [uuid, a] : m->servers) {
      servers.push_back({{"uuid", uuid}, {"address", a.oq}, {"live", live.count(uuid) > 0}});
    }
    for (const auto& uuid : live) {
      if (!m->servers.count(uuid))
        servers.push_back({{"uuid", uuid}, {"address", ""}, {"live", true}});
    }
    k["servers"] = servers;
    Json shards = Json::array();
    for (size_t i = 0; i < m->assignment.size(); i++) {
      const auto& a = m->assignment[i];
      Json s;
      s["shard"] = i;
      s["primary"] = a.primary;
      s["primary_live"] = live.count(a.primary) > 0;
      Json backups = Json::array();
      uint32_t synced = 0;
      for (const auto& b : a.backups) {
        const bool ok = b.synced && live.count(b.uuid) > 0;
        if (ok) synced++;
        backups.push_back(
            {{"uuid", b.uuid}, {"synced", b.synced}, {"live", live.count(b.uuid) > 0}});
      }
      s["backups"] = backups;
      s["synced_backups"] = synced;
      if (!a.move_to.empty()) s["move_to"] = a.move_to;
      const std::string who = "kv " + name + " shard " + std::to_string(i);
      if (!live.count(a.primary)) {
        problem(9, who + ": primary " + a.primary.substr(0, 8) + " is not live");
      } else if (m->rf > 1 && synced == 0) {
        problem(8, who + ": no synced live backup (rf " + std::to_string(m->rf) + ")");
      } else if (m->rf > 1 && synced + 1 < m->rf) {
        problem(7, who + ": " + std::to_string(synced) + " synced backup(s), rf " +
                       std::to_string(m->rf));
      }
      shards.push_back(s);
    }
    k["shards"] = shards;
    kvs.push_back(k);
  }
  view["kv_clusters"] = kvs;

  // ---- front-end ids
  Json fes = Json::array();
  for (const auto& id : children("/asymnvm/frontends")) {
    Json f;
    f["id"] = id;
    const std::string epoch = get("/asymnvm/frontends/" + id).value_or("");
    f["epoch"] = epoch.rfind("epoch ", 0) == 0 ? epoch.substr(6) : epoch;
    auto lease = get("/asymnvm/frontends/" + id + "/lease");
    f["live"] = lease.has_value();
    f["holder"] = lease.value_or("");
    // Incarnation and locks, from every probed primary that knows the id.
    Json where = Json::array();
    for (const auto& g : groups) {
      if (!g.contains("frontends")) continue;
      for (const auto& gf : g["frontends"]) {
        if (std::to_string(gf["id"].get<uint64_t>()) != id) continue;
        Json w;
        w["group"] = g["group"];
        w["incarnation"] = gf["incarnation"];
        w["locks"] = g["locks"].contains(id) ? g["locks"][id] : Json::array();
        where.push_back(w);
      }
    }
    f["groups"] = where;
    fes.push_back(f);
  }
  view["frontends"] = fes;
  view["problems"] = problems;
  view["health"] = rc == 0   ? "healthy"
                   : rc == 7 ? "degraded"
                   : rc == 8 ? "unprotected"
                             : "unavailable";
  view["exit_code"] = rc;

  if (json) {
    out << view.dump(2) << "\n";
    return rc;
  }
  auto short_id = [](const std::string& s) { return s.size() > 8 ? s.substr(0, 8) : s; };
  out << "coordinator " << uri << ": " << view["health"].get<std::string>() << "\n";
  out << "\nBACK-END GROUPS\n";
  out << std::left << std::setw(10) << "group" << std::setw(6) << "term" << std::setw(26)
      << "primary" << std::setw(34) << "address"
      << "mirrors in sync\n";
  for (const auto& g : groups) {
    std::string ms;
    if (g.contains("mirrors")) {
      ms = std::to_string(g["mirrors_in_sync"].get<uint64_t>()) + "/" +
           std::to_string(g["mirrors_configured"].get<uint64_t>());
      for (const auto& m : g["mirrors"]) {
        ms += "  " + m["address"].get<std::string>() + "=" + m["state"].get<std::string>();
      }
    } else {
      ms = std::to_string(g["in_sync"].size()) + " (state)";
    }
    out << std::setw(10) << short_id(g["group"]) << std::setw(6) << g["term"].dump()
        << std::setw(26)
        << (g["primary_name"].get<std::string>().empty() ? "-"
                                                         : g["primary_name"].get<std::string>())
        << std::setw(34)
        << (g["primary_live"].get<bool>() ? g["primary_address"].get<std::string>() : "(down)")
        << ms << "\n";
  }
  for (const auto& k : kvs) {
    out << "\nKV CLUSTER " << k["cluster"].get<std::string>();
    if (k.contains("map_error")) {
      out << ": " << k["map_error"].get<std::string>() << "\n";
      continue;
    }
    out << "  (map epoch " << k["epoch"].dump() << ", rf " << k["rf"].dump() << ", manager "
        << short_id(k["manager"]) << ")\n";
    out << "servers:";
    for (const auto& s : k["servers"]) {
      out << "  " << short_id(s["uuid"]) << (s["live"].get<bool>() ? "" : "(down)") << " "
          << s["address"].get<std::string>();
    }
    out << "\n"
        << std::setw(7) << "shard" << std::setw(12) << "primary"
        << "backups\n";
    for (const auto& s : k["shards"]) {
      std::string b;
      for (const auto& x : s["backups"]) {
        b += short_id(x["uuid"]) + ":" + (x["synced"].get<bool>() ? "synced" : "joining") +
             (x["live"].get<bool>() ? "" : "(down)") + " ";
      }
      out << std::setw(7) << s["shard"].dump() << std::setw(12)
          << (short_id(s["primary"]) + (s["primary_live"].get<bool>() ? "" : "!")) << b << "\n";
    }
  }
  out << "\nFRONT-ENDS\n"
      << std::setw(8) << "id" << std::setw(7) << "epoch" << std::setw(6) << "live"
      << "incarnation / locks held (structure slots) per group\n";
  for (const auto& f : fes) {
    std::string w;
    for (const auto& x : f["groups"]) {
      w += short_id(x["group"]) + ": incarnation " + x["incarnation"].dump() + ", locks " +
           x["locks"].dump() + "  ";
    }
    out << std::setw(8) << f["id"].get<std::string>() << std::setw(7)
        << f["epoch"].get<std::string>() << std::setw(6) << (f["live"].get<bool>() ? "yes" : "no")
        << w << "\n";
  }
  if (!problems.empty()) {
    out << "\nPROBLEMS (exit " << rc << ")\n";
    for (const auto& p : problems) out << "  " << p << "\n";
  }
  return rc;
}

}  // namespace asymnvm::tools
