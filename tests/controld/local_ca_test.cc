// The local development CA: leaves that the real `openssl verify` accepts against the file
// writeCaFile writes, with exactly the requested names, usages and validity from the injected
// clock; one root per database however many controlds load it; clear errors for a bad row.
#include "controld/issuance/local_ca.h"

#include <doctest/doctest.h>
#include <openssl/pem.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "controld/issuance/csr_check.h"
#include "tests/controld/csr_builder.h"
#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using testing::buildCsrPem;
using testing::CsrSpec;
using testing::hostCsr;
using testing::TestDatabase;
using testing::testDatabases;
using testing::TestKey;

constexpr const char* kOpenssl = "/usr/bin/openssl";
constexpr int64_t kNowMs = 1'750'000'000'123;  // 2025-06-15T15:06:40.123Z
const std::string kHost = "k3xq9v2m7pta.tunnel.test";
const std::string kWildcard = "*." + kHost;
const std::atomic<bool> kNotCancelled{false};

class CaTempDir {
 public:
  CaTempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ot-ca-test-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  CaTempDir(const CaTempDir&) = delete;
  CaTempDir& operator=(const CaTempDir&) = delete;
  ~CaTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

void writeFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  REQUIRE(out.good());
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

struct CommandResult {
  int exitCode = -1;
  std::string output;
};

// Runs a shell command (the arguments here are our own temporary paths and host names).
CommandResult run(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  CommandResult result;
  std::array<char, 512> chunk{};
  while (fgets(chunk.data(), static_cast<int>(chunk.size()), pipe) != nullptr) {
    result.output += chunk.data();
  }
  const int status = pclose(pipe);
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// `openssl verify` of the leaf against the CA file, at the time of the injected clock, for a
// TLS server of `hostname`.
CommandResult opensslVerify(const std::string& caFile, const std::string& leafFile,
                            const std::string& hostname, int64_t atMs = kNowMs) {
  REQUIRE_MESSAGE(std::filesystem::exists(kOpenssl), "the openssl binary is missing");
  return run(std::string(kOpenssl) + " verify -CAfile " + caFile +
             " -purpose sslserver -x509_strict -attime " + std::to_string(atMs / 1000) +
             " -verify_hostname '" + hostname + "' " + leafFile);
}

X509Ptr parseCertificate(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr certificate(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  REQUIRE(certificate != nullptr);
  return certificate;
}

std::vector<std::string> dnsNames(X509* certificate) {
  const GeneralNamesPtr names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(certificate, NID_subject_alt_name, nullptr, nullptr)));
  REQUIRE(names != nullptr);
  std::vector<std::string> out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    REQUIRE(name->type == GEN_DNS);
    const std::span<const uint8_t> bytes = bytesOf(name->d.dNSName);
    out.emplace_back(bytes.begin(), bytes.end());
  }
  return out;
}

std::string subjectText(X509_NAME* name) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  REQUIRE(X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) >= 0);
  return readAll(bio.get());
}

std::string serialHex(X509* certificate) {
  const BignumPtr number(ASN1_INTEGER_to_BN(X509_get0_serialNumber(certificate), nullptr));
  REQUIRE(number != nullptr);
  CHECK(BN_is_negative(number.get()) == 0);
  CHECK(BN_num_bytes(number.get()) == 16);
  char* hex = BN_bn2hex(number.get());
  std::string out(hex);
  OPENSSL_free(hex);
  return out;
}

bool isCritical(X509* certificate, int nid) {
  const int index = X509_get_ext_by_NID(certificate, nid, -1);
  REQUIRE(index >= 0);
  return X509_EXTENSION_get_critical(X509_get_ext(certificate, index)) == 1;
}

int countBlocks(const std::string& pem) {
  int count = 0;
  for (size_t at = pem.find("-----BEGIN"); at != std::string::npos;
       at = pem.find("-----BEGIN", at + 1)) {
    ++count;
  }
  return count;
}

// A migrated SQLite store in a temporary file.
struct SqliteStore {
  std::unique_ptr<TestDatabase> database = TestDatabase::sqlite();
  std::unique_ptr<SqlStore> store = database->openMigrated();
};

std::unique_ptr<LocalCa> loadLocalCa(
    Store& store, int64_t validityMs = LocalCa::kDefaultLeafValidityMs,
    Clock clock = [] { return kNowMs; }) {
  Result<std::unique_ptr<LocalCa>> ca = LocalCa::load(store, validityMs, std::move(clock));
  REQUIRE_MESSAGE(ca.ok(), ca.error().message);
  return std::move(ca).value();
}

IssuedCertificate issueFor(LocalCa& ca, const CsrSpec& spec, std::vector<std::string> names) {
  const Result<IssuedCertificate> issued =
      ca.issue(IssueRequest{buildCsrPem(spec), std::move(names)}, kNotCancelled);
  REQUIRE_MESSAGE(issued.ok(), issued.error().message);
  return issued.value();
}

TEST_CASE("local ca: the real openssl verifies an issued leaf against the CA file") {
  SqliteStore db;
  const auto ca = loadLocalCa(*db.store);
  const CaTempDir dir;
  const std::string caFile = dir.file("ca.pem");
  const Status written = ca->writeCaFile(caFile);
  REQUIRE_MESSAGE(written.ok(), written.error().message);
  CHECK(readFile(caFile) == ca->caCertificatePem());

  for (const TestKey key : {TestKey::kP256, TestKey::kRsa2048}) {
    CAPTURE(static_cast<int>(key));
    CsrSpec spec = hostCsr(kHost, true);
    spec.key = key;
    const IssuedCertificate issued = issueFor(*ca, spec, {kHost, kWildcard});
    const std::string leafFile = dir.file("leaf.pem");
    writeFile(leafFile, issued.chainPem);

    CommandResult verified = opensslVerify(caFile, leafFile, kHost);
    CHECK_MESSAGE(verified.exitCode == 0, verified.output);
    CHECK(verified.output == leafFile + ": OK\n");
    verified = opensslVerify(caFile, leafFile, "www." + kHost);
    CHECK_MESSAGE(verified.exitCode == 0, verified.output);
    // The check can fail: another tunnel's name, a time before the leaf, another root.
    CHECK(opensslVerify(caFile, leafFile, "other.tunnel.test").exitCode != 0);
    CHECK(opensslVerify(caFile, leafFile, kHost, kNowMs - 120'000).exitCode != 0);
    SqliteStore otherDb;
    const auto otherCa = loadLocalCa(*otherDb.store);
    const std::string otherFile = dir.file("other-ca.pem");
    REQUIRE(otherCa->writeCaFile(otherFile).ok());
    CHECK(opensslVerify(otherFile, leafFile, kHost).exitCode != 0);
  }
}

TEST_CASE("local ca: a leaf has exactly the requested names, usages and validity") {
  SqliteStore db;
  const auto ca = loadLocalCa(*db.store);
  const X509Ptr root = parseCertificate(ca->caCertificatePem());

  for (const TestKey key : {TestKey::kP256, TestKey::kP384, TestKey::kRsa2048}) {
    CAPTURE(static_cast<int>(key));
    CsrSpec spec = hostCsr(kHost, true);
    spec.key = key;
    const IssuedCertificate issued = issueFor(*ca, spec, {kHost, kWildcard});
    CHECK(countBlocks(issued.chainPem) == 1);
    const X509Ptr leaf = parseCertificate(issued.chainPem);

    CHECK(X509_get_version(leaf.get()) == X509_VERSION_3);
    CHECK(subjectText(X509_get_subject_name(leaf.get())) == "CN=" + kHost);
    CHECK(subjectText(X509_get_issuer_name(leaf.get())) == "CN=OpenTunnel local development CA");
    CHECK(dnsNames(leaf.get()) == std::vector<std::string>{kHost, kWildcard});
    CHECK(EVP_PKEY_eq(X509_get0_pubkey(leaf.get()), testing::testKey(key)) == 1);
    CHECK(X509_get_signature_nid(leaf.get()) == NID_ecdsa_with_SHA256);
    CHECK(X509_verify(leaf.get(), X509_get0_pubkey(root.get())) == 1);

    // Validity: a minute before the injected now, for the default 90 days, in whole seconds.
    const int64_t notBeforeS = (kNowMs - 60'000) / 1000;
    const int64_t notAfterS = (kNowMs + 90LL * 86'400'000) / 1000;
    CHECK(ASN1_TIME_cmp_time_t(X509_get0_notBefore(leaf.get()), notBeforeS) == 0);
    CHECK(ASN1_TIME_cmp_time_t(X509_get0_notAfter(leaf.get()), notAfterS) == 0);
    CHECK(issued.notBeforeMs == notBeforeS * 1000);
    CHECK(issued.notAfterMs == notAfterS * 1000);

    // Extensions: an end entity for TLS servers, tied to the root by key identifiers.
    CHECK(X509_check_ca(leaf.get()) == 0);
    CHECK(isCritical(leaf.get(), NID_basic_constraints));
    CHECK(isCritical(leaf.get(), NID_key_usage));
    const uint32_t usage = key == TestKey::kRsa2048 ? (KU_DIGITAL_SIGNATURE | KU_KEY_ENCIPHERMENT)
                                                    : KU_DIGITAL_SIGNATURE;
    CHECK(X509_get_key_usage(leaf.get()) == usage);
    CHECK(X509_get_extended_key_usage(leaf.get()) == XKU_SSL_SERVER);
    const ASN1_OCTET_STRING* rootId = X509_get0_subject_key_id(root.get());
    const ASN1_OCTET_STRING* authorityId = X509_get0_authority_key_id(leaf.get());
    REQUIRE(rootId != nullptr);
    REQUIRE(authorityId != nullptr);
    CHECK(ASN1_OCTET_STRING_cmp(rootId, authorityId) == 0);
    REQUIRE(X509_get0_subject_key_id(leaf.get()) != nullptr);
    CHECK(X509_get_ext_count(leaf.get()) == 6);
    serialHex(leaf.get());  // positive, 16 bytes
  }

  SUBCASE("the hostname alone") {
    const IssuedCertificate issued = issueFor(*ca, hostCsr(kHost), {kHost});
    const X509Ptr leaf = parseCertificate(issued.chainPem);
    CHECK(dnsNames(leaf.get()) == std::vector<std::string>{kHost});
  }
}

TEST_CASE("local ca: the root") {
  SqliteStore db;
  const auto ca = loadLocalCa(*db.store);
  CHECK(countBlocks(ca->caCertificatePem()) == 1);
  const X509Ptr root = parseCertificate(ca->caCertificatePem());
  CHECK(subjectText(X509_get_subject_name(root.get())) == "CN=OpenTunnel local development CA");
  CHECK(X509_NAME_cmp(X509_get_subject_name(root.get()), X509_get_issuer_name(root.get())) == 0);
  CHECK(X509_verify(root.get(), X509_get0_pubkey(root.get())) == 1);
  CHECK(X509_get_signature_nid(root.get()) == NID_ecdsa_with_SHA256);
  CHECK(X509_check_ca(root.get()) == 1);
  CHECK(isCritical(root.get(), NID_basic_constraints));
  CHECK(X509_get_pathlen(root.get()) == 0);
  CHECK(isCritical(root.get(), NID_key_usage));
  CHECK(X509_get_key_usage(root.get()) == (KU_KEY_CERT_SIGN | KU_CRL_SIGN));
  CHECK(X509_get0_subject_key_id(root.get()) != nullptr);
  CHECK(X509_get_ext_count(root.get()) == 3);
  EVP_PKEY* key = X509_get0_pubkey(root.get());
  REQUIRE(EVP_PKEY_get_base_id(key) == EVP_PKEY_EC);
  std::array<char, 64> group{};
  size_t length = 0;
  REQUIRE(EVP_PKEY_get_group_name(key, group.data(), group.size(), &length) == 1);
  CHECK(std::string(group.data()) == "prime256v1");
  // Ten years from an hour before the clock.
  CHECK(ASN1_TIME_cmp_time_t(X509_get0_notBefore(root.get()), kNowMs / 1000 - 3600) == 0);
  CHECK(ASN1_TIME_cmp_time_t(X509_get0_notAfter(root.get()), kNowMs / 1000 + 3653LL * 86400) == 0);
  CHECK(std::string(ca->name()) == "local");
}

TEST_CASE("local ca: serials differ, also across threads") {
  SqliteStore db;
  const auto ca = loadLocalCa(*db.store);
  const std::string csr = buildCsrPem(hostCsr(kHost));
  std::vector<std::string> chains(16);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t * 4; i < t * 4 + 4; ++i) {
        const Result<IssuedCertificate> issued =
            ca->issue(IssueRequest{csr, {kHost}}, kNotCancelled);
        if (issued.ok()) chains[i] = issued->chainPem;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::set<std::string> serials;
  for (const std::string& chain : chains) {
    REQUIRE_FALSE(chain.empty());
    const X509Ptr leaf = parseCertificate(chain);
    serials.insert(serialHex(leaf.get()));
  }
  CHECK(serials.size() == 16);
}

TEST_CASE("local ca: every controld on one database loads the same root") {
  for (const auto& database : testDatabases()) {
    CAPTURE(database->name());
    SUBCASE("one after the other") {
      const auto firstStore = database->openMigrated();
      const auto secondStore = database->open();
      const auto first = loadLocalCa(*firstStore);
      const auto second = loadLocalCa(*secondStore, 3'600'000, [] { return kNowMs + 86'400'000; });
      CHECK(first->caCertificatePem() == second->caCertificatePem());
      const Result<std::optional<std::string>> row = firstStore->getMeta("local_ca");
      REQUIRE(row.ok());
      REQUIRE(row->has_value());
      CHECK((*row)->find("\"cert\":\"-----BEGIN CERTIFICATE-----") != std::string::npos);
      CHECK((*row)->find("\"key\":\"-----BEGIN PRIVATE KEY-----") != std::string::npos);
      // What one signs, the other's file verifies.
      const CaTempDir dir;
      REQUIRE(second->writeCaFile(dir.file("ca.pem")).ok());
      writeFile(dir.file("leaf.pem"), issueFor(*first, hostCsr(kHost), {kHost}).chainPem);
      const CommandResult verified = opensslVerify(dir.file("ca.pem"), dir.file("leaf.pem"), kHost);
      CHECK_MESSAGE(verified.exitCode == 0, verified.output);
    }
    SUBCASE("at the same time: both create, one insert wins, both read it back") {
      const auto setup = database->openMigrated();
      constexpr size_t kLoaders = 4;
      std::vector<std::unique_ptr<SqlStore>> stores;
      for (size_t i = 0; i < kLoaders; ++i) stores.push_back(database->open());
      std::vector<std::string> roots(kLoaders);
      std::vector<std::string> errors(kLoaders);
      std::atomic<size_t> ready{0};
      std::vector<std::thread> threads;
      for (size_t i = 0; i < kLoaders; ++i) {
        threads.emplace_back([&, i] {
          ready.fetch_add(1);
          while (ready.load() < kLoaders) std::this_thread::yield();
          Result<std::unique_ptr<LocalCa>> ca = LocalCa::load(*stores[i]);
          if (ca.ok()) {
            roots[i] = (*ca)->caCertificatePem();
          } else {
            errors[i] = ca.error().message;
          }
        });
      }
      for (std::thread& thread : threads) thread.join();
      for (size_t i = 0; i < kLoaders; ++i) {
        CHECK_MESSAGE(errors[i].empty(), errors[i]);
        CHECK_FALSE(roots[i].empty());
        CHECK(roots[i] == roots[0]);
      }
    }
  }
}

TEST_CASE("local ca: a row that does not hold a usable root is a clear error") {
  // Pieces for well-formed but wrong rows: another root, and a leaf with its key.
  SqliteStore sourceDb;
  const auto source = loadLocalCa(*sourceDb.store);
  const Result<std::optional<std::string>> sourceRow = sourceDb.store->getMeta("local_ca");
  REQUIRE(sourceRow.ok());
  const auto sourceJson = nlohmann::json::parse(**sourceRow);
  SqliteStore otherDb;
  loadLocalCa(*otherDb.store);
  const auto otherJson = nlohmann::json::parse(**otherDb.store->getMeta("local_ca"));
  const std::string leafPem = issueFor(*source, hostCsr(kHost), {kHost}).chainPem;
  const Result<std::string> leafKeyPem = privateKeyPem(testing::testKey(TestKey::kP256));
  REQUIRE(leafKeyPem.ok());

  const auto json = [](const std::string& cert, const std::string& key) {
    return nlohmann::json{{"cert", cert}, {"key", key}}.dump();
  };
  const std::string cert = sourceJson["cert"];
  const std::string key = sourceJson["key"];
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "not JSON"},
      {"[1,2]", "not JSON"},
      {"{\"cert\": \"x\"}", "expected {\"cert\": PEM, \"key\": PEM}"},
      {"{\"cert\": 1, \"key\": \"x\"}", "expected {\"cert\": PEM, \"key\": PEM}"},
      {json("garbage", key), "the certificate does not parse"},
      {json(cert, "garbage"), "the private key does not parse"},
      {json(cert, otherJson["key"]), "the private key does not match the certificate"},
      {json(leafPem, *leafKeyPem), "the certificate is not a CA"},
  };
  for (const auto& bad : cases) {
    const std::string& row = bad.first;
    const std::string& reason = bad.second;
    CAPTURE(row);
    SqliteStore db;
    REQUIRE(db.store->insertMetaIfAbsent("local_ca", row).ok());
    const Result<std::unique_ptr<LocalCa>> ca = LocalCa::load(*db.store);
    REQUIRE_FALSE(ca.ok());
    CHECK(ca.error().kind == ErrorKind::kInvalid);
    CHECK(ca.error().message == "meta row local_ca does not hold a usable local CA (" + reason +
                                    "); delete the row to have a new one made");
    // The bad row is left alone for the operator to look at.
    CHECK(**db.store->getMeta("local_ca") == row);
  }
}

TEST_CASE("local ca: leaf validity is configurable and never outlives the root") {
  SqliteStore db;
  ManualClock clock(kNowMs);
  const auto ca = loadLocalCa(*db.store, 3'600'000, clock.clock());
  IssuedCertificate issued = issueFor(*ca, hostCsr(kHost), {kHost});
  CHECK(issued.notBeforeMs == (kNowMs - 60'000) / 1000 * 1000);
  CHECK(issued.notAfterMs == (kNowMs + 3'600'000) / 1000 * 1000);

  const int64_t rootNotAfterMs = (kNowMs / 1000 + 3653LL * 86400) * 1000;
  clock.set(rootNotAfterMs - 1'800'000);  // half an hour before the root expires
  issued = issueFor(*ca, hostCsr(kHost), {kHost});
  CHECK(issued.notAfterMs == rootNotAfterMs);
  const X509Ptr leaf = parseCertificate(issued.chainPem);
  CHECK(ASN1_TIME_cmp_time_t(X509_get0_notAfter(leaf.get()), rootNotAfterMs / 1000) == 0);

  clock.set(rootNotAfterMs);
  const Result<IssuedCertificate> expired =
      ca->issue(IssueRequest{buildCsrPem(hostCsr(kHost)), {kHost}}, kNotCancelled);
  REQUIRE_FALSE(expired.ok());
  CHECK(expired.error().kind == ErrorKind::kInternal);
  CHECK(expired.error().message ==
        "the local CA has expired; delete meta row local_ca to have a new one made");

  const Result<std::unique_ptr<LocalCa>> zero = LocalCa::load(*db.store, 0);
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.error().kind == ErrorKind::kInvalid);
}

TEST_CASE("local ca: issue checks the CSR again and honours cancellation") {
  SqliteStore db;
  const auto ca = loadLocalCa(*db.store);
  const std::string csr = buildCsrPem(hostCsr(kHost, true));
  Result<IssuedCertificate> issued = ca->issue(IssueRequest{csr, {kHost}}, kNotCancelled);
  REQUIRE_FALSE(issued.ok());
  CHECK(issued.error().kind == ErrorKind::kInvalid);
  CHECK(issued.error().message ==
        "CSR names must be exactly " + kHost + "; got " + kHost + ", " + kWildcard);

  issued =
      ca->issue(IssueRequest{csr, {"other.tunnel.test", "*.other.tunnel.test"}}, kNotCancelled);
  REQUIRE_FALSE(issued.ok());
  CHECK(issued.error().kind == ErrorKind::kInvalid);

  CsrSpec forged = hostCsr(kHost);
  forged.corruptSignature = true;
  issued = ca->issue(IssueRequest{buildCsrPem(forged), {kHost}}, kNotCancelled);
  REQUIRE_FALSE(issued.ok());
  CHECK(issued.error().message == "CSR signature does not verify");

  const std::atomic<bool> cancelled{true};
  issued = ca->issue(IssueRequest{csr, {kHost, kWildcard}}, cancelled);
  REQUIRE_FALSE(issued.ok());
  CHECK(issued.error().kind == ErrorKind::kUnavailable);
}

TEST_CASE("local ca: writeCaFile replaces the file whole") {
  SqliteStore db;
  const auto ca = loadLocalCa(*db.store);
  const CaTempDir dir;
  const std::string path = dir.file("ca.pem");
  writeFile(path, "an older file\n");
  REQUIRE(ca->writeCaFile(path).ok());
  REQUIRE(ca->writeCaFile(path).ok());
  CHECK(readFile(path) == ca->caCertificatePem());
  // No temporary files left behind.
  size_t entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    CAPTURE(entry.path());
    ++entries;
  }
  CHECK(entries == 1);

  const std::string missing = dir.file("no-such-dir/ca.pem");
  const Status failed = ca->writeCaFile(missing);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().kind == ErrorKind::kInvalid);
  CHECK(
      failed.error().message.starts_with("cannot create " + dir.file("no-such-dir/.ca.pem.tmp-")));
  CHECK(failed.error().message.ends_with(": No such file or directory"));
}

}  // namespace
}  // namespace ot::controld
