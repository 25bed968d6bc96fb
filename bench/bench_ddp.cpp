// bench_ddp — one data-parallel training step per iteration, timed on every
// rank, under `strata launch -n 1` and `-n 2` with the same per-rank batch:
// scaling = step time at 1 rank / step time at 2 (1.0 is perfect; compare
// with the same OMP_NUM_THREADS, one per rank on a 2-core machine).
//
//   strata launch -n 2 bench_ddp [--model digits|wide] [--batch B] [--steps S]
//                                [--bucket-bytes N] [--zero 0|1|2]
//
//   digits  the digits MLP, 64 -> 128 -> 128 -> 10 (communication-bound)
//   wide    four Linear(1024, 1024) with ReLU between (compute-bound:
//           4.2 M parameters, 16 MiB of f32 gradients)
//   --zero  0: DDP + Adam; 1: DDP + ShardedOptimizer stage 1; 2:
//           ShardedOptimizer stage 2 without DDP
//
// Rank 0 prints the median step time (and its range), the same step
// without communication (DDP's no_sync: the 1-rank compute), the all-reduce
// of all the gradients alone, the timeline of the last step's buckets (when
// each all-reduce started against when backward ended: the overlap), and
// the optimizer state each rank holds.
#include <strata/ddp.hpp>
#include <strata/distributed.hpp>
#include <strata/strata.hpp>
#include <strata/zero.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

class Mlp : public nn::Module {
 public:
  explicit Mlp(const std::vector<int64_t>& widths) {
    for (size_t k = 0; k + 1 < widths.size(); ++k) {
      layers_.push_back(
          register_module("l" + std::to_string(k + 1), std::make_shared<nn::Linear>(widths[k], widths[k + 1])));
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (size_t k = 0; k < layers_.size(); ++k) h = k + 1 < layers_.size() ? relu((*layers_[k])(h)) : (*layers_[k])(h);
    return h;
  }

 private:
  std::vector<std::shared_ptr<nn::Linear>> layers_;
};

struct Stats {
  double median = 0, min = 0, max = 0;
};
Stats summary(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

size_t state_bytes(const nn::Optimizer& opt) {
  size_t bytes = 0;
  for (const auto& [name, t] : opt.state_dict()) {
    if (name.rfind("param.", 0) == 0) bytes += static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "digits";
  int64_t batch = 32;
  int steps = 300;
  size_t bucket_bytes = 25u << 20;
  int zero = 0;
  for (int k = 1; k < argc; ++k) {
    auto value = [&](const char* flag) -> const char* {
      if (k + 1 >= argc) {
        std::fprintf(stderr, "bench_ddp: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++k];
    };
    if (!std::strcmp(argv[k], "--model")) model_name = value("--model");
    else if (!std::strcmp(argv[k], "--batch")) batch = std::atoll(value("--batch"));
    else if (!std::strcmp(argv[k], "--steps")) steps = std::atoi(value("--steps"));
    else if (!std::strcmp(argv[k], "--bucket-bytes")) bucket_bytes = static_cast<size_t>(std::atoll(value("--bucket-bytes")));
    else if (!std::strcmp(argv[k], "--zero")) zero = std::atoi(value("--zero"));
    else {
      std::fprintf(stderr, "bench_ddp: unknown argument '%s' (--model digits|wide, --batch, --steps, --bucket-bytes, --zero)\n", argv[k]);
      return 2;
    }
  }
  if ((model_name != "digits" && model_name != "wide") || batch < 1 || steps < 1 || zero < 0 || zero > 2) {
    std::fprintf(stderr, "bench_ddp: bad arguments (--model digits|wide, --batch >= 1, --steps >= 1, --zero 0..2)\n");
    return 2;
  }
  try {
    distributed::init_process_group();
    const int rank = distributed::rank();
    const int world = distributed::world_size();
    const std::vector<int64_t> widths =
        model_name == "wide" ? std::vector<int64_t>{1024, 1024, 1024, 1024, 1024} : std::vector<int64_t>{64, 128, 128, 10};
    manual_seed(0);
    Mlp model(widths);
    auto adam = [](std::vector<Tensor> ps) {
      return std::make_unique<nn::Adam>(std::move(ps), nn::AdamOptions{.lr = 1e-4});
    };
    std::optional<nn::DistributedDataParallel> ddp;
    if (zero < 2) ddp.emplace(model, nn::DDPOptions{.bucket_bytes = bucket_bytes});
    std::unique_ptr<nn::Adam> plain;
    std::unique_ptr<nn::ShardedOptimizer> sharded;
    if (zero == 0) plain = adam(model.parameters());
    else
      sharded = std::make_unique<nn::ShardedOptimizer>(model.parameters(), adam,
                                                       nn::ShardedOptions{.stage = zero, .bucket_bytes = bucket_bytes});
    auto zero_grad = [&] { plain ? plain->zero_grad() : sharded->zero_grad(); };
    auto step = [&] { plain ? plain->step() : sharded->step(); };

    manual_seed(1 + static_cast<uint64_t>(rank));
    Tensor x = rand({batch, widths.front()});
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < batch; ++i) labels.push_back(i % widths.back());
    Tensor y = from_data(labels, {batch});

    const int warmup = std::min(20, steps);
    auto time_steps = [&](const std::function<Tensor(const Tensor&)>& fwd) {
      std::vector<double> ms;
      for (int s = 0; s < steps + warmup; ++s) {
        auto t0 = Clock::now();
        zero_grad();
        nn::functional::cross_entropy(fwd(x), y).backward();
        step();
        if (s >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      return summary(ms);
    };
    distributed::group().barrier().wait();
    const Stats dist_ms = time_steps([&](const Tensor& in) { return ddp ? (*ddp)(in) : model(in); });
    distributed::group().barrier().wait();
    const size_t mine = sharded ? sharded->state_bytes() : state_bytes(*plain);
    const nn::ShardedStats zero_stats = sharded ? sharded->stats() : nn::ShardedStats{};
    sharded.reset();  // stage 2's hooks stay on the parameters but do nothing once it is gone
    // The same forward and backward without communication (and a plain
    // Adam step on every parameter): the 1-rank compute.
    auto local_loop = [&] {
      nn::Adam local_opt(model.parameters(), {.lr = 1e-4});
      std::vector<double> ms;
      for (int s = 0; s < steps + warmup; ++s) {
        auto t0 = Clock::now();
        local_opt.zero_grad();
        nn::functional::cross_entropy(model(x), y).backward();
        local_opt.step();
        if (s >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      return summary(ms);
    };
    Stats local_ms;
    if (ddp) {
      auto quiet = ddp->no_sync();  // DDP's hooks stay on the parameters: keep them from reducing
      local_ms = local_loop();
    } else {
      local_ms = local_loop();
    }
    distributed::group().barrier().wait();
    // The collective alone: one all-reduce of all the gradients' bytes.
    int64_t numel = 0;
    for (const Tensor& p : model.parameters()) numel += p.numel();
    Tensor flat = zeros({numel});
    std::vector<double> ar;
    for (int s = 0; s < std::min(steps, 50); ++s) {
      auto t0 = Clock::now();
      distributed::group().all_reduce(flat).wait();
      ar.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    Tensor bytes = full({1}, static_cast<double>(mine), {.dtype = DType::f64, .device = Device("cpu:0")});
    Tensor all_bytes = zeros({world, 1}, {.dtype = DType::f64, .device = Device("cpu:0")});
    distributed::group().all_gather(all_bytes, bytes).wait();
    if (rank == 0) {
      const Stats a = summary(ar);
      std::printf("model %s, world %d, per-rank batch %lld, %lld parameters (%.1f MiB of f32 gradients), zero %d\n",
                  model_name.c_str(), world, static_cast<long long>(batch), static_cast<long long>(numel),
                  static_cast<double>(numel) * 4 / (1 << 20), zero);
      std::printf("step (median of %d): %.3f ms [%.3f, %.3f]; without communication: %.3f ms [%.3f, %.3f]; "
                  "all-reduce of all gradients alone: %.3f ms [%.3f, %.3f]\n",
                  steps, dist_ms.median, dist_ms.min, dist_ms.max, local_ms.median, local_ms.min, local_ms.max,
                  a.median, a.min, a.max);
      if (ddp) {
        const nn::DDPStats st = ddp->stats();
        std::printf("%zu bucket(s); overlapped/at end: %llu/%llu; last step's timeline (us from its first gradient):",
                    ddp->bucket_layout().size(), static_cast<unsigned long long>(st.buckets_overlapped),
                    static_cast<unsigned long long>(st.buckets_at_end));
        for (size_t b = 0; b < st.last_launch_us.size(); ++b) std::printf(" bucket %zu at %.0f,", b, st.last_launch_us[b]);
        std::printf(" backward ended at %.0f, averaged gradients ready at %.0f\n", st.last_backward_end_us,
                    st.last_end_us);
      }
      if (zero == 2) {
        std::printf("stage 2: %llu bucketed passes; buckets reduce-scattered during backward/at its end: %llu/%llu\n",
                    static_cast<unsigned long long>(zero_stats.reduced_passes),
                    static_cast<unsigned long long>(zero_stats.buckets_overlapped),
                    static_cast<unsigned long long>(zero_stats.buckets_at_end));
      }
      std::printf("optimizer state per rank (bytes):");
      const std::vector<double> per = all_bytes.to_vector<double>();
      for (int r = 0; r < world; ++r) std::printf(" %.0f", per[static_cast<size_t>(r)]);
      std::printf("\n");
    }
    distributed::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: %s\n", e.what());
    return 1;
  }
}
