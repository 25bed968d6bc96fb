// distributed.cpp — strata._strata.distributed: process groups on Gloo
// (docs/distributed.md) for Python's strata.distributed — the collectives,
// the C++ DistributedDataParallel's buckets and overlap, ZeRO's
// ShardedOptimizer and the checkpointers, for Python modules. Built when
// the C++ build has libstrata_distributed (STRATA_HAVE_DISTRIBUTED).
#include "bindings.hpp"

#include <nanobind/stl/chrono.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#ifdef STRATA_HAVE_DISTRIBUTED
#include <strata/checkpointer.hpp>
#include <strata/ddp.hpp>
#include <strata/distributed.hpp>
#include <strata/sampler.hpp>
#include <strata/zero.hpp>
#endif

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata::python {

#ifdef STRATA_HAVE_DISTRIBUTED
namespace {

namespace dist = strata::distributed;
constexpr auto kRelease = nb::call_guard<nb::gil_scoped_release>();

dist::ReduceOp op_of(const std::string& op) {
  if (op == "sum") return dist::ReduceOp::sum;
  if (op == "mean") return dist::ReduceOp::mean;
  if (op == "max") return dist::ReduceOp::max;
  if (op == "min") return dist::ReduceOp::min;
  throw nb::value_error(("op must be 'sum', 'mean', 'max' or 'min', got '" + op + "'").c_str());
}

/// A Python module's tensors as an nn::Module, for the C++ code that takes
/// one (the checkpointers): dotted names become child modules, and each
/// slot holds the Python module's own tensor (the same storage), so
/// load_state_dict's in-place copies reach the Python module. It has no
/// forward.
class TensorTree : public nn::Module {
 public:
  TensorTree() = default;
  TensorTree(const nn::NamedTensors& params, const nn::NamedTensors& buffers) {
    for (const auto& [name, t] : params) add(name, t, true);
    for (const auto& [name, t] : buffers) add(name, t, false);
  }
  Tensor forward(const Tensor&) override {
    throw Error("a Python module's tensors (TensorTree) have no forward in C++");
  }
  std::string name() const override { return "PythonModule"; }

 private:
  void add(const std::string& dotted, const Tensor& t, bool parameter) {
    const size_t dot = dotted.find('.');
    if (dot != std::string::npos) {
      const std::string head = dotted.substr(0, dot);
      auto& child = children_by_name_[head];
      if (!child) child = register_module(head, std::make_shared<TensorTree>());
      child->add(dotted.substr(dot + 1), t, parameter);
      return;
    }
    Tensor* slot = &slots_.emplace_back(t);
    if (parameter)
      register_parameter(dotted, slot, t.requires_grad());
    else
      register_buffer(dotted, slot);
  }
  std::deque<Tensor> slots_;  // stable addresses
  std::map<std::string, std::shared_ptr<TensorTree>> children_by_name_;
};

/// optimizer_class and keyword options as ShardedOptimizer's factory: the
/// C++ SGD, Adam or AdamW of a shard. Unknown options are a TypeError.
nn::ShardedOptimizer::Factory optimizer_factory(const std::string& kind, const std::map<std::string, double>& o,
                                                std::pair<double, double> betas) {
  auto take = [&o](const char* key, double fallback) {
    auto it = o.find(key);
    return it == o.end() ? fallback : it->second;
  };
  const std::map<std::string, std::vector<std::string>> known{
      {"SGD", {"lr", "momentum", "dampening", "weight_decay", "nesterov"}},
      {"Adam", {"lr", "eps", "weight_decay"}},
      {"AdamW", {"lr", "eps", "weight_decay"}}};
  auto it = known.find(kind);
  if (it == known.end()) {
    throw nb::type_error(("ShardedOptimizer: optimizer_class must be strata.nn.SGD, Adam or AdamW, got " + kind)
                             .c_str());
  }
  for (const auto& [key, value] : o) {
    if (std::find(it->second.begin(), it->second.end(), key) == it->second.end()) {
      throw nb::type_error(("ShardedOptimizer: " + kind + " takes no option '" + key + "'").c_str());
    }
  }
  if (kind == "SGD") {
    nn::SGDOptions s{.lr = take("lr", 0.01), .momentum = take("momentum", 0.0), .dampening = take("dampening", 0.0),
                     .weight_decay = take("weight_decay", 0.0), .nesterov = take("nesterov", 0.0) != 0.0};
    return [s](std::vector<Tensor> shard) { return std::make_unique<nn::SGD>(std::move(shard), s); };
  }
  nn::AdamOptions a{.lr = take("lr", 1e-3), .beta1 = betas.first, .beta2 = betas.second, .eps = take("eps", 1e-8),
                    .weight_decay = take("weight_decay", kind == "AdamW" ? 0.01 : 0.0)};
  if (kind == "AdamW")
    return [a](std::vector<Tensor> shard) { return std::make_unique<nn::AdamW>(std::move(shard), a); };
  return [a](std::vector<Tensor> shard) { return std::make_unique<nn::Adam>(std::move(shard), a); };
}

/// A no_sync() scope held by a Python context manager.
struct NoSyncScope {
  explicit NoSyncScope(nn::DistributedDataParallel& ddp) : scope(ddp.no_sync()) {}
  nn::DistributedDataParallel::NoSync scope;
};

nb::dict stats_dict(const nn::DDPStats& s) {
  nb::dict d;
  d["reduced_passes"] = s.reduced_passes;
  d["buckets_overlapped"] = s.buckets_overlapped;
  d["buckets_at_end"] = s.buckets_at_end;
  d["buckets_on_device"] = s.buckets_on_device;
  d["differentiable_passes"] = s.differentiable_passes;
  d["shadowed_steps"] = s.shadowed_steps;
  d["bytes_reduced"] = s.bytes_reduced;
  d["last_launch_us"] = s.last_launch_us;
  d["last_backward_end_us"] = s.last_backward_end_us;
  d["last_end_us"] = s.last_end_us;
  return d;
}

}  // namespace

void bind_distributed(nb::module_& m) {
  nb::module_ d = m.def_submodule("distributed", "Process groups on Gloo (the C++ API).");
  d.attr("available") = true;
  nb::class_<dist::Work>(d, "Work", "An asynchronous collective: wait() for it.")
      .def("wait", &dist::Work::wait, kRelease)
      .def("completed", &dist::Work::completed);
  d.def("init_process_group", [](int rank, int world_size, const std::string& master_addr, int master_port,
                                 double timeout_s) {
    dist::Options o;
    o.rank = rank;
    o.world_size = world_size;
    o.master_addr = master_addr;
    o.master_port = master_port;
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
    dist::init_process_group(o);
  }, nb::arg("rank") = -1, nb::arg("world_size") = -1, nb::arg("master_addr") = "", nb::arg("master_port") = -1,
     nb::arg("timeout") = 60.0, kRelease,
     "Joins the job its launcher started (strata launch, torchrun, mpirun, srun: launch_environment(); -1 and \"\" "
     "read it).");
  d.def("launch_environment", [] {
    const dist::LaunchEnvironment e = dist::launch_environment();
    nb::dict out;
    out["launcher"] = e.launcher;
    out["rank"] = e.rank;
    out["world_size"] = e.world_size;
    out["local_rank"] = e.local_rank;
    out["local_world_size"] = e.local_world_size;
    out["master_addr"] = e.master_addr;
    out["master_port"] = e.master_port;
    out["rank_from"] = e.rank_from;
    out["world_from"] = e.world_from;
    return out;
  }, "Who this process is, as its launcher (strata launch, torchrun, mpirun, srun) told it: a dict; -1 and \"\" "
     "for what no launcher gave (docs/distributed.md, \"Launchers\").");
  d.def("is_initialized", &dist::is_initialized);
  d.def("destroy_process_group", &dist::destroy_process_group, kRelease);
  d.def("rank", &dist::rank);
  d.def("world_size", &dist::world_size);
  // The collectives, as methods of a group: the default group's reached
  // through _default_group() at each call (strata/distributed.py wraps them
  // as module functions), a sub-group's through the object new_group gives.
  using PG = dist::ProcessGroup;
  nb::class_<PG>(d, "ProcessGroup",
                 "A set of ranks that run collectives together (docs/distributed.md). Made by new_group(); the "
                 "module's functions use the default group.")
      .def_prop_ro("rank", &PG::rank, "This rank in the group (-1 on a rank new_group left out).")
      .def_prop_ro("size", &PG::size)
      .def_prop_ro("world_ranks", &PG::world_ranks, "The default group's ranks this group spans, in its order.")
      .def_prop_ro("is_member", &PG::is_member)
      .def("all_reduce", [](PG& g, Tensor& t, const std::string& op) { return g.all_reduce(t, op_of(op)); },
           nb::arg("tensor"), nb::arg("op") = "sum", kRelease, "Reduces `tensor` in place over the ranks.")
      .def("broadcast", [](PG& g, Tensor& t, int src) { return g.broadcast(t, src); }, nb::arg("tensor"),
           nb::arg("src") = 0, kRelease)
      .def("all_gather", [](PG& g, Tensor& out, const Tensor& in) { return g.all_gather(out, in); },
           nb::arg("output"), nb::arg("input"), kRelease)
      .def("reduce_scatter", [](PG& g, Tensor& out, const Tensor& in, const std::string& op) {
        return g.reduce_scatter(out, in, op_of(op));
      }, nb::arg("output"), nb::arg("input"), nb::arg("op") = "sum", kRelease,
         "`input` of shape [size, *output.shape]: this rank's `output` becomes the reduction of row rank.")
      .def("gather", [](PG& g, Tensor& out, const Tensor& in, int dst) { return g.gather(out, in, dst); },
           nb::arg("output"), nb::arg("input"), nb::arg("dst") = 0, kRelease,
           "Rank `dst`'s `output` ([size, *input.shape]) gets every rank's `input`; elsewhere it is unused.")
      .def("scatter", [](PG& g, Tensor& out, const Tensor& in, int src) { return g.scatter(out, in, src); },
           nb::arg("output"), nb::arg("input"), nb::arg("src") = 0, kRelease,
           "Every rank's `output` gets row rank of rank `src`'s `input` ([size, *output.shape]).")
      .def("all_to_all", [](PG& g, Tensor& out, const Tensor& in) { return g.all_to_all(out, in); },
           nb::arg("output"), nb::arg("input"), kRelease, "Rank r's output[q] gets rank q's input[r].")
      .def("send", [](PG& g, const Tensor& t, int dst, int tag) { return g.send(t, dst, tag); }, nb::arg("tensor"),
           nb::arg("dst"), nb::arg("tag") = 0, kRelease,
           "Point to point; it waits for the peer's matching recv (docs/distributed.md, \"Point to point\").")
      .def("recv", [](PG& g, Tensor& t, int src, int tag) { return g.recv(t, src, tag); }, nb::arg("tensor"),
           nb::arg("src"), nb::arg("tag") = 0, kRelease)
      .def("barrier", [](PG& g) { return g.barrier(); }, kRelease);
  d.def("_default_group", [] { return &dist::group(); }, nb::rv_policy::reference,
        "The default group, for one call (it is gone after destroy_process_group: keep no reference).");
  d.def("new_group", &dist::new_group, nb::arg("ranks"), kRelease,
        "A group of some of the default group's ranks, numbered in the order given; every rank calls it with the "
        "same list.");
  nb::class_<dist::DistributedSampler>(d, "DistributedSampler",
                                       "This rank's examples of each epoch (PyTorch's DistributedSampler).")
      .def("__init__", [](dist::DistributedSampler* self, int64_t size, bool shuffle, uint64_t seed, bool drop_last,
                          int rank, int world_size) {
        new (self) dist::DistributedSampler(size, {.shuffle = shuffle, .seed = seed, .drop_last = drop_last,
                                                   .rank = rank, .world_size = world_size});
      }, nb::arg("dataset_size"), nb::arg("shuffle") = true, nb::arg("seed") = 0, nb::arg("drop_last") = false,
         nb::arg("rank") = -1, nb::arg("world_size") = -1)
      .def("set_epoch", &dist::DistributedSampler::set_epoch, nb::arg("epoch"))
      .def("indices", &dist::DistributedSampler::indices)
      .def("__len__", &dist::DistributedSampler::num_samples)
      .def("__iter__", [](const dist::DistributedSampler& s) { return nb::iter(nb::cast(s.indices())); });

  // strata.distributed.DistributedDataParallel's engine: the C++ wrapper
  // made from the Python module's named parameters and buffers.
  using DDP = nn::DistributedDataParallel;
  nb::class_<DDP>(d, "_DDP", "The C++ DistributedDataParallel over a Python module's tensors.")
      .def("__init__", [](DDP* self, nn::NamedTensors params, nn::NamedTensors buffers, size_t bucket_bytes,
                          bool find_unused, bool broadcast_buffers, const std::string& hook, PG* group) {
        nn::DDPOptions o{.bucket_bytes = bucket_bytes, .find_unused_parameters = find_unused,
                         .broadcast_buffers = broadcast_buffers};
        if (hook == "bf16") {
          o.comm_hook = nn::bf16_compress_hook();
        } else if (hook == "f16") {
          o.comm_hook = nn::f16_compress_hook();
        } else if (!hook.empty()) {
          throw nb::value_error(("comm_hook must be None, 'bf16' or 'f16', got '" + hook + "'").c_str());
        }
        nb::gil_scoped_release release;  // construction broadcasts
        new (self) DDP(std::move(params), std::move(buffers), o, group);
      }, nb::arg("params"), nb::arg("buffers"), nb::arg("bucket_bytes"), nb::arg("find_unused_parameters"),
         nb::arg("broadcast_buffers"), nb::arg("comm_hook"), nb::arg("group").none())
      .def("before_forward", &DDP::before_forward, kRelease)
      .def("bucket_layout", &DDP::bucket_layout)
      .def("stats", [](const DDP& ddp) { return stats_dict(ddp.stats()); })
      .def_prop_ro("sync_enabled", &DDP::sync_enabled)
      .def("_no_sync", [](DDP& ddp) { return std::make_unique<NoSyncScope>(ddp); }, nb::keep_alive<0, 1>())
      .def("join", [](DDP& ddp, nb::callable loop) { ddp.join([&loop] { loop(); }); }, nb::arg("loop"));
  nb::class_<NoSyncScope>(d, "_NoSync");

  nb::class_<nn::ShardedOptimizer>(d, "ShardedOptimizer",
                                   "ZeRO stage 1 or 2 (the C++ nn::ShardedOptimizer; docs/distributed.md)")
      .def("__init__", [](nn::ShardedOptimizer* self, std::vector<Tensor> params, const std::string& kind,
                          std::map<std::string, double> options, std::pair<double, double> betas, int stage,
                          size_t bucket_bytes, PG* group) {
        nn::ShardedOptimizer::Factory make = optimizer_factory(kind, options, betas);
        nb::gil_scoped_release release;  // construction broadcasts
        new (self) nn::ShardedOptimizer(std::move(params), std::move(make),
                                        {.stage = stage, .bucket_bytes = bucket_bytes}, group);
      }, nb::arg("params"), nb::arg("optimizer_class"), nb::arg("options"), nb::arg("betas"), nb::arg("stage"),
         nb::arg("bucket_bytes"), nb::arg("group").none())
      .def("step", &nn::ShardedOptimizer::step, kRelease)
      .def("zero_grad", &nn::ShardedOptimizer::zero_grad)
      .def("owner", &nn::ShardedOptimizer::owner, nb::arg("index"))
      .def_prop_ro("shard", &nn::ShardedOptimizer::shard)
      .def_prop_ro("local_optimizer", &nn::ShardedOptimizer::local_optimizer, nb::rv_policy::reference_internal,
                   "This rank's optimizer of its shard (None when it owns no parameter): its lr is the one step() "
                   "uses.")
      .def_prop_ro("state_bytes", &nn::ShardedOptimizer::state_bytes)
      .def_prop_ro("stage", &nn::ShardedOptimizer::stage)
      .def("stats", [](const nn::ShardedOptimizer& o) {
        const nn::ShardedStats s = o.stats();
        nb::dict out;
        out["reduced_passes"] = s.reduced_passes;
        out["buckets_overlapped"] = s.buckets_overlapped;
        out["buckets_at_end"] = s.buckets_at_end;
        out["steps_reduced_at_step"] = s.steps_reduced_at_step;
        return out;
      })
      .def_prop_ro("params", &nn::ShardedOptimizer::params);

  nb::class_<dist::Checkpointer>(d, "_Checkpointer")
      .def(nb::init<std::filesystem::path, int>(), nb::arg("directory"), nb::arg("keep"))
      .def("latest", &dist::Checkpointer::latest)
      .def("save", [](dist::Checkpointer& c, int64_t step, const nn::NamedTensors& params,
                      const nn::NamedTensors& buffers, const nn::Optimizer* opt, const nn::NamedTensors& extra) {
        const TensorTree tree(params, buffers);
        nb::gil_scoped_release release;  // a barrier in a group
        c.save(step, tree, opt, extra);
      }, nb::arg("step"), nb::arg("params"), nb::arg("buffers"), nb::arg("optimizer").none(), nb::arg("extra"))
      .def("restore", [](dist::Checkpointer& c, const nn::NamedTensors& params, const nn::NamedTensors& buffers,
                         nn::Optimizer* opt, GradScaler* scaler) {
        TensorTree tree(params, buffers);
        nb::gil_scoped_release release;
        return c.restore(tree, opt, scaler);
      }, nb::arg("params"), nb::arg("buffers"), nb::arg("optimizer").none(), nb::arg("scaler").none());
  nb::class_<dist::ShardedCheckpointer>(d, "_ShardedCheckpointer")
      .def(nb::init<std::filesystem::path, int>(), nb::arg("directory"), nb::arg("keep"))
      .def("latest", &dist::ShardedCheckpointer::latest)
      .def("save", [](dist::ShardedCheckpointer& c, int64_t step, const nn::NamedTensors& params,
                      const nn::NamedTensors& buffers, nn::ShardedOptimizer& opt) {
        const TensorTree tree(params, buffers);
        nb::gil_scoped_release release;
        c.save(step, tree, opt);
      }, nb::arg("step"), nb::arg("params"), nb::arg("buffers"), nb::arg("optimizer"))
      .def("restore", [](dist::ShardedCheckpointer& c, const nn::NamedTensors& params,
                         const nn::NamedTensors& buffers, nn::ShardedOptimizer& opt) {
        TensorTree tree(params, buffers);
        nb::gil_scoped_release release;
        return c.restore(tree, opt);
      }, nb::arg("params"), nb::arg("buffers"), nb::arg("optimizer"));
}
#else
void bind_distributed(nb::module_& m) {
  nb::module_ d = m.def_submodule("distributed", "Not built: this build has no libstrata_distributed (Gloo).");
  d.attr("available") = false;
}
#endif

}  // namespace strata::python
