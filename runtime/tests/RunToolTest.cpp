//===- RunToolTest.cpp - triad-run on several ranks under mpirun ----------===//
//
// triad-run runs hand-built training plans (tests/PlanBuilder.h) on one rank
// and under `mpirun -np 2` and `-np 4`: a data-parallel job trains like one
// rank; only rank 0 prints; the job's metrics, every rank's own metrics, the
// per-rank and merged traces and the per-rank checkpoint shards are where
// the tool's help says; a job resumes exactly from its checkpoint and the
// checkpoint loads under other meshes; a file that one rank alone cannot
// write fails every rank.
//
//===----------------------------------------------------------------------===//

#include "runtime/init/Philox.h"
#include "runtime/support/Files.h"
#include "runtime/tests/PlanBuilder.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace triad::rt;
using tests::TrainingPlanSpec;

namespace {

/// A fresh folder with the corpus and the plans: one rank, dp=2, and
/// dp=2 x tp=2 (all replicated on tp).
class RunTool : public ::testing::Test {
protected:
  void SetUp() override {
    if (std::system("command -v mpirun > /dev/null 2>&1") != 0)
      GTEST_SKIP() << "mpirun is not installed";
    dir = ::testing::TempDir() + "triad-run-tool-" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name() +
          "-" + std::to_string(getpid());
    ASSERT_EQ(
        std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()),
        0);
    std::string bytes;
    PhiloxKey key{3, 4};
    for (uint32_t i = 0; i < 4000; ++i) {
      uint16_t token = static_cast<uint16_t>((i * 5) % 32);
      if (i % 5 == 0)
        token = static_cast<uint16_t>(philox4x32({i, 0, 0, 0}, key)[0] % 32);
      bytes.push_back(static_cast<char>(token & 0xff));
      bytes.push_back(static_cast<char>(token >> 8));
    }
    ASSERT_TRUE(writeFileAtomically(dir + "/corpus.bin", bytes).ok());
    TrainingPlanSpec spec;
    spec.dropout = 0; // the plan's dropout streams are not yet per replica
    ASSERT_TRUE(
        writeFileAtomically(dir + "/one.plan", tests::buildTrainingPlan(spec))
            .ok());
    spec.mesh = {{"dp", 2}, {"tp", 1}, {"pp", 1}};
    ASSERT_TRUE(
        writeFileAtomically(dir + "/dp2.plan", tests::buildTrainingPlan(spec))
            .ok());
    spec.mesh = {{"dp", 2}, {"tp", 2}, {"pp", 1}};
    ASSERT_TRUE(writeFileAtomically(dir + "/dp2tp2.plan",
                                    tests::buildTrainingPlan(spec))
                    .ok());
  }

  /// Runs triad-run with `args` (on `ranks` ranks under mpirun, or without
  /// it for 0); returns the exit status, the output in `output`.
  int run(int ranks, const std::string &args, std::string &output) {
    for (const auto &[name, value] :
         {std::pair<const char *, const char *>{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
          {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
          {"OMPI_MCA_rmaps_base_oversubscribe", "1"},
          {"OMP_NUM_THREADS", "1"},
          {"OPENBLAS_NUM_THREADS", "1"},
          {"ASAN_OPTIONS", "detect_leaks=0"}})
      setenv(name, value, 1);
    std::string command =
        (ranks > 0 ? "mpirun -np " + std::to_string(ranks) + " " : "") +
        TRIAD_RUN_PATH + " " + args + " 2>&1";
    output.clear();
    FILE *pipe = popen(command.c_str(), "r");
    if (!pipe)
      return -1;
    char buffer[4096];
    size_t read;
    while ((read = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
      output.append(buffer, read);
    int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string train(const std::string &plan, int steps) {
    return dir + "/" + plan + " --data " + dir + "/corpus.bin --steps " +
           std::to_string(steps) + " --seed 3";
  }

  std::vector<nlohmann::json> lines(const std::string &path) {
    absl::StatusOr<std::string> text = readFile(path);
    EXPECT_TRUE(text.ok()) << text.status();
    std::vector<nlohmann::json> records;
    std::istringstream stream(text.ok() ? *text : "");
    for (std::string line; std::getline(stream, line);)
      records.push_back(nlohmann::json::parse(line));
    return records;
  }

  std::vector<double> losses(const std::string &path) {
    std::vector<double> result;
    for (const nlohmann::json &record : lines(path))
      result.push_back(record["loss"].get<double>());
    return result;
  }

  bool exists(const std::string &path) {
    struct stat info;
    return stat(path.c_str(), &info) == 0;
  }

  static int count(const std::string &text, const std::string &what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos;
         at = text.find(what, at + 1))
      ++n;
    return n;
  }

  static void expectClose(const std::vector<double> &a,
                          const std::vector<double> &b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_LE(std::abs(a[i] - b[i]),
                1e-5 * std::max(std::abs(a[i]), std::abs(b[i])))
          << "record " << i << ": " << a[i] << " vs " << b[i];
  }

  std::string dir;
};

TEST_F(RunTool, DataParallelJobTrainsLikeOneRank) {
  std::string output;
  ASSERT_EQ(
      run(0, train("one.plan", 4) + " --metrics " + dir + "/one.jsonl", output),
      0)
      << output;
  ASSERT_EQ(run(2,
                train("dp2.plan", 4) + " --metrics " + dir +
                    "/two.jsonl --trace " + dir + "/trace.json --save " + dir +
                    "/ckpt",
                output),
            0)
      << output;
  // Rank 0 alone prints.
  EXPECT_EQ(count(output, "triad-run: plan"), 1) << output;
  EXPECT_NE(output.find("mesh dp=2 x tp=1 x pp=1 (2 ranks)"), std::string::npos)
      << output;
  EXPECT_EQ(count(output, "\nstep "), 4) << output;
  EXPECT_EQ(count(output, "triad-run: saved step 4"), 1) << output;
  expectClose(losses(dir + "/two.jsonl"), losses(dir + "/one.jsonl"));

  // Every rank's own records: its coordinates and the (global) loss.
  std::vector<double> jobLosses = losses(dir + "/two.jsonl");
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<nlohmann::json> records =
        lines(dir + "/two.rank" + std::to_string(rank) + ".jsonl");
    ASSERT_EQ(records.size(), 4u);
    for (size_t i = 0; i < records.size(); ++i) {
      EXPECT_EQ(records[i]["rank"], rank);
      EXPECT_EQ(records[i]["coordinates"]["dp"], rank);
      EXPECT_EQ(records[i]["step"], i + 1);
      EXPECT_EQ(records[i]["results"]["loss"].get<double>(), jobLosses[i]);
    }
  }

  // The per-rank traces, and the merged one with a process per rank.
  EXPECT_TRUE(exists(dir + "/trace.rank0.json"));
  EXPECT_TRUE(exists(dir + "/trace.rank1.json"));
  auto merged = nlohmann::json::parse(*readFile(dir + "/trace.json"));
  std::set<int> processes;
  int started = 0, waited = 0;
  for (const nlohmann::json &event : merged["traceEvents"]) {
    if (event["name"] == "step 1")
      processes.insert(event["pid"].get<int>());
    // Each all-reduce starts, and its completion is waited for later.
    started += event["name"] == "AllReduce";
    waited += event["name"] == "wait AllReduce";
  }
  EXPECT_EQ(processes, (std::set<int>{0, 1}));
  EXPECT_GT(started, 0);
  EXPECT_EQ(waited, started);

  // A shard per rank, the index and latest.
  std::string step = dir + "/ckpt/step-00000004";
  EXPECT_TRUE(exists(step + "/rank-00000.safetensors"));
  EXPECT_TRUE(exists(step + "/rank-00001.safetensors"));
  auto index = nlohmann::json::parse(*readFile(step + "/index.json"));
  EXPECT_EQ(index["world_size"], 2);
  EXPECT_EQ(index["mesh"], nlohmann::json::parse(R"([["dp", 2], ["tp", 1],
                                                     ["pp", 1]])"));
  EXPECT_EQ(*readFile(dir + "/ckpt/latest"), "step-00000004\n");
}

TEST_F(RunTool, ResumesExactlyAndLoadsUnderOtherMeshes) {
  std::string output;
  ASSERT_EQ(run(2, train("dp2.plan", 5) + " --metrics " + dir + "/full.jsonl",
                output),
            0)
      << output;
  ASSERT_EQ(run(2, train("dp2.plan", 3) + " --save " + dir + "/ckpt", output),
            0)
      << output;
  ASSERT_EQ(run(2,
                train("dp2.plan", 5) + " --load " + dir + "/ckpt --metrics " +
                    dir + "/resumed.jsonl",
                output),
            0)
      << output;
  EXPECT_NE(output.find("resuming from"), std::string::npos) << output;
  std::vector<double> full = losses(dir + "/full.jsonl");
  std::vector<double> tail(full.begin() + 3, full.end());
  EXPECT_EQ(losses(dir + "/resumed.jsonl"), tail); // bitwise

  // The same checkpoint on one rank, and on a 2 x 2 mesh.
  ASSERT_EQ(run(0,
                train("one.plan", 5) + " --load " + dir + "/ckpt --metrics " +
                    dir + "/one.jsonl",
                output),
            0)
      << output;
  expectClose(losses(dir + "/one.jsonl"), tail);
  ASSERT_EQ(run(4,
                train("dp2tp2.plan", 5) + " --load " + dir +
                    "/ckpt --metrics " + dir + "/four.jsonl",
                output),
            0)
      << output;
  expectClose(losses(dir + "/four.jsonl"), tail);
  // Rank 3 of the 2 x 2 mesh is (dp 1, tp 1).
  std::vector<nlohmann::json> rank3 = lines(dir + "/four.rank3.jsonl");
  ASSERT_FALSE(rank3.empty());
  EXPECT_EQ(rank3[0]["coordinates"],
            nlohmann::json::parse(R"({"dp": 1, "tp": 1, "pp": 0})"));
}

TEST_F(RunTool, AFileOneRankCannotWriteFailsEveryRank) {
  // Rank 1's own metrics file cannot be created: a folder is in its way.
  ASSERT_EQ(mkdir((dir + "/m.rank1.jsonl").c_str(), 0755), 0);
  std::string output;
  EXPECT_NE(
      run(2, train("dp2.plan", 2) + " --metrics " + dir + "/m.jsonl", output),
      0);
  EXPECT_NE(output.find("triad-run: error: --metrics: cannot write '" + dir +
                        "/m.rank1.jsonl'"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("triad-run: error: rank 1 failed (see its error)"),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find("step    1"), std::string::npos) << output;
}

} // namespace
