// The daemons' --fabric-tls-* flags (doc/fabric.md §TLS), defined once for asymnvm-backend,
// asymnvm-mirror and asymnvm-kv (header-only: the daemons link CLI11, the library does not). Like
// every flag they are also keys of the daemons' --config files (fabric-tls-cert-file = PATH).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "asymnvm/fabric.h"

namespace asymnvm::fabric {

// TLS is on with a certificate; peers' certificates are verified when a CA file is given (without
// one, the cluster secret bound to the TLS session still authenticates the peer).
inline void AddFabricTlsFlags(CLI::App& app, FabricOptions* fo) {
  fo->tls_verify_peer = false;
  app.add_option("--fabric-tls-cert-file", fo->tls_cert_file,
                 "TLS on the fabric's tcp connections: this node's PEM certificate (chain)")
      ->type_name("FILE");
  app.add_option("--fabric-tls-key-file", fo->tls_key_file,
                 "the unencrypted PEM private key of --fabric-tls-cert-file")
      ->type_name("FILE");
  app.add_option("--fabric-tls-ca-cert-file", fo->tls_ca_cert_file,
                 "PEM CA bundle peers' fabric certificates must chain to (given: verified)")
      ->type_name("FILE")
      ->each([fo](const std::string& v) { fo->tls_verify_peer = !v.empty(); });
}

// The same flags for a process this daemon starts (a re-executed mirror).
inline void AppendFabricTlsFlags(const FabricOptions& fo, std::vector<std::string>* args) {
  const std::pair<const char*, const std::string*> flags[] = {
      {"--fabric-tls-cert-file", &fo.tls_cert_file},
      {"--fabric-tls-key-file", &fo.tls_key_file},
      {"--fabric-tls-ca-cert-file", &fo.tls_ca_cert_file}};
  for (const auto& [flag, value] : flags) {
    if (value->empty()) continue;
    args->push_back(flag);
    args->push_back(*value);
  }
}

}  // namespace asymnvm::fabric
