// dist_worker — one rank of a distributed test. distributed_test.cpp starts
// it as N processes (or `strata launch` does) with STRATA_RANK,
// STRATA_WORLD_SIZE, STRATA_MASTER_ADDR/PORT set; DIST_TEST_FILE_STORE set
// means rendezvous through that directory instead.
//
//   dist_worker SCENARIO
//
// Exit status 0 when every check passed, 1 with "FAIL: ..." lines on
// stderr otherwise. Scenarios that expect an error print "ERROR: <message>"
// on stdout so that the test can check each rank's message.
#include <strata/distributed.hpp>
#include <strata/strata.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace dist = strata::distributed;
using strata::DType;
using strata::Tensor;

namespace {

int failures = 0;

void fail(const std::string& what) {
  std::cerr << "FAIL: " << what << std::endl;
  ++failures;
}

dist::Options options() {
  dist::Options o;
  if (const char* dir = std::getenv("DIST_TEST_FILE_STORE")) o.file_store = dir;
  return o;
}

strata::TensorOptions on_cpu(DType dtype) { return {.dtype = dtype, .device = strata::Device("cpu:0")}; }

/// A tensor of `n` elements with element i = f(i), in `dtype`.
Tensor make(DType dtype, const strata::Shape& shape, const std::function<double(int64_t)>& f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = f(i);
  return strata::from_data(std::span<const double>(v), shape, on_cpu(DType::f64)).to(dtype);
}

void expect_values(const std::string& what, const Tensor& t, const std::function<double(int64_t)>& want,
                   double tol = 0) {
  std::vector<double> got = t.to(DType::f64).to_vector<double>();
  int shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double w = want(static_cast<int64_t>(i));
    if (std::abs(got[i] - w) > tol) {
      if (shown++ < 3) fail(what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", want " +
                            std::to_string(w));
    }
  }
}

void expect_error(const std::string& what, const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    fail(what + ": no DistributedError");
  } catch (const dist::DistributedError& e) {
    std::cout << "ERROR: " << e.what() << std::endl;
    if (std::string(e.what()).find(needle) == std::string::npos)
      fail(what + ": the message lacks \"" + needle + "\": " + e.what());
  }
}

// Small integers, exact in bf16 sums over up to 4 ranks.
double base(int64_t i) { return static_cast<double>(i % 5); }

int collectives() {
  dist::init_process_group(options());
  auto& pg = dist::group();
  const int r = pg.rank(), n = pg.size();
  if (dist::rank() != r || dist::world_size() != n || !dist::is_initialized()) fail("rank()/world_size()");
  double sum_r = n * (n - 1) / 2.0;  // sum over ranks of r
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    for (int64_t size : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
      std::string tag = std::string(strata::dtype_name(dtype)) + "[" + std::to_string(size) + "]";
      auto mine = [r](int64_t i) { return base(i) + r; };
      // all_reduce: sum, mean, max, min.
      Tensor t = make(dtype, {size}, mine);
      pg.all_reduce(t).wait();
      expect_values("all_reduce sum " + tag, t, [&](int64_t i) { return n * base(i) + sum_r; });
      t = make(dtype, {size}, mine);
      pg.all_reduce(t, dist::ReduceOp::mean).wait();
      expect_values("all_reduce mean " + tag, t, [&](int64_t i) { return base(i) + sum_r / n; });
      t = make(dtype, {size}, mine);
      pg.all_reduce(t, dist::ReduceOp::max).wait();
      expect_values("all_reduce max " + tag, t, [&](int64_t i) { return base(i) + (n - 1); });
      t = make(dtype, {size}, mine);
      pg.all_reduce(t, dist::ReduceOp::min).wait();
      expect_values("all_reduce min " + tag, t, [&](int64_t i) { return base(i); });
      // broadcast from the last rank.
      t = make(dtype, {size}, mine);
      pg.broadcast(t, n - 1).wait();
      expect_values("broadcast " + tag, t, [&](int64_t i) { return base(i) + (n - 1); });
      // all_gather: row k is rank k's.
      Tensor in = make(dtype, {size}, mine);
      Tensor out = strata::zeros({n, size}, on_cpu(dtype));
      pg.all_gather(out, in).wait();
      expect_values("all_gather " + tag, out, [&](int64_t i) { return base(i % size) + static_cast<double>(i / size); });
      // reduce_scatter: rank q's in[k][i] = base(i) + q + k; rank r gets the
      // reduction over q of in[r].
      Tensor rs_in = make(dtype, {n, size}, [&](int64_t i) { return base(i % size) + r + static_cast<double>(i / size); });
      Tensor rs_out = strata::zeros({size}, on_cpu(dtype));
      pg.reduce_scatter(rs_out, rs_in).wait();
      expect_values("reduce_scatter sum " + tag, rs_out, [&](int64_t i) { return n * (base(i) + r) + sum_r; });
      pg.reduce_scatter(rs_out, rs_in, dist::ReduceOp::mean).wait();
      expect_values("reduce_scatter mean " + tag, rs_out, [&](int64_t i) { return base(i) + r + sum_r / n; });
      pg.reduce_scatter(rs_out, rs_in, dist::ReduceOp::max).wait();
      expect_values("reduce_scatter max " + tag, rs_out, [&](int64_t i) { return base(i) + r + (n - 1); });
      pg.reduce_scatter(rs_out, rs_in, dist::ReduceOp::min).wait();
      expect_values("reduce_scatter min " + tag, rs_out, [&](int64_t i) { return base(i) + r; });
    }
  }
  // Non-integer f32/f64 values against a local reference (reduction order
  // may differ: a tolerance).
  for (DType dtype : {DType::f32, DType::f64}) {
    auto val = [](int64_t i, int q) { return std::sin(0.1 * static_cast<double>(i) + q); };
    Tensor t = make(dtype, {2, 3, 5}, [&](int64_t i) { return val(i, r); });
    pg.all_reduce(t).wait();
    expect_values("all_reduce sin " + std::string(strata::dtype_name(dtype)), t,
                  [&](int64_t i) {
                    double s = 0;
                    for (int q = 0; q < n; ++q) s += val(i, q);
                    return s;
                  },
                  dtype == DType::f32 ? 1e-5 : 1e-12);
  }
  // f16, i32, i64.
  for (DType dtype : {DType::f16, DType::i32, DType::i64}) {
    std::string tag = std::string(strata::dtype_name(dtype));
    Tensor t = make(dtype, {7}, [&](int64_t i) { return base(i) + r; });
    pg.all_reduce(t).wait();
    expect_values("all_reduce sum " + tag, t, [&](int64_t i) { return n * base(i) + sum_r; });
    t = make(dtype, {7}, [&](int64_t i) { return base(i) - r; });
    pg.all_reduce(t, dist::ReduceOp::min).wait();
    expect_values("all_reduce min " + tag, t, [&](int64_t i) { return base(i) - (n - 1); });
  }
  // mean of an integer tensor is refused, on every rank.
  Tensor ints = make(DType::i32, {3}, base);
  expect_error("mean of i32", [&] { pg.all_reduce(ints, dist::ReduceOp::mean).wait(); }, "mean needs a floating dtype");
  // A 0-d tensor and an empty one.
  Tensor s = make(DType::f32, {}, [&](int64_t) { return r + 1.0; });
  pg.all_reduce(s).wait();
  expect_values("all_reduce 0-d", s, [&](int64_t) { return sum_r + n; });
  Tensor empty = strata::zeros({0, 3}, on_cpu(DType::f32));
  pg.all_reduce(empty).wait();
  pg.barrier().wait();
  dist::destroy_process_group();
  if (dist::is_initialized()) fail("is_initialized() after destroy");
  return failures ? 1 : 0;
}

// Collectives run in issue order: several issued, then waited in reverse.
void check_async_order(dist::ProcessGroup& pg) {
  const int r = pg.rank(), n = pg.size();
  Tensor t = make(DType::f32, {1000}, [&](int64_t i) { return r + 1.0 + static_cast<double>(i % 3); });
  std::vector<dist::Work> works;
  works.push_back(pg.all_reduce(t));                         // S_i = sum_q (q+1+i%3)
  works.push_back(pg.broadcast(t, n - 1));                   // unchanged (all equal)
  works.push_back(pg.all_reduce(t, dist::ReduceOp::max));    // S_i
  works.push_back(pg.all_reduce(t));                         // n * S_i
  std::vector<Tensor> more;
  for (int k = 0; k < 8; ++k) {
    more.push_back(make(DType::f64, {257}, [&](int64_t i) { return k * 10.0 + r + static_cast<double>(i); }));
    works.push_back(pg.all_reduce(more.back()));
  }
  works.push_back(pg.barrier());
  for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
  for (auto& w : works)
    if (!w.completed()) fail("completed() false after wait()");
  double sum_r1 = n * (n + 1) / 2.0;
  expect_values("ordered chain", t, [&](int64_t i) { return n * (sum_r1 + n * static_cast<double>(i % 3)); });
  for (int k = 0; k < 8; ++k)
    expect_values("async " + std::to_string(k), more[static_cast<size_t>(k)],
                  [&](int64_t i) { return n * (k * 10.0 + static_cast<double>(i)) + n * (n - 1) / 2.0; });
  dist::Work done;
  if (!done.completed()) fail("a default Work is not completed");
}

int async_order() {
  dist::init_process_group(options());
  check_async_order(dist::group());
  dist::destroy_process_group();
  return failures ? 1 : 0;
}

// Rank 1 passes another shape; every rank must fail naming the shapes, and
// the group must still work afterwards.
int mismatch() {
  dist::init_process_group(options());
  auto& pg = dist::group();
  const int r = pg.rank();
  Tensor t = strata::ones({r == 1 ? 4 : 3}, on_cpu(DType::f32));
  expect_error("mismatched shapes", [&] { pg.all_reduce(t).wait(); }, "the ranks disagree");
  // dtype mismatch.
  Tensor u = strata::ones({3}, on_cpu(r == 1 ? DType::f64 : DType::f32));
  expect_error("mismatched dtypes", [&] { pg.all_reduce(u).wait(); }, "the ranks disagree");
  // A rank whose tensor cannot take part (non-contiguous) fails itself, and
  // the others learn which rank.
  Tensor m = strata::ones({3, 2}, on_cpu(DType::f32));
  Tensor arg = r == 1 ? m.transpose(0, 1) : strata::ones({2, 3}, on_cpu(DType::f32));
  expect_error("non-contiguous", [&] { pg.all_reduce(arg).wait(); }, r == 1 ? "is not contiguous" : "rank 1 could not take part");
  // Still usable.
  Tensor ok = strata::ones({5}, on_cpu(DType::f32));
  pg.all_reduce(ok).wait();
  expect_values("after the errors", ok, [&](int64_t) { return pg.size(); });
  dist::destroy_process_group();
  return failures ? 1 : 0;
}

// A tensor on a device without collectives (vulkan:0, when built).
int bad_device() {
  dist::init_process_group(options());
  auto& pg = dist::group();
  bool have_vulkan = false;
  for (const auto& d : strata::runtime().devices()) have_vulkan = have_vulkan || d.id == "vulkan:0";
  if (have_vulkan) {
    Tensor v = strata::ones({3}, {.dtype = DType::f32, .device = strata::Device("vulkan:0")});
    expect_error("vulkan tensor", [&] { pg.all_reduce(v).wait(); },
                 "on vulkan:0: no collective backend for this device (Gloo handles host memory");
  }
  Tensor b = strata::zeros({3}, on_cpu(DType::boolean));
  expect_error("bool tensor", [&] { pg.broadcast(b).wait(); }, "bool tensors are not supported");
  Tensor f = strata::zeros({3}, on_cpu(DType::f32));
  expect_error("bad root", [&] { pg.broadcast(f, 7).wait(); }, "");
  Tensor out = strata::zeros({3}, on_cpu(DType::f32));
  expect_error("all_gather shape", [&] { pg.all_gather(out, f).wait(); }, "does not fit");
  dist::destroy_process_group();
  expect_error("group() after destroy", [] { dist::group(); }, "call init_process_group() first");
  return failures ? 1 : 0;
}

// Rank 1 dies after the first collective; the others must get a
// DistributedError (not hang).
int peer_dies() {
  dist::init_process_group(options());
  auto& pg = dist::group();
  Tensor t = strata::ones({1000}, on_cpu(DType::f32));
  pg.all_reduce(t).wait();
  if (pg.rank() == 1) {
    std::cout << "rank 1 exits now" << std::endl;
    std::_Exit(7);
  }
  auto start = std::chrono::steady_clock::now();
  std::vector<dist::Work> works;
  for (int k = 0; k < 3; ++k) works.push_back(pg.all_reduce(t));
  expect_error("after a peer died", [&] { works[0].wait(); }, "all_reduce on rank " + std::to_string(pg.rank()));
  // Later collectives fail too, at once.
  expect_error("later collectives", [&] { works[2].wait(); }, "all_reduce on rank");
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  std::cout << "detected after " << ms << " ms" << std::endl;
  // Rank 0 serves the TCP store: it stays a moment, so that a survivor that
  // noticed the loss later can still ask the store who is gone.
  if (pg.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  dist::destroy_process_group();
  return failures ? 1 : 0;
}

/// Waits until `path` exists (a test's signal), up to 30 s.
bool await_file(const std::string& path) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (::access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

/// Marks this rank done in DIST_TEST_DONE_DIR (a file named after it); with
/// `wait`, then waits for the marks of every rank of `ranks`: ranks that
/// must not exit before the others have seen their own error.
void done_and_wait(int rank, const std::vector<int>& ranks, bool wait) {
  const std::string dir = std::getenv("DIST_TEST_DONE_DIR");
  std::fclose(std::fopen((dir + "/" + std::to_string(rank)).c_str(), "w"));
  if (!wait) return;
  for (int r : ranks)
    if (r != rank && !await_file(dir + "/" + std::to_string(r))) fail("rank " + std::to_string(r) + " never finished");
}

// Rank DIST_TEST_VICTIM is killed (SIGKILL) after the first collective;
// every survivor must name it. Each survivor then creates
// DIST_TEST_DONE_DIR/<rank>, and rank 0, which serves the store the
// survivors ask, stays until every survivor has.
int peer_killed() {
  dist::init_process_group(options());
  auto& pg = dist::group();
  const int victim = std::atoi(std::getenv("DIST_TEST_VICTIM"));
  Tensor t = strata::ones({1000}, on_cpu(DType::f32));
  pg.all_reduce(t).wait();
  if (pg.rank() == victim) std::raise(SIGKILL);
  std::vector<dist::Work> works;
  for (int k = 0; k < 3; ++k) works.push_back(pg.all_reduce(t));
  expect_error("after a peer was killed", [&] { works[0].wait(); }, "lost rank " + std::to_string(victim));
  std::vector<int> survivors;
  for (int r = 0; r < pg.size(); ++r)
    if (r != victim) survivors.push_back(r);
  done_and_wait(pg.rank(), survivors, pg.rank() == 0);
  dist::destroy_process_group();
  return failures ? 1 : 0;
}

// Under `strata launch`: rank 1 is killed after the first collective, the
// others exit 1 as soon as they notice. launch must report rank 1's signal.
int die_together() {
  dist::init_process_group(options());
  auto& pg = dist::group();
  Tensor t = strata::ones({100}, on_cpu(DType::f32));
  pg.all_reduce(t).wait();
  if (pg.rank() == 1) std::raise(SIGKILL);
  try {
    pg.all_reduce(t).wait();
  } catch (const dist::DistributedError& e) {
    std::cout << "ERROR: " << e.what() << std::endl;
  }
  std::_Exit(1);
}

// With the consistency check off (STRATA_DIST_CHECK=0), rank 1 passes a
// tensor of another dtype (DIST_TEST_MISMATCH=dtype) or size (=numel):
// every rank must get a DistributedError (a timeout, or the lost connection
// of the rank that timed out first), not an abort in Gloo.
int unchecked_mismatch() {
  dist::init_process_group(options());
  auto& pg = dist::group();
  const bool other = pg.rank() == 1;
  const std::string what = std::getenv("DIST_TEST_MISMATCH");
  Tensor t = strata::ones({other && what == "numel" ? 1001 : 1000}, on_cpu(other && what == "dtype" ? DType::f64 : DType::f32));
  expect_error("unchecked mismatch", [&] { pg.all_reduce(t).wait(); }, "STRATA_DIST_CHECK=0");
  done_and_wait(pg.rank(), {0, 1}, true);  // no rank exits before the other has its error
  dist::destroy_process_group();
  return failures ? 1 : 0;
}

// Joins the group, or reports why not (a second process claiming a rank);
// when joined, runs a collective with the others.
int join_or_refused() {
  try {
    dist::init_process_group(options());
  } catch (const dist::DistributedError& e) {
    std::cout << "ERROR: " << e.what() << std::endl;
    return 0;
  }
  auto& pg = dist::group();
  Tensor t = strata::ones({10}, on_cpu(DType::f32));
  pg.all_reduce(t).wait();
  expect_values("all_reduce after a refused duplicate", t, [&](int64_t) { return pg.size(); });
  dist::destroy_process_group();
  return failures ? 1 : 0;
}

// Joins, waits for the test's go (DIST_TEST_GO, a file it creates once the
// strangers it sent to the store have been refused), then trains: the
// collectives of async_order.
int after_strangers() {
  dist::init_process_group(options());
  if (!await_file(std::getenv("DIST_TEST_GO"))) fail("no go from the test");
  check_async_order(dist::group());
  dist::destroy_process_group();
  // The most memory this process held (the strangers must not have cost any).
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) std::cout << "peak_rss_kb=" << std::stol(line.substr(6)) << std::endl;
  return failures ? 1 : 0;
}

// Rank 1 stays alive but never joins the next collective: the others time
// out (STRATA_DIST_TIMEOUT_MS), naming what they waited for.
int peer_stalls() {
  dist::init_process_group(options());
  auto& pg = dist::group();
  Tensor t = strata::ones({100}, on_cpu(DType::f32));
  if (pg.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(4));
    std::_Exit(0);
  }
  expect_error("a stalled peer", [&] { pg.all_reduce(t).wait(); }, "timed out after");
  std::_Exit(failures ? 1 : 0);
}

// init_process_group must fail; the test checks the message.
int init_error() {
  expect_error("init_process_group", [] { dist::init_process_group(options()); }, "init_process_group");
  return failures ? 1 : 0;
}

// gather, scatter, all_to_all, send/recv and sub-groups (3 or 4 ranks).
int more_collectives() {
  dist::init_process_group(options());
  auto& pg = dist::group();
  const int r = pg.rank(), n = pg.size();
  for (DType dtype : {DType::f32, DType::f64, DType::i64}) {
    const std::string tag(strata::dtype_name(dtype));
    for (int64_t size : {int64_t{1}, int64_t{5}, int64_t{100003}}) {
      const std::string what = tag + "[" + std::to_string(size) + "]";
      // gather to the last rank: row k is rank k's.
      Tensor in = make(dtype, {size}, [&](int64_t i) { return base(i) + r; });
      Tensor out = r == n - 1 ? strata::zeros({n, size}, on_cpu(dtype)) : Tensor();
      pg.gather(out, in, n - 1).wait();
      if (r == n - 1) {
        expect_values("gather " + what, out, [&](int64_t i) { return base(i % size) + static_cast<double>(i / size); });
      }
      // scatter from rank 1: rank k gets row k.
      Tensor rows = r == 1 ? make(dtype, {n, size}, [&](int64_t i) { return base(i % size) + 10.0 * static_cast<double>(i / size); })
                           : Tensor();
      Tensor mine = strata::zeros({size}, on_cpu(dtype));
      pg.scatter(mine, rows, 1).wait();
      expect_values("scatter " + what, mine, [&](int64_t i) { return base(i) + 10.0 * r; });
      // all_to_all: rank r's out[q] is rank q's in[r] = base + 100 q + r.
      Tensor a2a_in = make(dtype, {n, size}, [&](int64_t i) { return base(i % size) + 100.0 * r + static_cast<double>(i / size); });
      Tensor a2a_out = strata::zeros({n, size}, on_cpu(dtype));
      pg.all_to_all(a2a_out, a2a_in).wait();
      expect_values("all_to_all " + what, a2a_out,
                    [&](int64_t i) { return base(i % size) + 100.0 * static_cast<double>(i / size) + r; });
    }
  }
  // send/recv around a ring: even ranks send first, odd ranks receive first.
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor outgoing = make(DType::f32, {3, 4}, [&](int64_t i) { return base(i) + r; });
  Tensor incoming = strata::zeros({3, 4}, on_cpu(DType::f32));
  if (r % 2 == 0) {
    pg.send(outgoing, next, 7).wait();
    pg.recv(incoming, prev, 7).wait();
  } else {
    pg.recv(incoming, prev, 7).wait();
    pg.send(outgoing, next, 7).wait();
  }
  expect_values("recv from the previous rank", incoming, [&](int64_t i) { return base(i) + prev; });
  // Sub-groups: the even ranks, and the odd ranks in reverse.
  std::vector<int> evens, odds;
  for (int k = 0; k < n; ++k) (k % 2 == 0 ? evens : odds).push_back(k);
  std::reverse(odds.begin(), odds.end());
  auto even_group = dist::new_group(evens);
  auto odd_group = dist::new_group(odds);
  dist::ProcessGroup& mine_group = r % 2 == 0 ? *even_group : *odd_group;
  dist::ProcessGroup& other_group = r % 2 == 0 ? *odd_group : *even_group;
  const std::vector<int>& members = r % 2 == 0 ? evens : odds;
  if (!mine_group.is_member() || other_group.is_member()) fail("membership of the sub-groups");
  if (mine_group.world_ranks() != members) fail("world_ranks() of the sub-group");
  if (members[static_cast<size_t>(mine_group.rank())] != r) fail("a sub-group's rank numbers its world rank");
  Tensor t = make(DType::f64, {4}, [&](int64_t i) { return base(i) + r; });
  mine_group.all_reduce(t).wait();
  double sum = 0;
  for (int k : members) sum += k;
  expect_values("all_reduce over " + std::string(r % 2 == 0 ? "the even ranks" : "the odd ranks"), t,
                [&](int64_t i) { return static_cast<double>(members.size()) * base(i) + sum; });
  mine_group.barrier().wait();
  // A rank outside a group may not use it: named, with the group.
  expect_error("a non-member's all_reduce", [&] { other_group.all_reduce(t).wait(); },
               "all_reduce on group [");
  expect_error("a non-member's all_reduce names the rank", [&] { other_group.all_reduce(t).wait(); },
               "rank " + std::to_string(r) + " of the default group is not a member (new_group left it out)");
  // Bad groups: a rank outside the world, a rank twice, none.
  expect_error("new_group with a rank outside the world", [&] { dist::new_group({0, n}); },
               "rank " + std::to_string(n) + " is not a rank of the default group (0.." + std::to_string(n - 1) +
                   ", world size " + std::to_string(n) + ")");
  expect_error("new_group with a rank twice", [&] { dist::new_group({1, 1}); }, "rank 1 is listed twice");
  expect_error("new_group with no rank", [&] { dist::new_group({}); }, "no ranks");
  // Bad point-to-point arguments: this rank, a tag out of range.
  expect_error("send to itself", [&] { pg.send(outgoing, r).wait(); }, "is not another rank of this group");
  expect_error("a negative tag", [&] { pg.recv(incoming, next, -1).wait(); }, "tag -1 is outside 0..134217727");
  pg.barrier().wait();
  even_group.reset();
  odd_group.reset();
  dist::destroy_process_group();
  return failures ? 1 : 0;
}

// send/recv whose sizes do not match: both ranks time out (the slot carries
// the layout, so no bytes are delivered into a buffer of another size), each
// naming its peer, the tag and its tensor.
int p2p_mismatch() {
  dist::init_process_group(options());
  auto& pg = dist::group();
  if (pg.rank() == 0) {
    Tensor t = make(DType::f32, {3}, base);
    expect_error("a send nobody receives", [&] { pg.send(t, 1, 1).wait(); },
                 "the send to rank 1 (tag 1, f32[3])");
  } else {
    Tensor t = strata::zeros({4}, on_cpu(DType::f32));
    expect_error("a receive of another size", [&] { pg.recv(t, 0, 1).wait(); },
                 "the receive from rank 0 (tag 1, f32[4])");
  }
  return failures ? 1 : 0;  // the group broke with the timeout: not destroyed cleanly
}

// Under any launcher: who launch_environment says this process is, then a
// group joined from it and one all-reduce of the ranks' numbers.
int whoami() {
  const dist::LaunchEnvironment e = dist::launch_environment();
  dist::init_process_group(options());
  auto t = strata::full({1}, static_cast<double>(dist::rank()), {.dtype = strata::DType::f64});
  dist::group().all_reduce(t).wait();
  std::cout << "whoami: rank " << dist::rank() << " of " << dist::world_size() << " local " << e.local_rank
            << " launcher " << e.launcher << " from " << e.rank_from << " master " << e.master_addr << ":"
            << e.master_port << " sum " << t.item<double>() << std::endl;
  dist::destroy_process_group();
  return 0;
}

// For `strata launch`: print, then rank 1 exits with DIST_TEST_EXIT (or a
// signal with DIST_TEST_SIGNAL) while the others wait for a long time.
int launch_probe() {
  const char* rank = std::getenv("STRATA_RANK");
  const char* world = std::getenv("STRATA_WORLD_SIZE");
  const char* port = std::getenv("STRATA_MASTER_PORT");
  std::cout << "hello from rank " << (rank ? rank : "?") << " of " << (world ? world : "?") << " port "
            << (port ? port : "?") << std::endl;
  std::cerr << "to stderr from rank " << (rank ? rank : "?") << std::endl;
  if (std::string(rank ? rank : "") == "1") {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (const char* sig = std::getenv("DIST_TEST_SIGNAL")) std::raise(std::atoi(sig));
    if (const char* code = std::getenv("DIST_TEST_EXIT")) return std::atoi(code);
    return 0;
  }
  if (std::getenv("DIST_TEST_EXIT") || std::getenv("DIST_TEST_SIGNAL"))
    std::this_thread::sleep_for(std::chrono::seconds(30));  // launch must end this
  return 0;
}

}  // namespace

// Device collectives (strata.collectives) through the "commhost" test
// plugin: tensors on commhost:0 have no host memory, so the group must
// reduce them through a DeviceCommunicator (POSIX shared memory between the
// ranks); results must equal the reference on every rank. Then the errors
// of DeviceCommunicator itself, on a communicator of this rank alone.
/// The device of the device_collectives scenario: DIST_TEST_DEVICE
/// ("commhost:0" by default; a plugin name without an index, "cuda", gives
/// each rank the device of its own index: tools/verify-gpu.sh on two GPUs).
strata::Device collectives_device() {
  const char* env = std::getenv("DIST_TEST_DEVICE");
  std::string id = env != nullptr && *env != '\0' ? env : "commhost:0";
  if (id.find(':') == std::string::npos) {
    const char* rank = std::getenv("RANK");
    id += ":" + std::string(rank != nullptr ? rank : "0");
  }
  return strata::Device(id);
}

int device_collectives() {
  const strata::Device dev = collectives_device();
  const std::string name = dev.str();
  if (!strata::DeviceCommunicator::available(dev)) fail(name + " offers no strata.collectives");
  if (strata::DeviceCommunicator::available(strata::Device("cpu:0"))) fail("cpu:0 claims strata.collectives");
  dist::init_process_group(options());
  auto& pg = dist::group();
  const int r = pg.rank(), n = pg.size();
  double sum_r = n * (n - 1) / 2.0;
  auto on_dev = [&](const strata::Shape& shape, const std::function<double(int64_t)>& f) {
    Tensor t = make(DType::f32, shape, f).to(dev);
    if (t.device() != dev) fail("tensor not on " + name);
    return t;
  };
  auto back = [](const Tensor& t) { return t.to(strata::Device("cpu:0")); };
  // 300001 f32 are more than one 1 MiB slot of the plugin: two chunks.
  for (int64_t size : {int64_t{1}, int64_t{7}, int64_t{300001}}) {
    std::string tag = name + " f32[" + std::to_string(size) + "]";
    auto mine = [r](int64_t i) { return base(i) + r; };
    Tensor t = on_dev({size}, mine);
    pg.all_reduce(t).wait();
    expect_values("all_reduce sum " + tag, back(t), [&](int64_t i) { return n * base(i) + sum_r; });
    t = on_dev({size}, mine);
    pg.all_reduce(t, dist::ReduceOp::mean).wait();
    expect_values("all_reduce mean " + tag, back(t), [&](int64_t i) { return base(i) + sum_r / n; }, 1e-5);
    t = on_dev({size}, mine);
    pg.all_reduce(t, dist::ReduceOp::max).wait();
    expect_values("all_reduce max " + tag, back(t), [&](int64_t i) { return base(i) + (n - 1); });
    t = on_dev({size}, mine);
    pg.all_reduce(t, dist::ReduceOp::min).wait();
    expect_values("all_reduce min " + tag, back(t), [&](int64_t i) { return base(i); });
    t = on_dev({size}, mine);
    pg.broadcast(t, n - 1).wait();
    expect_values("broadcast " + tag, back(t), [&](int64_t i) { return base(i) + (n - 1); });
    Tensor in = on_dev({size}, mine);
    Tensor out = strata::zeros({n, size}, {.dtype = DType::f32, .device = dev});
    pg.all_gather(out, in).wait();
    expect_values("all_gather " + tag, back(out),
                  [&](int64_t i) { return base(i % size) + static_cast<double>(i / size); });
  }
  // Non-integer values: every rank's sum must be bitwise the same (the
  // plugin reduces the slots in rank order); gather them over Gloo.
  Tensor x = on_dev({5}, [r](int64_t i) { return 0.1 * static_cast<double>(i + 1) + 0.01 * r; });
  pg.all_reduce(x).wait();
  Tensor host = back(x);
  Tensor all = strata::zeros({n, 5}, on_cpu(DType::f32));
  pg.all_gather(all, host).wait();
  std::vector<float> v = all.to_vector<float>();
  for (int q = 1; q < n; ++q)
    if (std::memcmp(&v[0], &v[static_cast<size_t>(q) * 5], 5 * sizeof(float)) != 0)
      fail("all_reduce of non-integer values differs between rank 0 and rank " + std::to_string(q));
  // What the group refuses for device tensors.
  Tensor rs_in = on_dev({n, 3}, [](int64_t i) { return static_cast<double>(i); });
  Tensor rs_out = on_dev({3}, [](int64_t) { return 0.0; });
  expect_error("reduce_scatter on " + name, [&] { pg.reduce_scatter(rs_out, rs_in).wait(); },
               "reduce_scatter is host-only");
  Tensor nc = on_dev({2, 3}, [](int64_t i) { return static_cast<double>(i); }).transpose(0, 1);
  expect_error("non-contiguous " + name + " tensor", [&] { pg.all_reduce(nc).wait(); },
               "is not contiguous (strides [1, 3])");
  // A sub-group's collectives are Gloo's: a device tensor is refused there,
  // and the sub-group stays usable.
  std::vector<int> everyone(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) everyone[static_cast<size_t>(k)] = k;
  auto sub = dist::new_group(everyone);
  Tensor dt = on_dev({3}, [](int64_t i) { return static_cast<double>(i); });
  expect_error("a " + name + " tensor on a sub-group", [&] { sub->all_reduce(dt).wait(); },
               "device collectives (strata.collectives) run on the default group only");
  Tensor ht = make(DType::f32, {3}, [](int64_t) { return 1.0; });
  sub->all_reduce(ht).wait();
  expect_values("the sub-group after the refusal", ht, [&](int64_t) { return static_cast<double>(n); });
  sub.reset();
  dist::destroy_process_group();

  // DeviceCommunicator's own errors (a communicator of this rank alone).
  auto expect_device_error = [](const std::string& what, const std::function<void()>& fn, const std::string& needle) {
    try {
      fn();
      fail(what + ": no DeviceError");
    } catch (const strata::DeviceError& e) {
      std::cout << "ERROR: " << e.what() << std::endl;
      if (std::string(e.what()).find(needle) == std::string::npos)
        fail(what + ": the message lacks \"" + needle + "\": " + e.what());
    }
  };
  expect_device_error("unique_id on cpu:0", [] { strata::DeviceCommunicator::unique_id(strata::Device("cpu:0")); },
                      "cpu:0's plugin \"cpu\" offers no strata.collectives extension");
  std::vector<uint8_t> uid = strata::DeviceCommunicator::unique_id(dev);
  expect_device_error("communicator on cpu:0", [&] { strata::DeviceCommunicator c(strata::Device("cpu:0"), uid, 0, 1); },
                      "offers no strata.collectives extension");
  expect_device_error("rank beyond the world", [&] { strata::DeviceCommunicator c(dev, uid, 1, 1); },
                      "rank 1 is not in 0..0");
  strata::DeviceCommunicator solo(dev, uid, 0, 1);
  if (solo.device() != dev || solo.rank() != 0 || solo.world_size() != 1) fail("DeviceCommunicator accessors");
  Tensor s = on_dev({4}, [](int64_t i) { return static_cast<double>(i) + 0.5; });
  solo.all_reduce(s, strata::CollectiveOp::product);
  expect_values("solo all_reduce product", back(s), [](int64_t i) { return static_cast<double>(i) + 0.5; });
  Tensor cpu_t = strata::zeros({4}, on_cpu(DType::f32));
  expect_device_error("cpu tensor on a " + name + " communicator",
                      [&] { solo.all_reduce(cpu_t, strata::CollectiveOp::sum); },
                      "is on cpu:0, not on the communicator's device " + name);
  Tensor nc2 = on_dev({2, 3}, [](int64_t i) { return static_cast<double>(i); }).transpose(0, 1);
  expect_device_error("non-contiguous", [&] { solo.all_reduce(nc2, strata::CollectiveOp::sum); },
                      "is not contiguous (shape [3, 2], strides [1, 3])");
  expect_device_error("bad root", [&] { solo.broadcast(s, 2); }, "root 2 is not in 0..0");
  Tensor bad_out = strata::zeros({2, 4}, {.dtype = DType::f32, .device = dev});
  expect_device_error("all_gather shape", [&] { solo.all_gather(bad_out, s); }, "does not fit input");
  if (dev.str() == "commhost:0") {  // an error of this plugin's own
    Tensor i64 = strata::zeros({4}, {.dtype = DType::i64, .device = dev});
    expect_device_error("average of i64 (the plugin's error)",
                        [&] { solo.all_reduce(i64, strata::CollectiveOp::average); },
                        "commhost:0: DeviceCommunicator::all_reduce (rank 0 of 1) failed: commhost: all_reduce: "
                        "reduce op 4");
  }
  if (failures == 0) std::cout << "device_collectives: every check passed on " << name << std::endl;
  return failures ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: dist_worker SCENARIO\n";
    return 2;
  }
  std::string scenario = argv[1];
  try {
    if (scenario == "collectives") return collectives();
    if (scenario == "async") return async_order();
    if (scenario == "mismatch") return mismatch();
    if (scenario == "bad_device") return bad_device();
    if (scenario == "peer_dies") return peer_dies();
    if (scenario == "init_error") return init_error();
    if (scenario == "peer_stalls") return peer_stalls();
    if (scenario == "launch_probe") return launch_probe();
    if (scenario == "whoami") return whoami();
    if (scenario == "more_collectives") return more_collectives();
    if (scenario == "p2p_mismatch") return p2p_mismatch();
    if (scenario == "device_collectives") return device_collectives();
    if (scenario == "peer_killed") return peer_killed();
    if (scenario == "die_together") return die_together();
    if (scenario == "unchecked_mismatch") return unchecked_mismatch();
    if (scenario == "join_or_refused") return join_or_refused();
    if (scenario == "after_strangers") return after_strangers();
  } catch (const std::exception& e) {
    std::cerr << "FAIL: uncaught " << e.what() << std::endl;
    return 1;
  }
  std::cerr << "dist_worker: unknown scenario " << scenario << "\n";
  return 2;
}
