//===- MpiTest.cpp - the MPI world without a launcher ---------------------===//
//
// Started without a launcher (as unit tests are), a process is one rank and
// never starts MPI; the launcher variables are what decides. Multi-rank
// runs are tested under mpirun by the end-to-end tests.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/mpi/Mpi.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

using namespace triad::rt;

namespace {

constexpr const char *kLauncherVariables[] = {
    "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS"};

/// Removes the launcher variables for the test's lifetime.
class WithoutLauncher {
public:
  WithoutLauncher() {
    for (const char *name : kLauncherVariables) {
      const char *value = std::getenv(name);
      saved.push_back(value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  ~WithoutLauncher() {
    for (size_t i = 0; i < saved.size(); ++i)
      if (saved[i])
        setenv(kLauncherVariables[i], saved[i]->c_str(), 1);
      else
        unsetenv(kLauncherVariables[i]);
  }

private:
  std::vector<std::optional<std::string>> saved;
};

TEST(Mpi, WithoutALauncherAProcessIsOneRank) {
  WithoutLauncher clean;
  EXPECT_FALSE(mpi::launchedByLauncher());
  auto world = mpi::World::initialize(nullptr, nullptr);
  ASSERT_TRUE(world.ok()) << world.status();
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
  EXPECT_FALSE(world->usesMpi());
  EXPECT_TRUE(world->barrier().ok());
}

TEST(Mpi, LauncherVariablesAreRecognized) {
  for (const char *name : kLauncherVariables) {
    WithoutLauncher clean;
    setenv(name, "2", 1);
    EXPECT_TRUE(mpi::launchedByLauncher()) << name;
  }
  WithoutLauncher clean;
  EXPECT_FALSE(mpi::launchedByLauncher());
}

} // namespace
