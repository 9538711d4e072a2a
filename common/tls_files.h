// Certificate, key and CA files for OpenSSL contexts: the one place that loads and checks them
// (the RESP gateway's TLS port, kv/resp/tls.h; the fabric's TLS, fabric/tls.h), and throwaway
// certificates for tests and benchmarks.
#pragma once

#include <string>
#include <vector>

#include "asymnvm/status.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace asymnvm {

// OpenSSL's queued errors of this thread, oldest first, as one line (and the queue emptied). With
// `codes`, each packed error code (ERR_GET_LIB / ERR_GET_REASON) is appended to it, oldest first:
// decide on those, not on the text.
std::string OpenSslErrors(std::vector<unsigned long>* codes = nullptr);

// The option names that error messages use for each file (e.g. "tls-cert-file").
struct TlsFileNames {
  const char* cert = "tls-cert-file";
  const char* key = "tls-key-file";
  const char* ca = "tls-ca-cert-file";
};

// Loads the PEM certificate chain `cert_file`, the unencrypted PEM key `key_file` (it must match
// the certificate; an encrypted key is refused rather than prompting) and, when `ca_file` is not
// empty, the PEM CA bundle peers' certificates must chain to. Errors: InvalidArgument naming the
// option, the file and OpenSSL's reason.
Status LoadTlsFiles(SSL_CTX* ctx, const TlsFileNames& names, const std::string& cert_file,
                    const std::string& key_file, const std::string& ca_file);

// A throwaway PKI in `dir` (tests, benchmarks): ca.crt (a self-signed CA) and, for each name in
// `leaves`, NAME.crt / NAME.key (EC P-256, signed by that CA, valid for two days). Errors: IoError.
Status WriteThrowawayCertificates(const std::string& dir, const std::vector<std::string>& leaves);

}  // namespace asymnvm
