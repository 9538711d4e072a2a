// Certificate, key and CA files for OpenSSL contexts (common/tls_files.h).
#include "common/tls_files.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509err.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace asymnvm {
namespace {

// An encrypted key would make OpenSSL prompt on the terminal: refuse instead.
int NoPassphrase(char*, int, int, void*) { return -1; }

// The file must be readable before OpenSSL parses it (a clearer message than OpenSSL's).
Status Readable(const char* what, const std::string& path) {
  if (path.empty()) return Status::InvalidArgument(std::string(what) + " is not set");
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) {
    return Status::InvalidArgument(std::string(what) + " '" + path + "': " + std::strerror(errno));
  }
  std::fclose(f);
  return Status::Ok();
}

Status Failed(const char* what, const std::string& path, const std::string& action) {
  return Status::InvalidArgument(std::string(what) + " '" + path + "': " + action + ": " +
                                 OpenSslErrors());
}

struct KeyPair {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  ~KeyPair() {
    EVP_PKEY_free(key);
    X509_free(cert);
  }
};

// An EC P-256 key and a certificate named `cn`, signed by `issuer` (null: a self-signed CA).
Status MakeCert(const std::string& cn, const KeyPair* issuer, KeyPair* out) {
  static std::atomic<long> serial{1};
  out->key = EVP_EC_gen("P-256");
  if (out->key == nullptr) return Status::Internal("EVP_EC_gen: " + OpenSslErrors());
  X509* x = X509_new();
  if (x == nullptr) return Status::Internal("X509_new: " + OpenSslErrors());
  out->cert = x;
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 2 * 86400);
  X509_set_pubkey(x, out->key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer->cert) : name);
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer ? issuer->cert : x, x, nullptr, nullptr, 0);
  auto ext = [&](int nid, const char* value) -> Status {
    X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
    if (e == nullptr) return Status::Internal("X509V3_EXT_conf_nid: " + OpenSslErrors());
    X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
    return Status::Ok();
  };
  if (issuer == nullptr) {
    ASYMNVM_RETURN_IF_ERROR(ext(NID_basic_constraints, "critical,CA:TRUE"));
    ASYMNVM_RETURN_IF_ERROR(ext(NID_key_usage, "critical,keyCertSign,cRLSign"));
  } else {
    ASYMNVM_RETURN_IF_ERROR(ext(NID_basic_constraints, "CA:FALSE"));
    ASYMNVM_RETURN_IF_ERROR(ext(NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"));
  }
  if (X509_sign(x, issuer ? issuer->key : out->key, EVP_sha256()) <= 0) {
    return Status::Internal("X509_sign: " + OpenSslErrors());
  }
  return Status::Ok();
}

Status WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Status::IoError("open '" + path + "'", errno);
  bool ok = true;
  if (cert != nullptr) ok = PEM_write_X509(f, cert) == 1;
  if (ok && key != nullptr) {
    ok = PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  }
  if (std::fclose(f) != 0 || !ok) return Status::IoError("write '" + path + "'");
  return Status::Ok();
}

}  // namespace

std::string OpenSslErrors(std::vector<unsigned long>* codes) {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    if (codes != nullptr) codes->push_back(e);
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

Status LoadTlsFiles(SSL_CTX* c, const TlsFileNames& names, const std::string& cert_file,
                    const std::string& key_file, const std::string& ca_file) {
  ERR_clear_error();
  ASYMNVM_RETURN_IF_ERROR(Readable(names.cert, cert_file));
  ASYMNVM_RETURN_IF_ERROR(Readable(names.key, key_file));
  if (!ca_file.empty()) ASYMNVM_RETURN_IF_ERROR(Readable(names.ca, ca_file));
  SSL_CTX_set_default_passwd_cb(c, NoPassphrase);
  if (SSL_CTX_use_certificate_chain_file(c, cert_file.c_str()) != 1) {
    return Failed(names.cert, cert_file, "not a PEM certificate");
  }
  const std::string mismatch = "does not match " + std::string(names.cert) + " '" + cert_file + "'";
  if (SSL_CTX_use_PrivateKey_file(c, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    // Loading a key also checks it against the certificate.
    const unsigned long e = ERR_peek_last_error();
    const bool mismatched =
        ERR_GET_LIB(e) == ERR_LIB_X509 && (ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH ||
                                           ERR_GET_REASON(e) == X509_R_KEY_TYPE_MISMATCH);
    return Failed(names.key, key_file,
                  mismatched ? mismatch : "not an unencrypted PEM private key");
  }
  if (SSL_CTX_check_private_key(c) != 1) return Failed(names.key, key_file, mismatch);
  if (!ca_file.empty() && SSL_CTX_load_verify_locations(c, ca_file.c_str(), nullptr) != 1) {
    return Failed(names.ca, ca_file, "not a PEM CA bundle");
  }
  return Status::Ok();
}

Status WriteThrowawayCertificates(const std::string& dir, const std::vector<std::string>& leaves) {
  KeyPair ca;
  ASYMNVM_RETURN_IF_ERROR(MakeCert("asymnvm throwaway CA " + dir, nullptr, &ca));
  ASYMNVM_RETURN_IF_ERROR(WritePem(dir + "/ca.crt", ca.cert, nullptr));
  for (const std::string& name : leaves) {
    KeyPair leaf;
    ASYMNVM_RETURN_IF_ERROR(MakeCert(name, &ca, &leaf));
    ASYMNVM_RETURN_IF_ERROR(WritePem(dir + "/" + name + ".crt", leaf.cert, nullptr));
    ASYMNVM_RETURN_IF_ERROR(WritePem(dir + "/" + name + ".key", nullptr, leaf.key));
  }
  return Status::Ok();
}

}  // namespace asymnvm
