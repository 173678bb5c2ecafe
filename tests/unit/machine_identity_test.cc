#include "common/machine_identity.h"

#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace {

// A fresh directory under the system's temporary directory, removed at the end of the test.
struct TemporaryDirectory {
  TemporaryDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ot-machine-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::filesystem::path path;
};

}  // namespace

TEST_CASE("machine ID: made once in the state directory, the same on every later start") {
  TemporaryDirectory temporary;
  ot::MachineIdentitySettings settings;
  settings.stateDir = (temporary.path / "state").string();  // made when missing

  auto first = ot::resolveMachineId(settings);
  REQUIRE(first.ok());
  CHECK(first.value().starts_with("m-"));
  CHECK(ot::validMachineName(first.value()));
  CHECK(std::filesystem::exists(temporary.path / "state" / "machine-id"));

  auto second = ot::resolveMachineId(settings);
  REQUIRE(second.ok());
  CHECK(second.value() == first.value());

  // Nothing but the file is left behind (no temporary files).
  size_t entries = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator(temporary.path / "state"))
    ++entries;
  CHECK(entries == 1);

  // Another state directory is another machine.
  ot::MachineIdentitySettings other;
  other.stateDir = (temporary.path / "other").string();
  auto third = ot::resolveMachineId(other);
  REQUIRE(third.ok());
  CHECK(third.value() != first.value());
}

TEST_CASE("machine ID: an explicit MACHINE_ID wins and leaves the state directory alone") {
  TemporaryDirectory temporary;
  ot::MachineIdentitySettings settings;
  settings.stateDir = temporary.path.string();
  settings.machineId = "fra-1";
  auto id = ot::resolveMachineId(settings);
  REQUIRE(id.ok());
  CHECK(id.value() == "fra-1");
  CHECK_FALSE(std::filesystem::exists(temporary.path / "machine-id"));
}

TEST_CASE("machine ID: a file that holds no ID is refused, not replaced") {
  TemporaryDirectory temporary;
  std::ofstream(temporary.path / "machine-id") << "not an id\n";
  ot::MachineIdentitySettings settings;
  settings.stateDir = temporary.path.string();
  auto id = ot::resolveMachineId(settings);
  REQUIRE_FALSE(id.ok());
  CHECK(id.error().kind == ot::ErrorKind::kInvalid);
  CHECK(id.error().message.find("machine-id") != std::string::npos);
}

TEST_CASE("machine ID: a kept ID written by hand (with a newline) is read back as it is") {
  TemporaryDirectory temporary;
  std::ofstream(temporary.path / "machine-id") << "iad-7\n";
  ot::MachineIdentitySettings settings;
  settings.stateDir = temporary.path.string();
  auto id = ot::resolveMachineId(settings);
  REQUIRE(id.ok());
  CHECK(id.value() == "iad-7");
}

TEST_CASE("machine names: 1 to 64 of A-Z a-z 0-9 . _ -") {
  CHECK(ot::validMachineName("local"));
  CHECK(ot::validMachineName("m-0a1b2c3d4e5f"));
  CHECK(ot::validMachineName(std::string(64, 'a')));
  CHECK_FALSE(ot::validMachineName(""));
  CHECK_FALSE(ot::validMachineName(std::string(65, 'a')));
  CHECK_FALSE(ot::validMachineName("a b"));
  CHECK_FALSE(ot::validMachineName("a\"b"));
}
