// The TCP store against hostile and broken peers, with real processes
// (harness.hpp): strangers on the master port while a job trains, a store
// that stalls mid-reply, a rank of another job, and a "rank" that arrives
// but never connects. The test plays the stranger or the broken store itself
// with the store's own wire format (distributed/src/store_wire.hpp); and
// the Slurm host-list parser of launch_env.cpp, Checkpointer and
// DistributedSampler.
#include "harness.hpp"

#include "launch_env.hpp"
#include "socket_io.hpp"
#include "store_wire.hpp"

#include <strata/checkpointer.hpp>
#include <strata/sampler.hpp>
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

namespace {

using namespace strata_dist_test;
namespace wire = strata::distributed::detail::wire;
namespace net = strata::distributed::detail::net;
using Clock = std::chrono::steady_clock;

/// A connection to host:port, retried until something listens (30 s).
int connect_when_up(int port, const std::string& host = "127.0.0.1") {
  auto end = Clock::now() + std::chrono::seconds(30);
  std::string error;
  while (Clock::now() < end) {
    int fd = net::connect_to(host, port, Clock::now() + std::chrono::seconds(1), error);
    if (fd >= 0) return fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

/// This end's port of `fd`, as the store's log names the peer.
std::string local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return std::to_string(ntohs(a.sin_port));
}

/// Reads until the other end closes; false when it has not within `limit`.
bool closed_by_peer(int fd, std::chrono::milliseconds limit) {
  auto end = Clock::now() + limit;
  char buf[4096];
  while (true) {
    net::Io r = net::read_exact(fd, buf, 1, end);
    if (r == net::Io::closed) return true;
    if (r != net::Io::ok) return false;
  }
}

bool send_all(int fd, const std::string& bytes) {
  return net::write_exact(fd, bytes.data(), bytes.size(), Clock::now() + std::chrono::seconds(5)) == net::Io::ok;
}

/// One request on a welcomed connection; nullopt when it fails.
std::optional<wire::Reply> request(int fd, wire::Command command, const std::vector<std::string>& parts,
                                   wire::Bytes& storage) {
  std::vector<wire::View> views;
  for (const auto& p : parts) views.push_back(wire::view(p));
  auto deadline = Clock::now() + std::chrono::seconds(10);
  if (net::write_frame(fd, wire::encode_request(command, 1000, views), deadline) != net::Io::ok) return std::nullopt;
  if (net::read_frame(fd, wire::kMaxFrame, storage, {deadline, std::chrono::seconds(10), deadline}) != net::Io::ok)
    return std::nullopt;
  return wire::decode_reply(wire::view(storage));
}

std::string as_string(const wire::Bytes& b) { return {b.begin(), b.end()}; }

std::string temp_path(const std::string& stem) {
  static int counter = 0;
  auto p = std::filesystem::temp_directory_path() /
           (stem + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(p);
  return p.string();
}

// Strangers on the master port while a 2-rank job with a token rendezvous
// and trains: each is refused (the store closes the connection) and logged
// by rank 0 with its address, none joins, none costs rank 0 memory (four
// 1 GiB frame headers once cost it 4 GiB), and the job trains as usual.
TEST(Store, StrangersAreRefusedWhileTheJobTrains) {
  const int port = free_port();
  const std::string go = temp_path("strata-store-go");
  std::vector<std::string> problems, stranger_ports;
  std::thread strangers([&] {
    auto fail = [&](const std::string& what) { problems.push_back(what); };
    // Each stranger sends `bytes` and must be closed by the store within `limit`.
    auto visit = [&](const std::string& what, const std::string& bytes, std::chrono::milliseconds limit,
                     std::optional<wire::Status> answer = std::nullopt) {
      int fd = connect_when_up(port);
      if (fd < 0) return fail(what + ": could not connect");
      stranger_ports.push_back(local_port(fd));
      send_all(fd, bytes);  // the store may close before all of it is sent
      if (answer) {
        wire::Bytes reply;
        auto deadline = Clock::now() + limit;
        if (net::read_frame(fd, wire::kMaxHelloFrame, reply, {deadline, limit, deadline}) != net::Io::ok)
          fail(what + ": no answer to the hello");
        else if (auto r = wire::decode_reply(wire::view(reply)); !r || r->status != *answer)
          fail(what + ": the answer is not the expected status");
        // Trying anyway: a request after a refused hello is never answered.
        wire::Bytes storage;
        if (request(fd, wire::kSet, {"strata/default/arrived/1", "2\nstranger"}, storage))
          fail(what + ": a request after the refusal was answered");
      }
      if (!closed_by_peer(fd, limit)) fail(what + ": the store did not close the connection");
      ::close(fd);
    };
    const auto soon = std::chrono::milliseconds(10000);
    visit("an HTTP request", "GET / HTTP/1.1\r\nHost: strata\r\n\r\n", soon);
    visit("a binary frame of 4 GiB", std::string("\xff\xff\xff\xff", 4), soon);
    visit("a frame of 4 KiB + 1 before the hello", std::string("\x01\x10\x00\x00", 4), soon);
    visit("a small frame that is no hello", std::string("\x0a\x00\x00\x00", 4) + "0123456789", soon, wire::kRefused);
    visit("a hello without the token", as_string(wire::frame(wire::encode_hello(""))), soon, wire::kRefused);
    visit("a hello with another job's token", as_string(wire::frame(wire::encode_hello("another job"))), soon,
          wire::kRefused);
    // Four 1 GiB headers at once, each left open.
    std::vector<int> open;
    for (int k = 0; k < 4; ++k) {
      int fd = connect_when_up(port);
      if (fd < 0) fail("1 GiB header " + std::to_string(k) + ": could not connect");
      if (fd >= 0) send_all(fd, std::string("\x00\x00\x00\x40", 4));
      if (fd >= 0) stranger_ports.push_back(local_port(fd));
      open.push_back(fd);
    }
    for (int fd : open)
      if (fd >= 0 && !closed_by_peer(fd, soon)) fail("a 1 GiB header was not refused");
    for (int fd : open) ::close(fd);
    // One that says nothing: closed when the time for a hello is over (the
    // job's timeout here, 4 s).
    visit("a silent connection", "", std::chrono::milliseconds(15000));
    // The store listens on the master address (127.0.0.1) only: another
    // loopback address of this host finds nothing.
    std::string error;
    int other = net::connect_to("127.0.0.2", port, Clock::now() + std::chrono::seconds(2), error);
    if (other >= 0) {
      fail("the store answers on 127.0.0.2 too (it listens on more than the master address)");
      ::close(other);
    }
    std::ofstream(go).put('\n');
  });
  auto results = run_ranks({.world = 2,
                            .scenario = "after_strangers",
                            .env = {{"STRATA_JOB_TOKEN", "this job's token"},
                                    {"STRATA_DIST_TIMEOUT_MS", "4000"},
                                    {"STRATA_MASTER_PORT", std::to_string(port)},
                                    {"DIST_TEST_GO", go}}});
  strangers.join();
  std::filesystem::remove(go);
  expect_all_pass(results);
  for (const auto& p : problems) ADD_FAILURE() << p << "\n" << describe(results);
  const std::string& log = results[0].output;
  for (const auto& p : stranger_ports)
    EXPECT_TRUE(contains(log, "refused the connection from 127.0.0.1:" + p + ": ")) << p << "\n" << describe(results);
  EXPECT_TRUE(contains(log, "it announced a frame of 542393671 bytes before its hello (at most 4096 bytes)"))
      << describe(results);
  EXPECT_TRUE(contains(log, "it announced a frame of 1073741824 bytes before its hello")) << describe(results);
  EXPECT_TRUE(contains(log, "its first 10-byte frame is not a Strata store hello")) << describe(results);
  EXPECT_TRUE(contains(log, "it sent no job token (STRATA_JOB_TOKEN)")) << describe(results);
  EXPECT_TRUE(contains(log, "its job token is not this job's")) << describe(results);
  EXPECT_TRUE(contains(log, "it sent no hello within 4000 ms")) << describe(results);
  // Peak memory of rank 0: nothing near the 1 GiB frames the strangers announced.
  auto at = log.find("peak_rss_kb=");
  ASSERT_NE(at, std::string::npos) << describe(results);
  EXPECT_LT(std::stol(log.substr(at + 12)), 512 * 1024) << describe(results);
}

/// Serves one connection on a port of its own as a store that stalls: it
/// reads the hello and, when `welcome`, welcomes it and reads the first
/// request; then it sends the 4-byte header of a 100-byte reply and nothing
/// more, until the client closes.
class StallingStore {
 public:
  explicit StallingStore(bool welcome) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 4) != 0) return;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, welcome] {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 30000) != 1) return;
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      auto deadline = Clock::now() + std::chrono::seconds(30);
      wire::Bytes frame;
      net::read_frame(fd, wire::kMaxHelloFrame, frame, {deadline, std::chrono::seconds(30), deadline});
      if (welcome) {
        net::write_frame(fd, wire::encode_reply(wire::kOk, {}), deadline);
        net::read_frame(fd, wire::kMaxFrame, frame, {deadline, std::chrono::seconds(30), deadline});
      }
      send_all(fd, std::string("\x64\x00\x00\x00", 4));
      closed_by_peer(fd, std::chrono::seconds(30));
      ::close(fd);
    });
  }
  ~StallingStore() {
    if (thread_.joinable()) thread_.join();
    ::close(listen_fd_);
  }
  int port() const { return port_; }

 private:
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// A store that answers a frame's length and then stalls must not hang a
// rank: every read is bounded by STRATA_DIST_TIMEOUT_MS, across partial
// reads, in the hello and in a request.
TEST(Store, AStoreThatStallsMidReplyTimesTheRankOut) {
  for (bool welcome : {false, true}) {
    StallingStore store(welcome);
    ASSERT_NE(store.port(), 0);
    auto start = Clock::now();
    auto results =
        run_ranks({.world = 2,
                   .scenario = "init_error",
                   .env = {{"STRATA_DIST_TIMEOUT_MS", "1500"}, {"STRATA_MASTER_PORT", std::to_string(store.port())}},
                   .rank_env = {{0, {{"STRATA_RANK", "1"}}}},
                   .ranks_started = 1},
                  std::chrono::seconds(30));
    auto took = Clock::now() - start;
    expect_all_pass(results);
    const std::string where = "TCP store at 127.0.0.1:" + std::to_string(store.port());
    if (welcome)
      // The rank's first request after the hello: its reply never ends.
      EXPECT_TRUE(contains(results[0].output, "init_process_group on rank 1 of 2: ") &&
                  contains(results[0].output, "in the " + where + ": no reply within 1500 ms (STRATA_DIST_TIMEOUT_MS)"))
          << describe(results);
    else
      EXPECT_TRUE(contains(results[0].output, "could not reach the " + where +
                                                  " within 1500 ms (last error: waiting for the answer to the "
                                                  "hello: timed out)"))
          << describe(results);
    EXPECT_LT(took, std::chrono::seconds(10)) << describe(results);
  }
}

// A rank given another job's token is refused at once, with a message that
// says so; rank 0 logs the refusal and names the rank that never arrived.
TEST(Store, ARankWithAnotherJobsTokenIsRefused) {
  auto results = run_ranks({.world = 2,
                            .scenario = "init_error",
                            .env = {{"STRATA_JOB_TOKEN", "job a"}, {"STRATA_DIST_TIMEOUT_MS", "1500"}},
                            .rank_env = {{1, {{"STRATA_JOB_TOKEN", "job b"}}}}});
  expect_all_pass(results);
  EXPECT_TRUE(contains(results[1].output, "init_process_group on rank 1 of 2: the TCP store at 127.0.0.1:"))
      << describe(results);
  EXPECT_TRUE(contains(results[1].output, "refused this rank's job token (STRATA_JOB_TOKEN)")) << describe(results);
  EXPECT_TRUE(contains(results[0].output, "its job token is not this job's")) << describe(results);
  EXPECT_TRUE(contains(results[0].output, "timed out after 1500 ms waiting for rank 1 to arrive")) << describe(results);
}

// A "rank" that claims rank 1 and arrives but never builds its side of
// Gloo's mesh (a slow or broken peer): rank 0's connectFullMesh fails, and
// the half-built Gloo context it leaves must become a DistributedError, not
// an abort while the group is torn down ("Transport context not set!").
TEST(Distributed, AFailedMeshIsAnErrorNotAnAbort) {
  const int port = free_port();
  bool spoke = false;
  std::thread fake([&] {
    int fd = connect_when_up(port);
    if (fd < 0) return;
    wire::Bytes storage;
    auto deadline = Clock::now() + std::chrono::seconds(10);
    net::write_frame(fd, wire::encode_hello(""), deadline);
    net::read_frame(fd, wire::kMaxHelloFrame, storage, {deadline, std::chrono::seconds(10), deadline});
    spoke = request(fd, wire::kAdd, {"strata/default/rank/1", std::string("\x01\0\0\0\0\0\0\0", 8)}, storage) &&
            request(fd, wire::kSet, {"strata/default/arrived/1", "2\n[127.0.0.1]:1"}, storage);
    closed_by_peer(fd, std::chrono::seconds(30));  // until rank 0 gives up
    ::close(fd);
  });
  auto results = run_ranks({.world = 2,
                            .scenario = "init_error",
                            .env = {{"STRATA_DIST_TIMEOUT_MS", "1500"}, {"STRATA_MASTER_PORT", std::to_string(port)}},
                            .ranks_started = 1});
  fake.join();
  EXPECT_TRUE(spoke);
  expect_all_pass(results);
  EXPECT_TRUE(contains(results[0].output, "init_process_group on rank 0 of 2: connecting the ranks: "))
      << describe(results);
  EXPECT_TRUE(contains(results[0].output, "\"strata/default/mesh/1\"")) << describe(results);
  EXPECT_FALSE(contains(results[0].output, "terminate")) << describe(results);
}

}  // namespace

TEST(LaunchEnvironment, TheFirstHostOfASlurmHostList) {
  using strata::distributed::detail::first_slurm_host;
  EXPECT_EQ(first_slurm_host("node07"), "node07");
  EXPECT_EQ(first_slurm_host("node[07-09,12],gpu3"), "node07");
  EXPECT_EQ(first_slurm_host("gpu3,node[1-2]"), "gpu3");
  EXPECT_EQ(first_slurm_host("rack[1-2]-n[004-005]"), "rack1-n004");
  EXPECT_EQ(first_slurm_host("c[3,5]-ib"), "c3-ib");
  EXPECT_EQ(first_slurm_host("node[x-y]"), "");
  EXPECT_EQ(first_slurm_host("node[1-2"), "");
  EXPECT_EQ(first_slurm_host("node]"), "");
}

// Checkpointer (checkpointer.hpp), in one process: numbered states, the
// newest restored, the oldest beyond `keep` removed, what a killed writer
// left ignored and cleared, a corrupted newest state named, not skipped.
TEST(Checkpointer, SavesRestoresKeepsTheNewestAndIgnoresTornWrites) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata-states-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  strata::manual_seed(3);
  strata::nn::Linear model(3, 2);
  strata::nn::Adam opt(model.parameters(), {.lr = 0.1});
  strata::distributed::Checkpointer states(dir, 2);
  EXPECT_FALSE(states.latest().has_value());
  EXPECT_EQ(states.restore(model, &opt), -1);  // a fresh start
  auto train_step = [&] {
    opt.zero_grad();
    strata::sum(model(strata::ones({4, 3}))).backward();
    opt.step();
  };
  for (int64_t epoch = 1; epoch <= 3; ++epoch) {
    train_step();
    states.save(epoch, model, &opt);
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"state-000000000002.st", "state-000000000003.st"}));
  // A writer killed mid-write leaves its temporary file: not a state.
  std::ofstream(dir / ".state-000000000004.st.tmp-123-abcd") << "half a file";
  EXPECT_EQ(states.latest()->filename().string(), "state-000000000003.st");
  const std::vector<float> saved = model.parameters()[0].to_vector<float>();
  train_step();  // moves away from the saved state
  strata::nn::Linear fresh(3, 2);
  strata::nn::Adam fresh_opt(fresh.parameters(), {.lr = 0.1});
  EXPECT_EQ(states.restore(fresh, &fresh_opt), 3);
  EXPECT_EQ(fresh.parameters()[0].to_vector<float>(), saved);
  EXPECT_EQ(fresh_opt.state_dict().size(), opt.state_dict().size());
  states.save(4, model, &opt);  // clears what the killed writer left
  EXPECT_FALSE(fs::exists(dir / ".state-000000000004.st.tmp-123-abcd"));
  // A corrupted newest state is named, not skipped for an older one.
  std::ofstream(dir / "state-000000000009.st") << "not a state";
  try {
    states.restore(fresh, &fresh_opt);
    ADD_FAILURE() << "a corrupted state restored";
  } catch (const strata::SerializationError& e) {
    EXPECT_NE(std::string(e.what()).find("state-000000000009.st"), std::string::npos) << e.what();
  }
  EXPECT_THROW(strata::distributed::Checkpointer(dir, 0), strata::ValueError);
  fs::remove_all(dir);
}


// DistributedSampler: the ranks' shares are disjoint and cover the epoch's
// order (padded or truncated), the order changes with the epoch and not
// with the rank, and bad arguments are named.
TEST(DistributedSampler, RanksShareOneShuffledOrderPerEpoch) {
  using strata::distributed::DistributedSampler;
  for (bool drop_last : {false, true}) {
    for (int world : {1, 3, 4}) {
      std::vector<int64_t> seen, next_epoch;
      for (int r = 0; r < world; ++r) {
        DistributedSampler s(10, {.seed = 5, .drop_last = drop_last, .rank = r, .world_size = world});
        s.set_epoch(0);
        auto mine = s.indices();
        EXPECT_EQ(static_cast<int64_t>(mine.size()), s.num_samples());
        EXPECT_EQ(s.num_samples(), drop_last ? 10 / world : (10 + world - 1) / world);
        seen.insert(seen.end(), mine.begin(), mine.end());
        s.set_epoch(1);
        auto later = s.indices();
        next_epoch.insert(next_epoch.end(), later.begin(), later.end());
      }
      EXPECT_NE(next_epoch, seen) << "a new order each epoch (" << world << " ranks)";
      std::vector<int64_t> distinct = seen;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      if (drop_last) {
        EXPECT_EQ(distinct.size(), seen.size()) << "no example twice";
      } else {
        EXPECT_EQ(distinct.size(), 10u) << "every example, padding repeating a few";
      }
    }
  }
  DistributedSampler plain(5, {.shuffle = false, .rank = 1, .world_size = 2});
  EXPECT_EQ(plain.indices(), (std::vector<int64_t>{1, 3, 0}));  // padded with the order's start
  EXPECT_THROW(DistributedSampler(5, {.rank = 2, .world_size = 2}), strata::ValueError);
  EXPECT_THROW(DistributedSampler(-1), strata::ValueError);
  EXPECT_THROW(DistributedSampler(1, {.drop_last = true, .rank = 0, .world_size = 2}), strata::ValueError);
}
