// bench_ddp — one data-parallel training step of the digits MLP
// (64 -> 128 -> 128 -> 10, Adam) per iteration, timed on every rank.
// Run it under `strata launch -n 1` and `-n 2` with the same --batch (the
// per-process batch): scaling efficiency = step time at 1 / step time at 2.
// Rank 0 prints the median step time, and the time of the same step without
// DDP (the single-process baseline) and of the backward's reduction alone.
#include <strata/ddp.hpp>
#include <strata/distributed.hpp>
#include <strata/strata.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

class Mlp : public nn::Module {
 public:
  Mlp() {
    l1_ = register_module("l1", std::make_shared<nn::Linear>(64, 128));
    l2_ = register_module("l2", std::make_shared<nn::Linear>(128, 128));
    l3_ = register_module("l3", std::make_shared<nn::Linear>(128, 10));
  }
  Tensor forward(const Tensor& x) override { return (*l3_)(relu((*l2_)(relu((*l1_)(x))))); }

 private:
  std::shared_ptr<nn::Linear> l1_, l2_, l3_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = argc > 1 ? std::atoll(argv[1]) : 32;
  int steps = argc > 2 ? std::atoi(argv[2]) : 300;
  size_t bucket_bytes = argc > 3 ? static_cast<size_t>(std::atoll(argv[3])) : (25u << 20);
  try {
    distributed::init_process_group();
    int rank = distributed::rank();
    int world = distributed::world_size();
    manual_seed(0);
    Mlp model;
    nn::DistributedDataParallel ddp(model, {.bucket_bytes = bucket_bytes});
    nn::Adam opt(model.parameters(), {.lr = 1e-3});
    manual_seed(1 + static_cast<uint64_t>(rank));
    Tensor x = rand({batch, 64});
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < batch; ++i) labels.push_back(i % 10);
    Tensor y = from_data(labels, {batch});

    auto time_steps = [&](const std::function<Tensor(const Tensor&)>& fwd) {
      std::vector<double> ms;
      for (int s = 0; s < steps + 20; ++s) {
        auto t0 = Clock::now();
        opt.zero_grad();
        nn::functional::cross_entropy(fwd(x), y).backward();
        opt.step();
        if (s >= 20) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      return median(ms);
    };
    distributed::group().barrier().wait();
    double ddp_ms = time_steps([&](const Tensor& in) { return ddp(in); });
    distributed::group().barrier().wait();
    double local_ms = 0.0;
    {
      auto local = ddp.no_sync();  // the same step with no communication
      local_ms = time_steps([&](const Tensor& in) { return model(in); });
    }
    distributed::group().barrier().wait();
    // The collective alone: one all-reduce of all the gradients' bytes.
    int64_t numel = 0;
    for (const Tensor& p : model.parameters()) numel += p.numel();
    Tensor flat = zeros({numel});
    std::vector<double> ar;
    for (int s = 0; s < steps; ++s) {
      auto t0 = Clock::now();
      distributed::group().all_reduce(flat).wait();
      ar.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    if (rank == 0) {
      nn::DDPStats st = ddp.stats();
      std::printf(
          "world %d, per-rank batch %lld, %lld parameters (%.1f KiB of f32 gradients), %zu bucket(s)\n"
          "ddp step (median of %d): %.3f ms; same step without communication: %.3f ms; "
          "all-reduce of all gradients alone: %.3f ms; buckets overlapped/at end: %llu/%llu\n",
          world, static_cast<long long>(batch), static_cast<long long>(numel), static_cast<double>(numel) * 4 / 1024,
          ddp.bucket_layout().size(), steps, ddp_ms, local_ms, median(ar),
          static_cast<unsigned long long>(st.buckets_overlapped), static_cast<unsigned long long>(st.buckets_at_end));
    }
    distributed::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: %s\n", e.what());
    return 1;
  }
}
