// The distributed suite: starts dist_worker as 2 and 4 processes on
// loopback (fork/exec, STRATA_RANK/... set, a free port or a file store),
// bounds each run in time, collects exit statuses and output, and checks
// them; and runs `strata launch` the same way (harness.hpp).
#include "harness.hpp"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace strata_dist_test;

// --- collectives ------------------------------------------------------------

TEST(Distributed, EveryCollectiveMatchesTheReferenceOn2Ranks) {
  expect_all_pass(run_ranks({.world = 2, .scenario = "collectives"}));
}

TEST(Distributed, EveryCollectiveMatchesTheReferenceOn4Ranks) {
  expect_all_pass(run_ranks({.world = 4, .scenario = "collectives"}));
}

TEST(Distributed, FileStoreRendezvous) {
  expect_all_pass(run_ranks({.world = 2, .scenario = "async", .file_store = true}));
}

TEST(Distributed, WorkRunsInIssueOrder) {
  expect_all_pass(run_ranks({.world = 4, .scenario = "async"}));
}

TEST(Distributed, OneRankGroupWorks) {
  expect_all_pass(run_ranks({.world = 1, .scenario = "async"}));
}

TEST(Distributed, MismatchedTensorsAreNamedOnEveryRank) {
  auto results = run_ranks({.world = 3, .scenario = "mismatch"});
  expect_all_pass(results);
  for (size_t r = 0; r < results.size(); ++r) {
    const std::string& out = results[r].output;
    std::string me = "all_reduce on rank " + std::to_string(r) + " of 3: the ranks disagree on the collective's tensors: ";
    EXPECT_TRUE(contains(out, me + "ranks 0, 2: f32[3] op sum; rank 1: f32[4] op sum")) << describe(results);
    EXPECT_TRUE(contains(out, me + "ranks 0, 2: f32[3] op sum; rank 1: f64[3] op sum")) << describe(results);
  }
  EXPECT_TRUE(contains(results[1].output, "tensor f32[2, 3] on cpu:0 is not contiguous (strides [1, 2])"))
      << describe(results);
  EXPECT_TRUE(contains(results[0].output, "all_reduce on rank 0 of 3: rank 1 could not take part")) << describe(results);
}

// Device collectives through the commhost test plugin (strata.collectives
// over POSIX shared memory): the group's device path without a GPU.
// gather, scatter, all_to_all, send/recv around a ring and sub-groups (the
// even ranks; the odd ranks in reverse order), with their bad arguments.
TEST(Distributed, GatherScatterAllToAllSendRecvAndSubGroupsOn3Ranks) {
  expect_all_pass(run_ranks({.world = 3, .scenario = "more_collectives"}));
}
TEST(Distributed, GatherScatterAllToAllSendRecvAndSubGroupsOn4Ranks) {
  expect_all_pass(run_ranks({.world = 4, .scenario = "more_collectives"}));
}

// A send and a receive of different sizes: both end at the timeout with an
// error naming the peer, the tag and the tensor (never bytes overrunning a
// buffer).
TEST(Distributed, SendAndRecvOfDifferentSizesTimeOutNamingBothEnds) {
  expect_all_pass(run_ranks({.world = 2, .scenario = "p2p_mismatch", .env = {{"STRATA_DIST_TIMEOUT_MS", "1500"}}}));
}

TEST(Distributed, DeviceCollectivesThroughAPluginOn2Ranks) {
  expect_all_pass(run_ranks({.world = 2, .scenario = "device_collectives",
                             .env = {{"STRATA_PLUGIN_PATH", COMMHOST_PLUGIN_DIR}}}));
}

TEST(Distributed, DeviceCollectivesThroughAPluginOn3Ranks) {
  expect_all_pass(run_ranks({.world = 3, .scenario = "device_collectives",
                             .env = {{"STRATA_PLUGIN_PATH", COMMHOST_PLUGIN_DIR}}}));
}

TEST(Distributed, TensorsACollectiveCannotTakeAreClearErrors) {
  expect_all_pass(run_ranks({.world = 2, .scenario = "bad_device"}));
}

// --- failures -------------------------------------------------------------------

TEST(Distributed, ARankThatDiesFailsTheOthersInsteadOfHanging) {
  auto start = std::chrono::steady_clock::now();
  auto results = run_ranks({.world = 3, .scenario = "peer_dies", .env = {{"STRATA_DIST_TIMEOUT_MS", "15000"}}});
  EXPECT_EQ(results[1].status, 7) << describe(results);
  EXPECT_EQ(results[0].status, 0) << describe(results);
  EXPECT_EQ(results[2].status, 0) << describe(results);
  // Every survivor reports the loss and names rank 1. Gloo names the broken
  // connection by an address: the peer's listening address maps to its rank
  // directly; a connection the peer opened shows an ephemeral port, and then
  // the group asks the TCP store whose liveness key went with its
  // connection (docs/distributed.md, "Errors and timeouts").
  for (int r : {0, 2}) {
    const std::string me = "ERROR: all_reduce on rank " + std::to_string(r) + " of 3: lost ";
    const std::string& out = results[static_cast<size_t>(r)].output;
    EXPECT_TRUE(contains(out, me + "rank 1 ")) << describe(results);
  }
  EXPECT_TRUE(contains(results[2].output, "the group is unusable after an earlier failure")) << describe(results);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << describe(results);
}

// The same with the address lookup switched off (a test hook): the ranks
// learn who is gone from the TCP store, where each rank's liveness key lives
// as long as its connection to the store.
TEST(Distributed, ADeadRankIsNamedThroughTheStoresLivenessKeys) {
  auto results = run_ranks({.world = 4,
                            .scenario = "peer_dies",
                            .env = {{"STRATA_DIST_TIMEOUT_MS", "15000"}, {"STRATA_DIST_TEST_NAME_BY_STORE", "1"}}});
  EXPECT_EQ(results[1].status, 7) << describe(results);
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(results[static_cast<size_t>(r)].status, 0) << describe(results);
    EXPECT_TRUE(contains(results[static_cast<size_t>(r)].output,
                         "ERROR: all_reduce on rank " + std::to_string(r) + " of 4: lost rank 1 during"))
        << describe(results);
  }
}

// Four ranks, one killed with SIGKILL after the first collective, a few
// times over (a survivor once named another survivor — one that had exited
// after its own error — in 14 of 48 cases): every survivor must name the
// rank that died.
TEST(Distributed, EverySurvivorNamesTheKilledRankOf4) {
  for (int victim : {1, 2, 3, 2}) {
    const std::string done = file_store_dir();  // an empty directory for the survivors' marks
    auto results = run_ranks({.world = 4,
                              .scenario = "peer_killed",
                              .env = {{"STRATA_DIST_TIMEOUT_MS", "15000"},
                                      {"DIST_TEST_VICTIM", std::to_string(victim)},
                                      {"DIST_TEST_DONE_DIR", done}}});
    std::filesystem::remove_all(done);
    EXPECT_EQ(results[static_cast<size_t>(victim)].status, 128 + SIGKILL) << describe(results);
    for (int r = 0; r < 4; ++r) {
      if (r == victim) continue;
      const std::string& out = results[static_cast<size_t>(r)].output;
      EXPECT_EQ(results[static_cast<size_t>(r)].status, 0) << "victim " << victim << "\n" << describe(results);
      const std::string me = "ERROR: all_reduce on rank " + std::to_string(r) + " of 4: lost rank " + std::to_string(victim);
      EXPECT_TRUE(contains(out, me + " (") || contains(out, me + " during")) << "victim " << victim << "\n"
                                                                            << describe(results);
    }
  }
}

// With the consistency check off, a rank passing f64 (or one more element)
// where the others pass f32 used to abort a rank inside Gloo (a message
// larger than the receive buffer, asserted on Gloo's event-loop thread). The
// data's Gloo tag now carries its layout: the ranks wait on different
// slots, the first to time out drops its connections, and every rank gets a
// DistributedError that names the check being off.
TEST(Distributed, UncheckedMismatchedTensorsTimeOutInsteadOfAborting) {
  for (const char* what : {"dtype", "numel"}) {
    const std::string done = file_store_dir();  // an empty directory for the ranks' marks
    auto results = run_ranks({.world = 2,
                              .scenario = "unchecked_mismatch",
                              .env = {{"STRATA_DIST_CHECK", "0"},
                                      {"STRATA_DIST_TIMEOUT_MS", "1500"},
                                      {"DIST_TEST_MISMATCH", what},
                                      {"DIST_TEST_DONE_DIR", done}}});
    std::filesystem::remove_all(done);
    expect_all_pass(results);  // each rank got a DistributedError that names STRATA_DIST_CHECK=0
    // The first to time out closes its connections: the other may learn it so.
    int timed_out = 0;
    for (int r = 0; r < 2; ++r)
      timed_out += contains(results[static_cast<size_t>(r)].output,
                            "ERROR: all_reduce on rank " + std::to_string(r) + " of 2: timed out after 1500 ms");
    EXPECT_GE(timed_out, 1) << what << "\n" << describe(results);
  }
}

// Ranks started with different world sizes fail at once, naming the sizes,
// on both sides (they once ended in Gloo's abort); the rank that notices
// first tells the other through the store.
TEST(Distributed, RanksWithDifferentWorldSizesAreNamed) {
  auto start = std::chrono::steady_clock::now();
  auto results = run_ranks({.world = 2, .scenario = "init_error", .rank_env = {{1, {{"STRATA_WORLD_SIZE", "3"}}}}});
  expect_all_pass(results);
  for (const auto& r : results) EXPECT_TRUE(contains(r.output, " was started with a world size of ")) << describe(results);
  EXPECT_TRUE(contains(results[1].output, "init_process_group on rank 1 of 3: ")) << describe(results);
  results = run_ranks({.world = 2, .scenario = "init_error", .rank_env = {{0, {{"STRATA_WORLD_SIZE", "3"}}}}});
  expect_all_pass(results);
  EXPECT_TRUE(contains(results[1].output, "rank 0 was started with a world size of 3, rank 1 with 2 "
                                          "(STRATA_WORLD_SIZE or Options::world_size)"))
      << describe(results);
  EXPECT_TRUE(contains(results[0].output, "init_process_group on rank 0 of 3: another rank gave up: rank 0 was "
                                          "started with a world size of 3, rank 1 with 2"))
      << describe(results);
  // Nobody waited for the 20 s timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << describe(results);
}

// Two processes given the same rank: the second to claim it is refused
// with a DistributedError saying so, and the job goes on with the first.
TEST(Distributed, TwoProcessesClaimingOneRankAreRefusedNotAborted) {
  for (int run = 0; run < 3; ++run) {
    auto results = run_ranks({.world = 2, .scenario = "join_or_refused", .rank_env = {{2, {{"STRATA_RANK", "1"}}}},
                              .ranks_started = 3});
    expect_all_pass(results);
    int refused = 0;
    for (size_t r : {1, 2})
      refused += contains(results[r].output, "ERROR: init_process_group on rank 1 of 2: another process already "
                                             "joined as rank 1 at the TCP store at 127.0.0.1:");
    EXPECT_EQ(refused, 1) << describe(results);
    EXPECT_FALSE(contains(results[0].output, "ERROR")) << describe(results);
  }
}

TEST(Distributed, AStalledPeerTimesOut) {
  auto results = run_ranks({.world = 2, .scenario = "peer_stalls", .env = {{"STRATA_DIST_TIMEOUT_MS", "1500"}}});
  expect_all_pass(results);
  EXPECT_TRUE(contains(results[0].output, "ERROR: all_reduce on rank 0 of 2: timed out after 1500 ms waiting for rank 1"))
      << describe(results);
}

TEST(Distributed, RankNotBelowWorldSize) {
  auto results = run_ranks({.world = 2, .scenario = "init_error", .rank_env = {{0, {{"STRATA_RANK", "2"}}}},
                            .ranks_started = 1});
  expect_all_pass(results);
  EXPECT_TRUE(contains(results[0].output, "rank 2 (STRATA_RANK) is not below the world size 2")) << describe(results);
}

TEST(Distributed, WorldSizeBelowOne) {
  auto results = run_ranks({.world = 0, .scenario = "init_error", .rank_env = {{0, {{"STRATA_RANK", "0"}}}},
                            .ranks_started = 1});
  expect_all_pass(results);
  EXPECT_TRUE(contains(results[0].output, "world size 0 (STRATA_WORLD_SIZE) must be >= 1")) << describe(results);
}

// Launchers (docs/distributed.md, "Launchers"): each rank's variables as
// torchrun, Open MPI, MPICH and Slurm set them, with no STRATA_RANK or
// STRATA_WORLD_SIZE ("" is unset to the library).
namespace launchers {

Ranks as_launched(int world, const std::function<Env(int)>& vars) {
  Ranks spec{.world = world, .scenario = "whoami"};
  for (int r = 0; r < world; ++r) {
    Env e{{"STRATA_RANK", ""}, {"STRATA_WORLD_SIZE", ""}};
    for (const auto& [k, v] : vars(r)) e[k] = v;
    spec.rank_env[r] = e;
  }
  return spec;
}

void expect_joined(const std::vector<Result>& results, int world, const std::string& launcher,
                   const std::string& rank_from) {
  expect_all_pass(results);
  const int sum = world * (world - 1) / 2;
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(contains(results[static_cast<size_t>(r)].output,
                         "whoami: rank " + std::to_string(r) + " of " + std::to_string(world) + " local " +
                             std::to_string(r) + " launcher " + launcher + " from " + rank_from))
        << describe(results);
    EXPECT_TRUE(contains(results[static_cast<size_t>(r)].output, "sum " + std::to_string(sum))) << describe(results);
  }
}

}  // namespace launchers

TEST(Distributed, TorchrunOpenMpiMpichAndSlurmVariablesAreRead) {
  using launchers::as_launched;
  using launchers::expect_joined;
  auto s = [](int r) { return std::to_string(r); };
  expect_joined(run_ranks(as_launched(2, [&](int r) {
                  return Env{{"RANK", s(r)}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", s(r)}};
                })),
                2, "torchrun", "RANK");
  expect_joined(run_ranks(as_launched(3, [&](int r) {
                  return Env{{"OMPI_COMM_WORLD_RANK", s(r)},
                             {"OMPI_COMM_WORLD_SIZE", "3"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", s(r)},
                             {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}};
                })),
                3, "Open MPI", "OMPI_COMM_WORLD_RANK");
  expect_joined(run_ranks(as_launched(2, [&](int r) {
                  return Env{{"PMI_RANK", s(r)}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", s(r)}};
                })),
                2, "MPICH", "PMI_RANK");
  // Slurm: the rendezvous address is the node list's first host. The test
  // gives a list whose first host is this one ("localhost[]" is no list:
  // an address given as a host list entry that names this machine).
  expect_joined(run_ranks(as_launched(2, [&](int r) {
                  return Env{{"SLURM_PROCID", s(r)},     {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", s(r)},
                             {"SLURM_JOB_NODELIST", "localhost,other[1-3]"}, {"STRATA_MASTER_ADDR", ""}};
                })),
                2, "Slurm", "SLURM_PROCID");
  // An outer launcher's variables under an inner one's: mpirun in an sbatch
  // script, whose SLURM_PROCID=0 every rank inherits.
  expect_joined(run_ranks(as_launched(2, [&](int r) {
                  return Env{{"OMPI_COMM_WORLD_RANK", s(r)}, {"OMPI_COMM_WORLD_SIZE", "2"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", s(r)}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}};
                })),
                2, "Open MPI", "OMPI_COMM_WORLD_RANK");
}

TEST(Distributed, LaunchersThatContradictAreRefusedNamingBoth) {
  using launchers::as_launched;
  auto refused = [](const Ranks& spec, const std::string& message) {
    Ranks one = spec;
    one.scenario = "init_error";
    one.ranks_started = 1;
    auto results = run_ranks(one);
    expect_all_pass(results);
    EXPECT_TRUE(contains(results[0].output, message)) << describe(results);
  };
  refused(as_launched(2, [](int) { return Env{{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}}; }),
          "rank 2 (SLURM_PROCID) is not below the world size 2 (SLURM_NTASKS)");
  refused(as_launched(2, [](int) { return Env{{"RANK", "0"}}; }),
          "WORLD_SIZE is not set, but RANK=0 is (torchrun's variables come together");
  refused(as_launched(2, [](int) { return Env{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}; }),
          "LOCAL_RANK=1 cannot be the local rank of RANK=0 (torchrun's variables contradict each other)");
  refused(as_launched(2, [](int) { return Env{{"STRATA_RANK", "0"}, {"STRATA_WORLD_SIZE", "4"}, {"RANK", "0"},
                                              {"WORLD_SIZE", "2"}}; }),
          "STRATA_RANK=0 and STRATA_WORLD_SIZE=4 contradict torchrun's RANK=0 and WORLD_SIZE=2");
  refused(as_launched(2, [](int) { return Env{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                                              {"SLURM_JOB_NODELIST", "node[x-y]"}, {"STRATA_MASTER_ADDR", ""}}; }),
          "SLURM_JOB_NODELIST=\"node[x-y]\" is not a Slurm host list");
  refused(as_launched(4, [](int) { return Env{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"STRATA_MASTER_ADDR", ""}}; }),
          "Open MPI started 4 ranks, 2 on this host: set MASTER_ADDR");
}

TEST(Distributed, MissingEnvironmentIsNamed) {
  // Rank 0 alone, one variable set: the message names it and what is wrong.
  const std::vector<std::tuple<std::string, std::string, std::string>> cases{
      {"STRATA_WORLD_SIZE", "", "STRATA_WORLD_SIZE is not set"},
      {"STRATA_RANK", "x1", "STRATA_RANK=\"x1\" is not an integer"},
      // A number beyond an int is out of range, not "not an integer".
      {"STRATA_WORLD_SIZE", "2147483648",
       "STRATA_WORLD_SIZE=\"2147483648\" is out of range (-2147483648..2147483647)"},
      {"STRATA_RANK", "-1", "rank -1 (STRATA_RANK) must be >= 0"},
      {"STRATA_WORLD_SIZE", "2147483647", "world size 2147483647 (STRATA_WORLD_SIZE) is more than 1048576"}};
  for (const auto& [name, value, message] : cases) {
    auto results = run_ranks({.world = 2, .scenario = "init_error", .rank_env = {{0, {{name, value}}}},
                              .ranks_started = 1});
    expect_all_pass(results);
    EXPECT_TRUE(contains(results[0].output, message)) << describe(results);
  }
}

TEST(Distributed, PortInUseIsNamed) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::string port = std::to_string(ntohs(a.sin_port));
  auto results = run_ranks({.world = 2, .scenario = "init_error", .env = {{"STRATA_MASTER_PORT", port}},
                            .ranks_started = 1});
  ::close(fd);
  expect_all_pass(results);
  EXPECT_TRUE(contains(results[0].output, "init_process_group on rank 0 of 2: TCP store: port " + port + " is in use"))
      << describe(results);
}

TEST(Distributed, APeerThatNeverArrivesIsNamed) {
  // Rank 0 alone: rank 1 never comes.
  auto results = run_ranks({.world = 2, .scenario = "init_error", .env = {{"STRATA_DIST_TIMEOUT_MS", "1500"}},
                            .ranks_started = 1});
  expect_all_pass(results);
  EXPECT_TRUE(contains(results[0].output, "timed out after 1500 ms waiting for rank 1 to arrive at the TCP store at 127.0.0.1:"))
      << describe(results);
  // Rank 1 alone: no store to reach.
  results = run_ranks({.world = 2, .scenario = "init_error", .env = {{"STRATA_DIST_TIMEOUT_MS", "1500"}},
                       .rank_env = {{0, {{"STRATA_RANK", "1"}}}}, .ranks_started = 1});
  expect_all_pass(results);
  EXPECT_TRUE(contains(results[0].output, "rank 1 of 2: could not reach the TCP store at 127.0.0.1:")) << describe(results);
  EXPECT_TRUE(contains(results[0].output, "within 1500 ms")) << describe(results);
  // File store: ranks 1 and 2 of 3 never come.
  results = run_ranks({.world = 3, .scenario = "init_error", .env = {{"STRATA_DIST_TIMEOUT_MS", "1500"}},
                       .file_store = true, .ranks_started = 1});
  expect_all_pass(results);
  EXPECT_TRUE(contains(results[0].output, "waiting for ranks 1, 2 to arrive at the file store")) << describe(results);
}

// --- strata launch ----------------------------------------------------------------

std::vector<Result> launch(const std::vector<std::string>& args, const Env& env = {}) {
  std::vector<std::string> argv{STRATA_CLI, "launch"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_all({argv}, {env}, std::chrono::seconds(60));
}

TEST(Launch, RunsNRanksWithPrefixedOutput) {
  auto r = launch({"-n", "3", DIST_WORKER, "launch_probe"});
  ASSERT_EQ(r[0].status, 0) << r[0].output;
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(contains(r[0].output, "[rank " + std::to_string(k) + "] hello from rank " + std::to_string(k) + " of 3"))
        << r[0].output;
    EXPECT_TRUE(contains(r[0].output, "[rank " + std::to_string(k) + "] to stderr from rank " + std::to_string(k)))
        << r[0].output;
  }
}

TEST(Launch, RanksRendezvousUnderLaunch) {
  auto r = launch({"-n", "2", DIST_WORKER, "async"});
  EXPECT_EQ(r[0].status, 0) << r[0].output;
}

// launch is its ranks' innermost launcher: it gives each its local rank and
// clears an outer launcher's variables (launch run by srun inside a pod).
TEST(Launch, RanksGetTheirLocalRankAndNoOuterLaunchersVariables) {
  auto r = launch({"-n", "2", DIST_WORKER, "whoami"},
                  {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"RANK", "5"}, {"WORLD_SIZE", "9"},
                   {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  ASSERT_EQ(r[0].status, 0) << r[0].output;
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(contains(r[0].output, "[rank " + std::to_string(k) + "] whoami: rank " + std::to_string(k) +
                                          " of 2 local " + std::to_string(k) +
                                          " launcher strata launch from STRATA_RANK"))
        << r[0].output;
  }
}

// --max-restarts: every rank restarts when one fails (STRATA_RESTART_COUNT
// tells the attempt); an exhausted budget names the last failure.
TEST(Launch, MaxRestartsRestartsEveryRankAndNamesTheLastFailureWhenSpent) {
  auto r = launch({"--max-restarts", "2", "-n", "2", "/bin/sh", "-c",
                   "echo attempt $STRATA_RESTART_COUNT; [ \"$STRATA_RANK\" = 1 ] && [ $STRATA_RESTART_COUNT -lt 2 ] && exit 4; "
                   "exit 0"});
  ASSERT_EQ(r[0].status, 0) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "strata launch: restarting the 2 ranks (restart 2 of 2)")) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "[rank 1] attempt 2")) << r[0].output;
  r = launch({"--max-restarts", "1", "-n", "2", "/bin/sh", "-c", "[ \"$STRATA_RANK\" = 1 ] && exit 3; sleep 30"});
  EXPECT_EQ(r[0].status, 3) << r[0].output;
  EXPECT_TRUE(contains(r[0].output,
                       "strata launch: giving up after 1 restart: the last failure: rank 1 exited with status 3"))
      << r[0].output;
  r = launch({"--max-restarts", "-1", "-n", "2", "/bin/true"});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "--max-restarts must be at least 0 (got -1)")) << r[0].output;
  r = launch({"--max-restarts", "1", "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
              "--master-port", "29999", "-n", "1", "/bin/true"});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "--max-restarts restarts the ranks of one node")) << r[0].output;
}

TEST(Launch, UsesTheGivenMasterPort) {
  std::string port = std::to_string(free_port());
  auto r = launch({"-n", "2", "--master-port", port, DIST_WORKER, "launch_probe"});
  EXPECT_EQ(r[0].status, 0) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "[rank 1] hello from rank 1 of 2 port " + port)) << r[0].output;
}

TEST(Launch, AFailingRankEndsTheOthersWithItsStatus) {
  auto start = std::chrono::steady_clock::now();
  auto r = launch({"-n", "3", DIST_WORKER, "launch_probe"}, {{"DIST_TEST_EXIT", "5"}});
  EXPECT_EQ(r[0].status, 5) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "strata launch: rank 1 exited with status 5")) << r[0].output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << "the sleeping ranks were not ended";
}

TEST(Launch, ARankKilledBySignalGives128PlusSignal) {
  auto r = launch({"-n", "2", DIST_WORKER, "launch_probe"}, {{"DIST_TEST_SIGNAL", std::to_string(SIGKILL)}});
  EXPECT_EQ(r[0].status, 128 + SIGKILL) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "strata launch: rank 1 was killed by signal 9")) << r[0].output;
}

// launch reports the rank that ended first: rank 1 is killed, and the
// others exit 1 the moment they notice. Reaping in index order once lost
// the kill (exit 1 instead of 137) in 2 of 13 runs; the kernel may also let
// a survivor be reaped before the killed rank, which launch's 1 s of
// settling covers.
TEST(Launch, TheFirstRankToEndDecidesTheStatus) {
  for (int run = 0; run < 5; ++run) {
    auto r = launch({"-n", "3", DIST_WORKER, "die_together"});
    EXPECT_EQ(r[0].status, 128 + SIGKILL) << "run " << run << "\n" << r[0].output;
    EXPECT_TRUE(contains(r[0].output, "strata launch: rank 1 was killed by signal 9")) << r[0].output;
  }
}

/// The job tokens the ranks of a launch printed ("[rank k] token=...").
std::vector<std::string> tokens(const std::string& output) {
  std::vector<std::string> out;
  for (size_t at = output.find("] token="); at != std::string::npos; at = output.find("] token=", at + 1))
    out.push_back(output.substr(at + 8, output.find('\n', at) - at - 8));
  return out;
}

bool is_hex_token(const std::string& t) {
  return t.size() == 32 && t.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// Every rank of a run gets the run's job token (128 random bits, in hex);
// another run gets another; a token launch is given is passed on.
TEST(Launch, EveryRankGetsTheRunsJobToken) {
  const std::vector<std::string> echo{"-n", "2", "/bin/sh", "-c", "echo token=$STRATA_JOB_TOKEN"};
  auto first = launch(echo);
  auto second = launch(echo);
  ASSERT_EQ(first[0].status, 0) << first[0].output;
  auto a = tokens(first[0].output), b = tokens(second[0].output);
  ASSERT_EQ(a.size(), 2u) << first[0].output;
  ASSERT_EQ(b.size(), 2u) << second[0].output;
  EXPECT_TRUE(is_hex_token(a[0])) << a[0];
  EXPECT_EQ(a[0], a[1]);
  EXPECT_EQ(b[0], b[1]);
  EXPECT_NE(a[0], b[0]);
  auto given = launch(echo, {{"STRATA_JOB_TOKEN", "ours"}});
  EXPECT_EQ(tokens(given[0].output), (std::vector<std::string>{"ours", "ours"})) << given[0].output;
}

#ifdef EXAMPLE_DIGITS
// The demo under launch with another --batch on each rank: it would train
// on slices that do not fit together without a word; it must refuse,
// naming the flag and every rank's value.
TEST(Launch, TheDigitsDemoRefusesRanksWithDifferentArguments) {
  auto r = launch({"-n", "2", "/bin/sh", "-c", "exec \"$0\" --quiet --epochs 1 --distributed --batch $((32 + 32 * STRATA_RANK))",
                   EXAMPLE_DIGITS},
                  {{"OMP_NUM_THREADS", "1"}});
  EXPECT_NE(r[0].status, 0) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "--batch differs across the ranks (rank 0: 32, rank 1: 64): start every rank "
                                    "with the same arguments"))
      << r[0].output;
}
#endif

TEST(Launch, AMissingProgramIsAClearError) {
  auto r = launch({"-n", "2", "/nonexistent/program", "x"});
  EXPECT_EQ(r[0].status, 127) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "cannot run \"/nonexistent/program\"")) << r[0].output;
  r = launch({"-n", "2", "strata-no-such-program-on-path"});
  EXPECT_EQ(r[0].status, 127) << r[0].output;
}

TEST(Launch, BadArgumentsAreRefused) {
  auto r = launch({"-n", "0", DIST_WORKER});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  r = launch({"-n", "1", "--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1", "--master-port", "1",
              DIST_WORKER});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "--node-rank 2 is not in 0..1")) << r[0].output;
  r = launch({"-n", "1", "--nnodes", "2", "--node-rank", "1", DIST_WORKER});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "needs --master-addr and --master-port")) << r[0].output;
  // World sizes that do not fit an int once made negative ranks.
  r = launch({"-n", "2", "--nnodes", "1073741824", "--master-addr", "127.0.0.1", "--master-port", "1", DIST_WORKER});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "--nnodes 1073741824 x -n 2 = 2147483648 ranks: more than 2147483647")) << r[0].output;
  r = launch({"-n", "2147483647", "--hosts", "a,b", DIST_WORKER});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "2 hosts x -n 2147483647 = 4294967294 ranks")) << r[0].output;
  r = launch({"-n", "2", "--nnodes", "99999999999", DIST_WORKER});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  r = launch({"-n", "2", "--master-port", "-5", DIST_WORKER});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "--master-port -5 is not in 1..65535")) << r[0].output;
}

// Two nodes on loopback: one launch per node, 2 ranks each, form one world
// of 4 (node 1 holds ranks 2 and 3) and run collectives across it.
TEST(Launch, TwoNodesFormOneWorld) {
  const std::string port = std::to_string(free_port());
  auto node = [&](int r, const char* scenario) {
    return std::vector<std::string>{STRATA_CLI, "launch", "-n", "2", "--nnodes", "2", "--node-rank", std::to_string(r),
                                    "--master-addr", "127.0.0.1", "--master-port", port, DIST_WORKER, scenario};
  };
  auto r = run_all({node(0, "async"), node(1, "async")}, {{}, {}}, std::chrono::seconds(60));
  EXPECT_EQ(r[0].status, 0) << r[0].output;
  EXPECT_EQ(r[1].status, 0) << r[1].output;
  const std::string port2 = std::to_string(free_port());
  auto probe = [&](int n) {
    return std::vector<std::string>{STRATA_CLI, "launch", "-n", "2", "--nnodes", "2", "--node-rank", std::to_string(n),
                                    "--master-addr", "127.0.0.1", "--master-port", port2, DIST_WORKER, "launch_probe"};
  };
  r = run_all({probe(0), probe(1)}, {{}, {}}, std::chrono::seconds(60));
  EXPECT_TRUE(contains(r[1].output, "[rank 3] hello from rank 3 of 4")) << r[1].output;
  EXPECT_TRUE(contains(r[0].output, "[rank 1] hello from rank 1 of 4")) << r[0].output;
}

// --hosts: one launch per host through a remote shell; here the stand-in
// fake_remote_shell.sh, which runs the command locally in a bare environment.
std::vector<std::string> hosts_launch(const std::string& hosts, const std::string& port,
                                      const std::vector<std::string>& program) {
  std::vector<std::string> args{"-n", "2", "--hosts", hosts, "--launcher", FAKE_REMOTE_SHELL, "--master-port", port};
  args.insert(args.end(), program.begin(), program.end());
  return args;
}

TEST(Launch, HostsStartOneNodePerHost) {
  const std::string port = std::to_string(free_port());
  auto r = launch(hosts_launch("127.0.0.1,localhost", port, {DIST_WORKER, "launch_probe"}));
  ASSERT_EQ(r[0].status, 0) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "strata launch: 2 nodes x 2 ranks, rank 0's store at 127.0.0.1:" + port))
      << r[0].output;
  for (int k = 0; k < 4; ++k)
    EXPECT_TRUE(contains(r[0].output, "[rank " + std::to_string(k) + "] hello from rank " + std::to_string(k) +
                                          " of 4 port " + port))
        << r[0].output;
  // The ranks of both "hosts" form one world and run collectives.
  r = launch(hosts_launch("127.0.0.1,127.0.0.1", std::to_string(free_port()), {DIST_WORKER, "async"}));
  EXPECT_EQ(r[0].status, 0) << r[0].output;
}

TEST(Launch, HostsCarryTheStrataEnvironmentAndTheDirectory) {
  // The remote shell starts with an empty environment: STRATA_* and
  // OMP_NUM_THREADS must reach the ranks through the command, and they run
  // in launch's working directory; other variables stay behind.
  auto r = launch(hosts_launch("127.0.0.1,localhost", std::to_string(free_port()),
                               {"/bin/sh", "-c", "echo \"mark=$STRATA_TEST_MARK omp=$OMP_NUM_THREADS "
                                                 "other=$DIST_TEST_OTHER cwd=$(pwd)\"; echo token=$STRATA_JOB_TOKEN"}),
                  {{"STRATA_TEST_MARK", "it's here"}, {"OMP_NUM_THREADS", "3"}, {"DIST_TEST_OTHER", "x"}});
  ASSERT_EQ(r[0].status, 0) << r[0].output;
  const std::string cwd = std::filesystem::current_path().string();
  EXPECT_TRUE(contains(r[0].output, "[rank 3] mark=it's here omp=3 other= cwd=" + cwd)) << r[0].output;
  // One job token for the ranks of every node (passed on the remote shell's
  // standard input, not its command line).
  auto t = tokens(r[0].output);
  ASSERT_EQ(t.size(), 4u) << r[0].output;
  EXPECT_TRUE(is_hex_token(t[0])) << r[0].output;
  for (const auto& k : t) EXPECT_EQ(k, t[0]) << r[0].output;
}

TEST(Launch, HostsAFailingNodeEndsTheOthersWithItsStatus) {
  auto start = std::chrono::steady_clock::now();
  // Rank 3 (node 1) exits 5; the other ranks would sleep for 30 s.
  auto r = launch(hosts_launch("127.0.0.1,localhost", std::to_string(free_port()),
                               {"/bin/sh", "-c", "if [ \"$STRATA_RANK\" = 3 ]; then exit 5; fi; sleep 30"}));
  EXPECT_EQ(r[0].status, 5) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "strata launch: rank 3 exited with status 5")) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "strata launch: node 1 (localhost) exited with status 5; terminating the other nodes"))
      << r[0].output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << "node 0 was not ended";
  // A host the remote shell cannot reach: its status (ssh's 255), named.
  r = launch(hosts_launch("127.0.0.1,unreachable", std::to_string(free_port()), {"/bin/sh", "-c", "sleep 30"}));
  EXPECT_EQ(r[0].status, 255) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "ssh: connect to host unreachable")) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "strata launch: node 1 (unreachable) exited with status 255")) << r[0].output;
}

TEST(Launch, HostsBadArgumentsAreRefused) {
  auto r = launch({"-n", "1", "--hosts", "a,,b", DIST_WORKER});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "--hosts \"a,,b\": entry 1 is not a host name")) << r[0].output;
  r = launch({"-n", "1", "--hosts", "a,b", "--nnodes", "2", DIST_WORKER});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "give it without --nnodes and --node-rank")) << r[0].output;
  r = launch({"-n", "1", "--hosts", "a", "--launcher", " ", DIST_WORKER});
  EXPECT_EQ(r[0].status, 2) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "--launcher is empty")) << r[0].output;
  r = launch({"-n", "1", "--hosts", "a", "--launcher", "/nonexistent/ssh", DIST_WORKER});
  EXPECT_EQ(r[0].status, 127) << r[0].output;
  EXPECT_TRUE(contains(r[0].output, "cannot run \"/nonexistent/ssh\"")) << r[0].output;
}

}  // namespace
