// All-reduce bus bandwidth on loopback, 2 processes: Strata's ProcessGroup
// (strata::distributed, with its cross-rank consistency check unless
// STRATA_DIST_CHECK=0) against a raw Gloo allreduce on the same buffers, in
// the same run, 1 MiB to 256 MiB of f32 (docs/distributed.md, "Performance").
//
//   bench_allreduce                       starts its peer (rank 1) itself
//   strata launch -n 2 bench_allreduce    or runs as the launched ranks
//
// Both ranks run identical loops (fixed iterations and repetitions: Google
// Benchmark's adaptive iteration count would make the ranks disagree); only
// rank 0 reports. Bus bandwidth = bytes * 2(n-1)/n / time (n = 2: bytes /
// time). After the benchmarks rank 0 prints, per size, the median and range
// over the repetitions of each side and the ratio of median times.
#include <strata/distributed.hpp>
#include <strata/strata.hpp>

#include <benchmark/benchmark.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace dist = strata::distributed;

constexpr int kRepetitions = 5;
// Message sizes in bytes: one f32 (latency), then 1 MiB to 256 MiB (bandwidth).
constexpr int64_t kSizes[] = {4, int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20, int64_t{64} << 20,
                              int64_t{256} << 20};

std::shared_ptr<gloo::rendezvous::Context> g_gloo;
// (side, bytes) -> seconds per all-reduce, one entry per repetition.
std::map<std::pair<std::string, int64_t>, std::vector<double>> g_times;

int64_t iterations_for(int64_t bytes) {
  // About 64 MiB of traffic per repetition, at least 2 and at most 2000 iterations.
  return std::clamp<int64_t>((int64_t{64} << 20) / bytes, 2, 2000);
}

void report(benchmark::State& state, const std::string& side, int64_t bytes, double seconds) {
  int n = dist::world_size();
  double per = seconds / static_cast<double>(state.iterations());
  g_times[{side, bytes}].push_back(per);
  state.counters["busbw_GB/s"] = static_cast<double>(bytes) * 2.0 * (n - 1) / n / per / 1e9;
  state.SetBytesProcessed(state.iterations() * bytes);
}

void BM_StrataAllReduce(benchmark::State& state) {
  int64_t bytes = state.range(0);
  strata::Tensor t = strata::ones({bytes / 4}, {.dtype = strata::f32, .device = strata::Device("cpu:0")});
  auto& pg = dist::group();
  pg.barrier().wait();
  auto start = std::chrono::steady_clock::now();
  for (auto _ : state) pg.all_reduce(t).wait();
  report(state, "strata", bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// Raw Gloo; with `checked`, each all-reduce is preceded by an all-gather of
// 16 int64 per rank, the message Strata's consistency check sends, so that
// the check's cost in Gloo is told apart from the ProcessGroup's own.
void gloo_all_reduce(benchmark::State& state, bool checked) {
  int64_t bytes = state.range(0);
  int64_t header[16] = {1, bytes};
  std::vector<int64_t> headers(16 * static_cast<size_t>(dist::world_size()));
  strata::Tensor t = strata::ones({bytes / 4}, {.dtype = strata::f32, .device = strata::Device("cpu:0")});
  auto* data = static_cast<float*>(strata::native_view(t).data);
  dist::group().barrier().wait();
  auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (checked) {
      gloo::AllgatherOptions check(g_gloo);
      check.setInput(header, 16);
      check.setOutput(headers.data(), headers.size());
      check.setTag(1);
      gloo::allgather(check);
    }
    gloo::AllreduceOptions opts(g_gloo);
    opts.setOutput(data, static_cast<size_t>(bytes / 4));
    opts.setReduceFunction([](void* o, const void* a, const void* b, size_t n) {
      auto* out = static_cast<float*>(o);
      auto* x = static_cast<const float*>(a);
      auto* y = static_cast<const float*>(b);
      for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
    });
    gloo::allreduce(opts);
  }
  report(state, checked ? "gloo+check" : "gloo", bytes,
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void BM_GlooAllReduce(benchmark::State& state) { gloo_all_reduce(state, false); }
void BM_GlooCheckedAllReduce(benchmark::State& state) { gloo_all_reduce(state, true); }

void register_benchmarks() {
  for (int64_t bytes : kSizes) {
    // Interleaved per size, so that both sides see the same machine state.
    benchmark::RegisterBenchmark("BM_StrataAllReduce", BM_StrataAllReduce)
        ->Arg(bytes)->Iterations(iterations_for(bytes))->Repetitions(kRepetitions)->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("BM_GlooAllReduce", BM_GlooAllReduce)
        ->Arg(bytes)->Iterations(iterations_for(bytes))->Repetitions(kRepetitions)->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("BM_GlooCheckedAllReduce", BM_GlooCheckedAllReduce)
        ->Arg(bytes)->Iterations(iterations_for(bytes))->Repetitions(kRepetitions)->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void print_summary() {
  const int n = dist::world_size();
  const char* sides[] = {"strata", "gloo", "gloo+check"};
  std::printf("\nall-reduce, %d ranks on loopback, %d repetitions: median [min, max] of bus bandwidth in GB/s\n"
              "(1 MiB and up) or of microseconds per all-reduce (4 B); time ratios of the medians.\n"
              "gloo+check: raw Gloo preceded by the all-gather that Strata's consistency check sends.\n",
              n, kRepetitions);
  std::printf("%9s  %24s  %24s  %24s  %12s  %12s\n", "size", "strata ProcessGroup", "raw Gloo", "raw Gloo + check",
              "strata/gloo", "strata/g+chk");
  for (int64_t bytes : kSizes) {
    const bool latency = bytes < (int64_t{1} << 20);
    double med[3] = {};
    std::string cells;
    for (int i = 0; i < 3; ++i) {
      auto& v = g_times[{sides[i], bytes}];
      if (v.empty()) return;
      auto [lo, hi] = std::minmax_element(v.begin(), v.end());
      med[i] = median(v);
      auto shown = [&](double t) {
        return latency ? t * 1e6 : static_cast<double>(bytes) * 2.0 * (n - 1) / n / t / 1e9;
      };
      char cell[64];
      // Bandwidth is the inverse of time: the slowest repetition is the minimum.
      std::snprintf(cell, sizeof cell, "  %8.2f [%6.2f, %6.2f]", shown(med[i]), shown(latency ? *lo : *hi),
                    shown(latency ? *hi : *lo));
      cells += cell;
    }
    char size[32];
    if (latency)
      std::snprintf(size, sizeof size, "%lld B", static_cast<long long>(bytes));
    else
      std::snprintf(size, sizeof size, "%lld MiB", static_cast<long long>(bytes >> 20));
    std::printf("%9s%s  %12.3f  %12.3f\n", size, cells.c_str(), med[0] / med[1], med[0] / med[2]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Not launched: become rank 0 and start rank 1 (this program, same arguments).
  pid_t peer = -1;
  if (!std::getenv("STRATA_RANK")) {
    std::string port = std::to_string(free_port());
    ::setenv("STRATA_WORLD_SIZE", "2", 1);
    ::setenv("STRATA_MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("STRATA_MASTER_PORT", port.c_str(), 1);
    ::setenv("STRATA_BENCH_RUN_ID", std::to_string(::getpid()).c_str(), 1);
    ::setenv("STRATA_RANK", "1", 1);
    peer = ::fork();
    if (peer == 0) {
      std::freopen("/dev/null", "w", stdout);
      ::execv("/proc/self/exe", argv);
      std::perror("bench_allreduce: exec of the peer");
      std::_Exit(127);
    }
    ::setenv("STRATA_RANK", "0", 1);
  }
  dist::init_process_group();
  const int rank = dist::rank();
  if (rank != 0) std::freopen("/dev/null", "w", stdout);

  // Raw Gloo: its own context, rendezvous through files named by the run.
  const char* run_id = std::getenv("STRATA_BENCH_RUN_ID");
  std::string id = run_id ? run_id : std::to_string(::getppid()) + "-" + std::getenv("STRATA_MASTER_PORT");
  auto dir = std::filesystem::temp_directory_path() / ("strata-bench-allreduce-" + id);
  std::filesystem::create_directories(dir);
  {
    gloo::rendezvous::FileStore files(dir.string());
    gloo::rendezvous::PrefixStore store("gloo", files);
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    g_gloo = std::make_shared<gloo::rendezvous::Context>(rank, dist::world_size());
    g_gloo->connectFullMesh(store, device);
  }
  dist::group().barrier().wait();
  if (rank == 0) std::filesystem::remove_all(dir);

  register_benchmarks();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  if (rank == 0) print_summary();
  dist::group().barrier().wait();
  g_gloo.reset();
  dist::destroy_process_group();
  benchmark::Shutdown();
  if (peer > 0) {
    int status = 0;
    ::waitpid(peer, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "bench_allreduce: the peer (rank 1) failed\n");
      return 1;
    }
  }
  return 0;
}
