// DistributedDataParallel and ShardedOptimizer across 2 or 3 processes on loopback. Each test forks
// two ranks (the parent process never touches strata, so forking is safe)
// that rendezvous through a fresh file store; each rank checks its own
// results and exits non-zero with the reason. The parent waits at most
// kDeadline and kills ranks that hang.
#include <strata/ddp.hpp>
#include <strata/checkpointer.hpp>
#include <strata/zero.hpp>
#include <strata/distributed.hpp>
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <iostream>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace strata;
namespace dist = strata::distributed;

constexpr auto kDeadline = std::chrono::seconds(90);

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

/// Runs body(rank) in `world` forked processes joined into a process group.
/// `env` is set in each rank before it touches strata.
void run_ranks(const std::string& name, const std::function<void(int)>& body, int world = 2,
               const std::vector<std::pair<std::string, std::string>>& env = {}) {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("strata_ddp_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      int code = 0;
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      try {
        dist::Options o;
        o.rank = r;
        o.world_size = world;
        o.file_store = dir.string();
        o.timeout = std::chrono::seconds(30);
        dist::init_process_group(o);
        body(r);
        dist::destroy_process_group();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d] %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  std::vector<int> status(pids.size(), -1);
  size_t left = pids.size();
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t k = 0; k < pids.size(); ++k) {
      if (status[k] != -1) continue;
      int st = 0;
      if (::waitpid(pids[k], &st, WNOHANG) == pids[k]) {
        status[k] = st;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t k = 0; k < pids.size(); ++k) {
    if (status[k] == -1) {
      ::kill(pids[k], SIGKILL);
      ::waitpid(pids[k], nullptr, 0);
      ADD_FAILURE() << "rank " << k << " did not finish within " << kDeadline.count() << " s";
    } else {
      EXPECT_TRUE(WIFEXITED(status[k]) && WEXITSTATUS(status[k]) == 0) << "rank " << k << " failed (see its output)";
    }
  }
  std::filesystem::remove_all(dir);
}

/// 6 -> 8 -> 8 -> 3 with tanh; the middle block can be checkpointed; an
/// optional layer that forward() uses only when `use_extra`.
class Net : public nn::Module {
 public:
  explicit Net(bool checkpointed = false, bool extra = false, int64_t hidden = 8) : checkpointed_(checkpointed) {
    a_ = register_module("a", std::make_shared<nn::Linear>(6, hidden));
    b_ = register_module("b", std::make_shared<nn::Linear>(hidden, hidden));
    c_ = register_module("c", std::make_shared<nn::Linear>(hidden, 3));
    if (extra) extra_ = register_module("extra", std::make_shared<nn::Linear>(3, 3));
  }
  Tensor forward(const Tensor& x) override {
    auto block = [this](const Tensor& in) { return tanh((*b_)(tanh((*a_)(in)))); };
    Tensor h = checkpointed_ ? checkpoint(block, x) : block(x);
    Tensor y = (*c_)(h);
    return use_extra && extra_ ? (*extra_)(y) : y;
  }
  std::string name() const override { return "Net"; }
  bool use_extra = false;

 private:
  bool checkpointed_;
  std::shared_ptr<nn::Linear> a_, b_, c_, extra_;
};

/// The global batch, identical on every rank: x [n, 6], y [n] classes.
struct Batch {
  Tensor x, y;
};
Batch global_batch(int64_t n, DType dtype, uint64_t seed = 7) {
  manual_seed(seed);
  Tensor x = randn({n, 6}).to(dtype);
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) y.push_back((i * 7 + 3) % 3);
  return {x, from_data(y, {n})};
}
Batch shard(const Batch& b, int rank, int world) {
  int64_t per = b.x.size(0) / world;
  return {b.x.slice(0, rank * per, (rank + 1) * per), b.y.slice(0, rank * per, (rank + 1) * per)};
}

std::vector<Tensor> grads_of(const nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.grad());
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  require(a.defined() && b.defined(), "both gradients defined");
  return amax(abs(a.to(DType::f64) - b.to(DType::f64))).item<double>();
}

bool bitwise_equal(const Tensor& a, const Tensor& b) { return a.to_bytes() == b.to_bytes(); }

/// A model with the same initial parameters on every rank (seeded), in `dtype`.
std::unique_ptr<Net> make_net(DType dtype, bool checkpointed = false, bool extra = false, uint64_t seed = 1) {
  manual_seed(seed);
  auto net = std::make_unique<Net>(checkpointed, extra);
  net->to(dtype);
  return net;
}

/// DDP over `world` ranks, each with its shard of one global batch, gives
/// the gradients of the whole batch in one process (to f32 rounding), and
/// launches its buckets during backward.
void expect_gradients_of_the_concatenated_batch(int world) {
  run_ranks("f32_" + std::to_string(world), [world](int rank) {
    Batch all = global_batch(18, DType::f32);  // 18: shards of 9 or 6
    Batch mine = shard(all, rank, world);
    auto ref = make_net(DType::f32);
    nn::functional::cross_entropy((*ref)(all.x), all.y).backward();

    auto net = make_net(DType::f32);
    nn::DistributedDataParallel ddp(*net, {.bucket_bytes = 300});
    require(ddp.bucket_layout().size() >= 3, "several buckets");
    require(ddp.bucket_layout()[0][0] == "c.bias", "bucket 0 starts with the last parameter");
    nn::functional::cross_entropy(ddp(mine.x), mine.y).backward();
    auto g = grads_of(*net);
    auto r = grads_of(*ref);
    for (size_t i = 0; i < g.size(); ++i) {
      double d = max_abs_diff(g[i], r[i]);
      require(d <= 1e-6, "parameter " + std::to_string(i) + " differs by " + std::to_string(d));
    }
    nn::DDPStats s = ddp.stats();
    require(s.reduced_passes == 1, "one reduced pass");
    require(s.buckets_overlapped >= 2, "buckets launched during backward: " + std::to_string(s.buckets_overlapped));
  }, world);
}

TEST(DDP, GradientsEqualTheConcatenatedBatchF32AndBucketsOverlapBackward) {
  expect_gradients_of_the_concatenated_batch(2);
}

// Three ranks: a reduction that sums and halves, or averages pairwise, agrees
// with the mean at two ranks and not at three.
TEST(DDP, GradientsEqualTheConcatenatedBatchOn3Ranks) { expect_gradients_of_the_concatenated_batch(3); }

// A model that is not an nn::Module (Python's modules): its parameters and
// buffers as named lists, before_forward() by hand. The same buckets and
// averages as the Module form; what it cannot do is refused by name.
TEST(DDP, AWrapperFromParameterListsAveragesLikeTheModuleForm) {
  run_ranks("lists", [](int rank) {
    Batch all = global_batch(18, DType::f32);
    Batch mine = shard(all, rank, 2);
    auto ref = make_net(DType::f32);
    nn::functional::cross_entropy((*ref)(all.x), all.y).backward();

    auto net = make_net(DType::f32, false, false, 1 + rank);  // ranks start apart: construction broadcasts
    Tensor counter = full({1}, static_cast<double>(rank + 5));
    nn::DistributedDataParallel ddp(net->named_parameters(), {{"counter", counter}}, {.bucket_bytes = 300});
    require(counter.item<double>() == 5.0, "the buffer broadcast from rank 0");
    require(ddp.bucket_layout()[0][0] == "c.bias", "bucket 0 starts with the last parameter");
    ddp.before_forward();
    nn::functional::cross_entropy((*net)(mine.x), mine.y).backward();
    auto g = grads_of(*net), r = grads_of(*ref);
    for (size_t i = 0; i < g.size(); ++i) {
      const double d = max_abs_diff(g[i], r[i]);
      require(d <= 1e-6, "parameter " + std::to_string(i) + " differs by " + std::to_string(d));
    }
    require(ddp.stats().reduced_passes == 1 && ddp.stats().buckets_overlapped >= 2, "bucketed and overlapped");
    bool refused = false;
    try {
      ddp(mine.x);
    } catch (const Error& e) {
      refused = std::string(e.what()).find("made from parameter lists") != std::string::npos;
    }
    require(refused, "operator() without a module names why");
    Tensor frozen = zeros({2});
    refused = false;
    try {
      nn::DistributedDataParallel bad({{"frozen", frozen}}, {});
    } catch (const ValueError& e) {
      refused = std::string(e.what()).find("'frozen'") != std::string::npos;
    }
    require(refused, "a parameter that does not require grad is named");
  });
}

// Parameters on a device whose plugin brings strata.collectives (the
// "commhost" test plugin: no host memory, collectives over shared memory)
// are broadcast and reduced on that device, not copied through cpu:0.
TEST(DDP, ADeviceWithCollectivesReducesTheBucketsOnTheDevice) {
  run_ranks(
      "device",
      [](int rank) {
        const Device dev("commhost:0");
        require(DeviceCommunicator::available(dev), "commhost:0 offers strata.collectives");
        Batch all = global_batch(16, DType::f32);
        Batch mine = shard(all, rank, 2);
        auto ref = make_net(DType::f32);
        nn::functional::cross_entropy((*ref)(all.x), all.y).backward();

        // Rank 1 starts from other parameters: construction must broadcast
        // rank 0's, on the device.
        auto net = make_net(DType::f32, false, false, rank == 0 ? 1 : 99);
        net->to(dev);
        nn::DistributedDataParallel ddp(*net, {.bucket_bytes = 300});
        nn::functional::cross_entropy(ddp(mine.x.to(dev)), mine.y.to(dev)).backward();
        auto g = grads_of(*net);
        auto r = grads_of(*ref);
        for (size_t i = 0; i < g.size(); ++i) {
          require(g[i].device() == dev, "gradient " + std::to_string(i) + " on commhost:0");
          double d = max_abs_diff(g[i].to(Device("cpu:0")), r[i]);
          require(d <= 1e-6, "parameter " + std::to_string(i) + " differs by " + std::to_string(d));
        }
        nn::DDPStats s = ddp.stats();
        require(s.buckets_on_device == s.buckets_overlapped + s.buckets_at_end && s.buckets_on_device >= 3,
                "every bucket reduced on the device: " + std::to_string(s.buckets_on_device));
      },
      2, {{"STRATA_PLUGIN_PATH", COMMHOST_PLUGIN_DIR}});
}

TEST(DDP, F64GradientsAreBitwiseTheMeanOfTheShardGradients) {
  run_ranks("f64", [](int rank) {
    Batch all = global_batch(16, DType::f64);
    // The reference in the reduction's order: (shard 0 + shard 1) / 2.
    std::vector<std::vector<Tensor>> per_shard;
    for (int r = 0; r < 2; ++r) {
      auto ref = make_net(DType::f64);
      Batch s = shard(all, r, 2);
      nn::functional::cross_entropy((*ref)(s.x), s.y).backward();
      per_shard.push_back(grads_of(*ref));
    }
    auto full = make_net(DType::f64);
    nn::functional::cross_entropy((*full)(all.x), all.y).backward();

    auto net = make_net(DType::f64);
    nn::DistributedDataParallel ddp(*net, {.bucket_bytes = 512});
    Batch mine = shard(all, rank, 2);
    nn::functional::cross_entropy(ddp(mine.x), mine.y).backward();
    auto g = grads_of(*net);
    auto fg = grads_of(*full);
    for (size_t i = 0; i < g.size(); ++i) {
      Tensor expect = (per_shard[0][i] + per_shard[1][i]) / 2.0;
      require(bitwise_equal(g[i], expect), "parameter " + std::to_string(i) + " is bitwise the shard mean");
      require(max_abs_diff(g[i], fg[i]) <= 1e-14, "parameter " + std::to_string(i) + " matches the full batch");
    }
  });
}

TEST(DDP, ConstructionBroadcastsRankZerosParameters) {
  run_ranks("broadcast", [](int rank) {
    auto net = make_net(DType::f32, false, false, /*seed=*/100 + static_cast<uint64_t>(rank));
    auto rank0 = make_net(DType::f32, false, false, 100);
    nn::DistributedDataParallel ddp(*net);
    auto p = net->parameters();
    auto q = rank0->parameters();
    for (size_t i = 0; i < p.size(); ++i) require(bitwise_equal(p[i], q[i]), "parameter equals rank 0's");
    require(p[0].requires_grad() && p[0].is_leaf(), "parameters stay leaves");
  });
}

TEST(DDP, DifferentModelsAreANamedError) {
  run_ranks("mismatch", [](int rank) {
    manual_seed(1);
    Net net(false, false, rank == 0 ? 8 : 5);
    try {
      nn::DistributedDataParallel ddp(net);
    } catch (const dist::DistributedError& e) {
      std::string what = e.what();
      require(what.find("'a.weight'") != std::string::npos && what.find("f32[8, 6] on rank 0") != std::string::npos &&
                  what.find("f32[5, 6] on rank 1") != std::string::npos,
              "message names the parameter and both shapes: " + what);
      return;
    }
    throw std::runtime_error("no error for different models");
  });
}

TEST(DDP, NoSyncAccumulatesLocallyAndTheNextPassAveragesTheSum) {
  run_ranks("nosync", [](int rank) {
    // Two micro-batches per rank; the global batch is all four.
    Batch all = global_batch(16, DType::f32);
    auto ref = make_net(DType::f32);
    nn::functional::cross_entropy((*ref)(all.x), all.y).backward();

    auto net = make_net(DType::f32);
    nn::DistributedDataParallel ddp(*net, {.bucket_bytes = 300});
    Batch mine = shard(all, rank, 2);
    Batch m0 = shard(mine, 0, 2);
    Batch m1 = shard(mine, 1, 2);
    {
      auto guard = ddp.no_sync();
      require(!ddp.sync_enabled(), "no_sync scope open");
      (nn::functional::cross_entropy(ddp(m0.x), m0.y) * 0.5).backward();
    }
    require(ddp.stats().reduced_passes == 0, "nothing reduced inside no_sync");
    // Local: equal to a replica's gradient of this rank's first micro-batch.
    auto local = make_net(DType::f32);
    (nn::functional::cross_entropy((*local)(m0.x), m0.y) * 0.5).backward();
    require(bitwise_equal(net->parameters()[0].grad(), local->parameters()[0].grad()), "no_sync keeps local grads");

    (nn::functional::cross_entropy(ddp(m1.x), m1.y) * 0.5).backward();
    require(ddp.stats().reduced_passes == 1, "one reduced pass");
    auto g = grads_of(*net);
    auto r = grads_of(*ref);
    for (size_t i = 0; i < g.size(); ++i) {
      double d = max_abs_diff(g[i], r[i]);
      require(d <= 1e-6, "parameter " + std::to_string(i) + " differs by " + std::to_string(d));
    }
  });
}

TEST(DDP, ActivationCheckpointingGivesTheSameReducedGradients) {
  run_ranks("checkpoint", [](int rank) {
    Batch all = global_batch(16, DType::f32);
    Batch mine = shard(all, rank, 2);
    auto plain = make_net(DType::f32);
    nn::DistributedDataParallel ddp_plain(*plain, {.bucket_bytes = 300});
    nn::functional::cross_entropy(ddp_plain(mine.x), mine.y).backward();

    auto ckpt = make_net(DType::f32, /*checkpointed=*/true);
    nn::DistributedDataParallel ddp(*ckpt, {.bucket_bytes = 300});
    nn::functional::cross_entropy(ddp(mine.x), mine.y).backward();
    require(ddp.stats().reduced_passes == 1, "the recomputation's tape is not reduced");
    auto ref = make_net(DType::f32);
    nn::functional::cross_entropy((*ref)(all.x), all.y).backward();
    auto g = grads_of(*ckpt);
    auto p = grads_of(*plain);
    auto r = grads_of(*ref);
    for (size_t i = 0; i < g.size(); ++i) {
      require(bitwise_equal(g[i], p[i]), "parameter " + std::to_string(i) + " bitwise as without checkpointing");
      require(max_abs_diff(g[i], r[i]) <= 1e-6, "parameter " + std::to_string(i) + " matches the full batch");
    }
  });
}

/// Gradient penalty: CE + 0.1 * mean_i |d sum(out_i) / d x_i|^2, the inner
/// gradient by a higher-order tape over the input.
Tensor penalised_loss(const std::function<Tensor(const Tensor&)>& model, const Batch& b) {
  Tensor x = b.x.detach();
  GradientTape inner({.higher_order = true});
  inner.watch(x);
  Tensor out = model(x);
  Tensor gx = inner.gradient(sum(out), {x})[0];
  Tensor penalty = mean(sum(gx * gx, {1}));
  return nn::functional::cross_entropy(out, b.y) + penalty * 0.1;
}

TEST(DDP, HigherOrderGradientPenaltyReducesOnlyTheOutermostLevel) {
  run_ranks("higher", [](int rank) {
    Batch all = global_batch(16, DType::f64);
    auto ref = make_net(DType::f64);
    penalised_loss([&](const Tensor& x) { return (*ref)(x); }, all).backward();

    auto net = make_net(DType::f64);
    nn::DistributedDataParallel ddp(*net, {.bucket_bytes = 512});
    Batch mine = shard(all, rank, 2);
    penalised_loss([&](const Tensor& x) { return ddp(x); }, mine).backward();
    require(ddp.stats().reduced_passes == 1, "one reduced pass (the inner tape's is not)");
    auto g = grads_of(*net);
    auto r = grads_of(*ref);
    for (size_t i = 0; i < g.size(); ++i) {
      double d = max_abs_diff(g[i], r[i]);
      require(d <= 1e-12, "parameter " + std::to_string(i) + " differs by " + std::to_string(d));
    }

    // An inner tape over the parameters themselves (a penalty on the
    // gradient norm): its gradients stay local, the outer one is averaged.
    auto net2 = make_net(DType::f64);
    nn::DistributedDataParallel ddp2(*net2, {.bucket_bytes = 512});
    auto params = net2->parameters();
    auto param_penalty = [&](const std::function<Tensor(const Tensor&)>& model, const std::vector<Tensor>& ps,
                             const Batch& b) {
      GradientTape inner({.higher_order = true});
      Tensor loss = nn::functional::cross_entropy(model(b.x), b.y);
      auto gs = inner.gradient(loss, ps);
      Tensor pen = sum(gs[0] * gs[0]);
      return loss + pen;
    };
    param_penalty([&](const Tensor& x) { return ddp2(x); }, params, mine).backward();
    require(ddp2.stats().reduced_passes == 1, "inner tape over parameters not reduced");
    std::vector<std::vector<Tensor>> per_shard;
    for (int k = 0; k < 2; ++k) {
      auto rep = make_net(DType::f64);
      param_penalty([&](const Tensor& x) { return (*rep)(x); }, rep->parameters(), shard(all, k, 2)).backward();
      per_shard.push_back(grads_of(*rep));
    }
    auto g2 = grads_of(*net2);
    for (size_t i = 0; i < g2.size(); ++i) {
      require(bitwise_equal(g2[i], (per_shard[0][i] + per_shard[1][i]) / 2.0),
              "parameter " + std::to_string(i) + " is the mean of the shards' penalised gradients");
    }
  });
}

// Gradients of the averaged gradients (issue: a second backward through
// backward(create_graph=true) under DDP failed with "does not require
// grad"): the average is a differentiable all-reduce whose VJP is an
// all-reduce, so a gradient-norm penalty and a Hessian-vector product of
// the global loss come out as in one process over the concatenated batch.
TEST(DDP, GradientsOfTheAveragedGradientsEqualTheConcatenatedBatchs) {
  run_ranks("grad_of_grad", [](int rank) {
    Batch all = global_batch(16, DType::f64);
    Batch mine = shard(all, rank, 2);
    auto clear = [](const std::vector<Tensor>& ps) {
      for (Tensor q : ps) q.set_grad(Tensor());
    };
    auto norm_penalty = [](const std::vector<Tensor>& gs) {
      Tensor p = zeros({}, {.dtype = DType::f64});
      for (const Tensor& g : gs) p = p + sum(g * g);
      return p;
    };
    // backward(create_graph) twice: the penalty's gradient.
    auto ref = make_net(DType::f64);
    nn::functional::cross_entropy((*ref)(all.x), all.y).backward(Tensor(), {.retain_graph = true, .create_graph = true});
    auto ref_g = grads_of(*ref);
    clear(ref->parameters());
    norm_penalty(ref_g).backward();
    auto ref_pg = grads_of(*ref);

    auto net = make_net(DType::f64);
    nn::DistributedDataParallel ddp(*net, {.bucket_bytes = 256});
    nn::functional::cross_entropy(ddp(mine.x), mine.y).backward(Tensor(), {.retain_graph = true, .create_graph = true});
    auto g = grads_of(*net);
    for (size_t i = 0; i < g.size(); ++i) {
      require(g[i].requires_grad(), "the averaged gradient carries history");
      require(max_abs_diff(g[i], ref_g[i]) <= 1e-12, "gradient " + std::to_string(i) + " averaged");
    }
    clear(net->parameters());
    norm_penalty(g).backward();
    auto pg = grads_of(*net);
    for (size_t i = 0; i < pg.size(); ++i) {
      const double d = max_abs_diff(pg[i], ref_pg[i]);
      require(d <= 1e-12, "penalty gradient " + std::to_string(i) + " differs by " + std::to_string(d));
    }
    nn::DDPStats s = ddp.stats();
    require(s.differentiable_passes == 1, "the create_graph pass reduced differentiably");
    require(s.reduced_passes == 2, "both passes reduced");

    // A Hessian-vector product of the global loss: the gradients from
    // ddp.gradient with a higher-order tape, then backward() of v . g (a
    // reduced pass itself: the ranks' H_r v are averaged into grad()).
    auto params = net->parameters();
    clear(params);
    std::vector<Tensor> v;
    for (const Tensor& q : params) v.push_back(full_like(q.detach(), 0.5));
    GradientTape outer({.higher_order = true});
    auto gs = ddp.gradient(outer, nn::functional::cross_entropy(ddp(mine.x), mine.y), params);
    Tensor dot = zeros({}, {.dtype = DType::f64});
    for (size_t i = 0; i < gs.size(); ++i) dot = dot + sum(gs[i] * v[i]);
    dot.backward();
    auto hv = grads_of(*net);
    auto rparams = ref->parameters();
    clear(rparams);
    GradientTape router({.higher_order = true});
    auto rgs = router.gradient(nn::functional::cross_entropy((*ref)(all.x), all.y), rparams);
    Tensor rdot = zeros({}, {.dtype = DType::f64});
    for (size_t i = 0; i < rgs.size(); ++i) rdot = rdot + sum(rgs[i] * v[i]);
    rdot.backward();
    auto rhv = grads_of(*ref);
    for (size_t i = 0; i < hv.size(); ++i) {
      const double d = max_abs_diff(hv[i], rhv[i]);
      require(d <= 1e-12, "HVP " + std::to_string(i) + " differs by " + std::to_string(d));
    }
    require(ddp.stats().differentiable_passes == 2, "the tape's pass reduced differentiably");
  });
}

// ZeRO (zero.hpp): stage 1 under DDP and stage 2 without it give, step for
// step, the parameters of DDP with an unsharded Adam — bit for bit in f64
// on two ranks — while each rank holds about half of Adam's state.
void expect_sharded_training_equals_ddp(int world) {
  run_ranks("zero_" + std::to_string(world), [world](int rank) {
    Batch all = global_batch(24, DType::f64);
    Batch mine = shard(all, rank, world);
    auto adam = [](std::vector<Tensor> ps) {
      return std::make_unique<nn::Adam>(std::move(ps), nn::AdamOptions{.lr = 0.05, .weight_decay = 0.01});
    };
    auto reference = make_net(DType::f64);
    nn::DistributedDataParallel ref_ddp(*reference, {.bucket_bytes = 256});
    nn::Adam ref_opt(reference->parameters(), {.lr = 0.05, .weight_decay = 0.01});

    auto one = make_net(DType::f64);
    nn::DistributedDataParallel ddp1(*one, {.bucket_bytes = 256});
    nn::ShardedOptimizer zero1(one->parameters(), adam);

    auto two = make_net(DType::f64);
    nn::ShardedOptimizer zero2(two->parameters(), adam, {.stage = 2, .bucket_bytes = 256});
    for (int step = 0; step < 3; ++step) {
      ref_opt.zero_grad();
      nn::functional::cross_entropy(ref_ddp(mine.x), mine.y).backward();
      ref_opt.step();
      zero1.zero_grad();
      nn::functional::cross_entropy(ddp1(mine.x), mine.y).backward();
      zero1.step();
      zero2.zero_grad();
      nn::functional::cross_entropy((*two)(mine.x), mine.y).backward();
      zero2.step();
    }
    auto r = reference->parameters(), p1 = one->parameters(), p2 = two->parameters();
    for (size_t i = 0; i < r.size(); ++i) {
      if (world == 2) {
        require(bitwise_equal(p1[i], r[i]), "stage 1: parameter " + std::to_string(i) + " is DDP's, bit for bit");
        require(bitwise_equal(p2[i], r[i]), "stage 2: parameter " + std::to_string(i) + " is DDP's, bit for bit");
      } else {
        require(max_abs_diff(p1[i], r[i]) <= 1e-12, "stage 1: parameter " + std::to_string(i));
        require(max_abs_diff(p2[i], r[i]) <= 1e-12, "stage 2: parameter " + std::to_string(i));
      }
      // Stage 2 keeps only this rank's shard of the averaged gradients.
      require(p2[i].grad().defined() == (zero2.owner(i) == rank), "stage 2 keeps only its shard's gradients");
    }
    // Stage 2 reduced each pass in buckets (256 bytes: several), started
    // during backward.
    const nn::ShardedStats st = zero2.stats();
    require(st.reduced_passes == 3 && st.steps_reduced_at_step == 0, "three bucketed passes");
    require(st.buckets_overlapped >= 6, "buckets started during backward: " + std::to_string(st.buckets_overlapped));
    size_t full = 0;
    for (const auto& [name, t] : ref_opt.state_dict()) {
      if (name.rfind("param.", 0) == 0) full += static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
    }
    const double share = static_cast<double>(zero1.state_bytes()) / static_cast<double>(full);
    std::cout << "rank " << rank << " of " << world << ": optimizer state " << zero1.state_bytes() << " of "
              << full << " bytes (" << share << ")" << std::endl;
    require(share > 0.0 && share <= 1.0 / world + 0.25, "this rank holds about 1/world of the state: " +
                                                          std::to_string(share));
  }, world);
}

TEST(DDP, ShardedOptimizerStagesOneAndTwoEqualDdpBitForBit) { expect_sharded_training_equals_ddp(2); }

// Stage 2 with gradient accumulation (two backward passes per step: their
// reductions add up) against DDP's no_sync accumulation, and with
// gradients set by hand (no backward pass: reduce-scattered at step()).
TEST(DDP, ShardedOptimizerStageTwoAccumulatesPassesAndReducesHandSetGradients) {
  run_ranks("zero_accumulate", [](int rank) {
    Batch all = global_batch(24, DType::f64);
    Batch mine = shard(all, rank, 2);
    Batch half_a{mine.x.slice(0, 0, 6), mine.y.slice(0, 0, 6)}, half_b{mine.x.slice(0, 6, 12), mine.y.slice(0, 6, 12)};
    auto sgd = [](std::vector<Tensor> ps) {
      return std::make_unique<nn::SGD>(std::move(ps), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
    };
    auto reference = make_net(DType::f64);
    nn::DistributedDataParallel ref_ddp(*reference, {.bucket_bytes = 256});
    nn::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    auto two = make_net(DType::f64);
    nn::ShardedOptimizer zero2(two->parameters(), sgd, {.stage = 2, .bucket_bytes = 256});
    for (int step = 0; step < 2; ++step) {
      ref_opt.zero_grad();
      {
        auto scope = ref_ddp.no_sync();
        nn::functional::cross_entropy(ref_ddp(half_a.x), half_a.y).backward();
      }
      nn::functional::cross_entropy(ref_ddp(half_b.x), half_b.y).backward();
      ref_opt.step();
      zero2.zero_grad();
      nn::functional::cross_entropy((*two)(half_a.x), half_a.y).backward();
      nn::functional::cross_entropy((*two)(half_b.x), half_b.y).backward();
      zero2.step();
    }
    auto r = reference->parameters(), p = two->parameters();
    for (size_t i = 0; i < r.size(); ++i) {
      const double d = max_abs_diff(p[i], r[i]);  // mean(a) + mean(b) against mean(a + b)
      require(d <= 1e-12, "accumulated stage 2: parameter " + std::to_string(i) + " differs by " + std::to_string(d));
    }
    require(zero2.stats().reduced_passes == 4, "four bucketed passes");
    // Gradients set by hand: averaged at step().
    zero2.zero_grad();
    ref_opt.zero_grad();
    for (size_t i = 0; i < p.size(); ++i) {
      p[i].set_grad(zeros_like(p[i].detach()) + static_cast<double>(rank + 1));
      r[i].set_grad(zeros_like(r[i].detach()) + 1.5);  // the mean of 1 and 2
    }
    zero2.step();
    ref_opt.step();
    for (size_t i = 0; i < r.size(); ++i) {
      require(max_abs_diff(p[i], r[i]) <= 1e-12, "hand-set gradients: parameter " + std::to_string(i));
    }
    require(zero2.stats().steps_reduced_at_step == 1, "the hand-set gradients were reduced at step()");
  });
}
TEST(DDP, ShardedOptimizerOnThreeRanks) { expect_sharded_training_equals_ddp(3); }

TEST(DDP, ShardedOptimizerRefusesWhatItCannotShard) {
  run_ranks("zero_bad", [](int) {
    auto net = make_net(DType::f32);
    auto params = net->parameters();
    auto sgd = [](std::vector<Tensor> ps) { return std::make_unique<nn::SGD>(std::move(ps), nn::SGDOptions{}); };
    auto message = [&](const std::function<void()>& f) -> std::string {
      try {
        f();
      } catch (const Error& e) {
        return e.what();
      }
      return "no error";
    };
    require(message([&] { nn::ShardedOptimizer z(params, sgd, {.stage = 3}); }).find(
                "stage 3 (ShardedOptions::stage must be 1 or 2)") != std::string::npos,
            "stage 3 refused");
    std::vector<Tensor> mixed = params;
    mixed.push_back(zeros({2}, {.dtype = DType::f64}));
    const std::string m = message([&] { nn::ShardedOptimizer z(mixed, sgd); });
    require(m.find("parameter 6 is f64[2] on cpu:0, parameter 0 f32[8, 6] on cpu:0: the parameters must share one "
                   "dtype and device") != std::string::npos,
            "mixed dtypes refused: " + m);
  });
}

// Communication hooks: bf16 and f16 compression halve the bytes reduced and
// give the f32 average to within the wire dtype's rounding.
TEST(DDP, CompressionHooksHalveTheBytesAndKeepTheAverageToTheirRounding) {
  run_ranks("hooks", [](int rank) {
    Batch all = global_batch(16, DType::f32);
    Batch mine = shard(all, rank, 2);
    auto plain = make_net(DType::f32);
    nn::DistributedDataParallel plain_ddp(*plain, {.bucket_bytes = 256});
    nn::functional::cross_entropy(plain_ddp(mine.x), mine.y).backward();
    auto want = grads_of(*plain);
    struct Case {
      nn::CommHook hook;
      double tolerance;  // relative, of the largest gradient: the wire dtype's rounding, twice
    };
    for (const Case& c : {Case{nn::bf16_compress_hook(), 2 * 0.0078125}, Case{nn::f16_compress_hook(), 2 * 0.0009765625}}) {
      auto net = make_net(DType::f32);
      nn::DistributedDataParallel ddp(*net, {.bucket_bytes = 256, .comm_hook = c.hook});
      nn::functional::cross_entropy(ddp(mine.x), mine.y).backward();
      auto got = grads_of(*net);
      for (size_t i = 0; i < got.size(); ++i) {
        const double scale = amax(abs(want[i])).item<double>();
        const double d = max_abs_diff(got[i], want[i]);
        require(d <= c.tolerance * scale + 1e-12,
                c.hook.name + ": gradient " + std::to_string(i) + " differs by " + std::to_string(d));
      }
      require(ddp.stats().bytes_reduced * 2 == plain_ddp.stats().bytes_reduced,
              c.hook.name + ": half the bytes (" + std::to_string(ddp.stats().bytes_reduced) + " of " +
                  std::to_string(plain_ddp.stats().bytes_reduced) + ")");
    }
  });
}

// Sharded checkpoints (ShardedCheckpointer): saved by 2 ranks of a ZeRO job,
// restored by 3, each now keeping the state of the parameters it owns —
// equal to one process's Adam on the whole batch, and training on equal.
TEST(DDP, ShardedCheckpointsSavedOnTwoRanksReshardOntoThree) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("strata_sharded_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto adam = [](std::vector<Tensor> ps) {
    return std::make_unique<nn::Adam>(std::move(ps), nn::AdamOptions{.lr = 0.05});
  };
  auto step_of = [](nn::Module& model, const std::function<Tensor(const Tensor&)>& forward, const Batch& b,
                    const std::function<void()>& zero, const std::function<void()>& step) {
    zero();
    nn::functional::cross_entropy(forward(b.x), b.y).backward();
    step();
    (void)model;
  };
  run_ranks("sharded_save", [&](int rank) {
    Batch mine = shard(global_batch(24, DType::f64), rank, 2);
    auto net = make_net(DType::f64);
    nn::DistributedDataParallel ddp(*net, {.bucket_bytes = 256});
    nn::ShardedOptimizer opt(net->parameters(), adam);
    for (int k = 0; k < 2; ++k) {
      step_of(*net, [&](const Tensor& x) { return ddp(x); }, mine, [&] { opt.zero_grad(); }, [&] { opt.step(); });
    }
    distributed::ShardedCheckpointer states(dir);
    states.save(2, *net, opt);
    // A later save that a killed rank left without its manifest.
    std::filesystem::create_directories(dir / "step-000000000003");
    std::ofstream(dir / "step-000000000003" / "optimizer-0-of-2.st") << "half";
    require(states.latest()->filename() == "step-000000000002", "an incomplete step is passed over");
  });
  run_ranks("sharded_restore", [&](int rank) {
    Batch all = global_batch(24, DType::f64);
    Batch mine = shard(all, rank, 3);
    // The reference: one process's Adam on the whole batch, two steps.
    auto ref = make_net(DType::f64);
    nn::Adam ref_opt(ref->parameters(), {.lr = 0.05});
    for (int k = 0; k < 2; ++k) {
      step_of(*ref, [&](const Tensor& x) { return (*ref)(x); }, all, [&] { ref_opt.zero_grad(); },
              [&] { ref_opt.step(); });
    }
    auto net = make_net(DType::f64, false, false, /*seed=*/99);  // other values: restore must replace them
    nn::DistributedDataParallel ddp(*net, {.bucket_bytes = 256});
    nn::ShardedOptimizer opt(net->parameters(), adam);
    distributed::ShardedCheckpointer states(dir);
    require(states.restore(*net, opt) == 2, "step 2 restored");
    auto p = net->parameters(), r = ref->parameters();
    for (size_t i = 0; i < p.size(); ++i) {
      require(max_abs_diff(p[i], r[i]) <= 1e-12, "parameter " + std::to_string(i) + " restored");
    }
    const auto ref_state = ref_opt.state_dict();
    auto find = [](const nn::NamedTensors& st, const std::string& name) {
      for (const auto& [k, v] : st)
        if (k == name) return v;
      return Tensor();
    };
    const auto local = opt.local_optimizer()->state_dict();
    for (size_t k = 0; k < opt.shard().size(); ++k) {
      const std::string mine_name = "param." + std::to_string(k) + ".exp_avg_sq";
      const std::string ref_name = "param." + std::to_string(opt.shard()[k]) + ".exp_avg_sq";
      require(max_abs_diff(find(local, mine_name), find(ref_state, ref_name)) <= 1e-12,
              "the resharded state of parameter " + std::to_string(opt.shard()[k]));
    }
    // Training goes on as one process's would.
    step_of(*net, [&](const Tensor& x) { return ddp(x); }, mine, [&] { opt.zero_grad(); }, [&] { opt.step(); });
    step_of(*ref, [&](const Tensor& x) { return (*ref)(x); }, all, [&] { ref_opt.zero_grad(); },
            [&] { ref_opt.step(); });
    for (size_t i = 0; i < p.size(); ++i) {
      require(max_abs_diff(p[i], r[i]) <= 1e-12, "parameter " + std::to_string(i) + " after a resharded step");
    }
  }, 3);
  std::filesystem::remove_all(dir);
}

// What a sharded checkpoint refuses, naming the file: a shard missing, one
// truncated, one from another save.
TEST(DDP, ShardedCheckpointsRefuseMissingTruncatedAndForeignShards) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("strata_sharded_bad_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  run_ranks("sharded_bad", [&](int) {
    auto adam = [](std::vector<Tensor> ps) { return std::make_unique<nn::Adam>(std::move(ps), nn::AdamOptions{}); };
    auto net = make_net(DType::f32);
    nn::ShardedOptimizer opt(net->parameters(), adam);
    distributed::ShardedCheckpointer a(dir / "a"), b(dir / "b");
    a.save(1, *net, opt);
    b.save(1, *net, opt);
    auto message = [&] {
      try {
        a.restore(*net, opt);
      } catch (const SerializationError& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    const auto step = dir / "a" / "step-000000000001";
    const auto shard = step / "optimizer-0-of-1.st";
    std::filesystem::copy_file(shard, dir / "saved.st");
    std::filesystem::copy_file(dir / "b" / "step-000000000001" / "optimizer-0-of-1.st", shard,
                               std::filesystem::copy_options::overwrite_existing);
    std::string m = message();
    require(m.find("optimizer-0-of-1.st") != std::string::npos && m.find("from another save") != std::string::npos,
            "a foreign shard: " + m);
    std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
    m = message();
    require(m.find("optimizer-0-of-1.st") != std::string::npos && m.find("(truncated?)") != std::string::npos,
            "a truncated shard: " + m);
    std::filesystem::remove(shard);
    m = message();
    require(m.find("optimizer-0-of-1.st") != std::string::npos && m.find("but missing") != std::string::npos,
            "a missing shard: " + m);
    std::filesystem::copy_file(dir / "saved.st", shard);
    require(a.restore(*net, opt) == 1, "restored once the shard is back");
  }, 1);
  std::filesystem::remove_all(dir);
}

// Uneven inputs: rank 0 trains 3 steps, rank 1 trains 5; inside join()
// rank 0 shadows rank 1's last two (zero gradients), and both end with rank
// 1's model — one process's training with steps 4 and 5 at half weight (the
// sum divided by the world size).
TEST(DDP, JoinShadowsTheStepsOfRanksWithMoreInputsAndEndsEqual) {
  run_ranks("join", [](int rank) {
    const int mine = rank == 0 ? 3 : 5;
    auto batch_of = [](int k) { return global_batch(16, DType::f64, 100 + static_cast<uint64_t>(k)); };
    auto net = make_net(DType::f64);
    nn::DistributedDataParallel ddp(*net, {.bucket_bytes = 256});
    nn::Adam opt(net->parameters(), {.lr = 0.05});
    ddp.join([&] {
      for (int k = 0; k < mine; ++k) {
        Batch b = shard(batch_of(k), rank, 2);
        opt.zero_grad();
        nn::functional::cross_entropy(ddp(b.x), b.y).backward();
        opt.step();
      }
    });
    require(ddp.stats().shadowed_steps == (rank == 0 ? 2u : 0u),
            "rank 0 shadows 2 steps: " + std::to_string(ddp.stats().shadowed_steps));
    // A no_sync() step cannot be shadowed: refused before it communicates.
    bool refused = false;
    ddp.join([&] {
      auto quiet = ddp.no_sync();
      try {
        ddp(shard(batch_of(0), rank, 2).x);
      } catch (const Error& e) {
        refused = std::string(e.what()).find("a step inside no_sync() cannot be shadowed") != std::string::npos;
      }
    });
    require(refused, "a no_sync() step inside join() is refused");
    auto ref = make_net(DType::f64);
    nn::Adam ref_opt(ref->parameters(), {.lr = 0.05});
    for (int k = 0; k < 5; ++k) {
      ref_opt.zero_grad();
      Batch all = batch_of(k);
      Tensor loss = k < 3 ? nn::functional::cross_entropy((*ref)(all.x), all.y)
                          : nn::functional::cross_entropy((*ref)(shard(all, 1, 2).x), shard(all, 1, 2).y) * 0.5;
      loss.backward();
      ref_opt.step();
    }
    auto p = net->parameters(), r = ref->parameters();
    for (size_t i = 0; i < p.size(); ++i) {
      const double d = max_abs_diff(p[i], r[i]);
      require(d <= 1e-12, "parameter " + std::to_string(i) + " differs by " + std::to_string(d));
    }
  });
}

TEST(DDP, TapeGradientWithExplicitSourcesReducesOnlyThoseParameters) {
  run_ranks("tape", [](int rank) {
    Batch all = global_batch(16, DType::f64);
    auto ref = make_net(DType::f64);
    auto rp = ref->parameters();
    Tensor xr = all.x.detach();
    GradientTape rt;
    rt.watch(xr);
    auto rg = rt.gradient(nn::functional::cross_entropy((*ref)(xr), all.y), {rp[0], rp[5], xr});

    auto net = make_net(DType::f64);
    nn::DistributedDataParallel ddp(*net, {.bucket_bytes = 64});
    auto p = net->parameters();
    Batch mine = shard(all, rank, 2);
    Tensor x = mine.x.detach();
    GradientTape tape;
    tape.watch(x);
    auto g = ddp.gradient(tape, nn::functional::cross_entropy(ddp(x), mine.y), {p[0], p[5], x});
    require(max_abs_diff(g[0], rg[0]) <= 1e-12, "a.weight averaged");
    require(max_abs_diff(g[1], rg[1]) <= 1e-12, "c.bias averaged");
    // The input's gradient is local: this rank's rows of the full batch's,
    // times 2 (the shard mean weighs each row twice as much).
    double dx = max_abs_diff(g[2], rg[2].slice(0, rank * 8, rank * 8 + 8) * 2.0);
    require(dx <= 1e-12, "input gradient stays local, differs by " + std::to_string(dx));
    for (const Tensor& q : p) require(!q.grad().defined(), "a tape does not write grad()");
    nn::DDPStats s = ddp.stats();
    require(s.reduced_passes == 1, "one reduced pass");
    require(s.buckets_overlapped + s.buckets_at_end == 2, "two buckets: only the requested parameters");
    // The plain tape API stays local (documented): nothing reduced.
    GradientTape plain;
    Tensor loss = nn::functional::cross_entropy(ddp(mine.x), mine.y);
    plain.gradient(loss, {p[0]});
    require(ddp.stats().reduced_passes == 1, "plain tape.gradient not reduced");
  });
}

TEST(DDP, UnusedParameterIsANamedErrorUnlessFindUnused) {
  run_ranks("unused", [](int rank) {
    Batch all = global_batch(8, DType::f32);
    Batch mine = shard(all, rank, 2);
    auto net = make_net(DType::f32, false, /*extra=*/true);
    {
      nn::DistributedDataParallel ddp(*net);
      Tensor loss = nn::functional::cross_entropy(ddp(mine.x), mine.y);
      try {
        loss.backward();
        throw std::runtime_error("no error for unused parameters");
      } catch (const dist::DistributedError& e) {
        std::string what = e.what();
        require(what.find("'extra.weight', 'extra.bias'") != std::string::npos ||
                    what.find("'extra.bias', 'extra.weight'") != std::string::npos,
                "names the unused parameters: " + what);
        require(what.find("find_unused_parameters") != std::string::npos, "suggests the option");
      }
      for (const Tensor& p : net->parameters()) require(!p.grad().defined(), "a failed pass leaves grad() as it was");
    }
    // find_unused_parameters: rank 0 uses the extra layer, rank 1 does not;
    // rank 1's zeros are averaged with rank 0's gradient.
    auto net2 = make_net(DType::f32, false, true);
    net2->use_extra = rank == 0;
    nn::DistributedDataParallel ddp(*net2, {.bucket_bytes = 64, .find_unused_parameters = true});
    nn::functional::cross_entropy(ddp(mine.x), mine.y).backward();
    auto ref = make_net(DType::f32, false, true);
    ref->use_extra = true;
    Batch s0 = shard(all, 0, 2);
    nn::functional::cross_entropy((*ref)(s0.x), s0.y).backward();
    Tensor extra_w = net2->parameters()[6];
    require(max_abs_diff(extra_w.grad(), ref->parameters()[6].grad() / 2.0) <= 1e-7,
            "the unused rank contributes zeros to the average");
    // A second step works (the pass state was reset).
    net2->zero_grad();
    nn::functional::cross_entropy(ddp(mine.x), mine.y).backward();
    require(ddp.stats().reduced_passes == 2, "two passes");
  });
}

}  // namespace
