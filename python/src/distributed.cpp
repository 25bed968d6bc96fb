// distributed.cpp — strata._strata.distributed: process groups on Gloo
// (docs/distributed.md) for Python's strata.distributed. Built when the
// C++ build has libstrata_distributed (STRATA_HAVE_DISTRIBUTED).
#include "bindings.hpp"

#include <nanobind/stl/chrono.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#ifdef STRATA_HAVE_DISTRIBUTED
#include <strata/distributed.hpp>
#include <strata/sampler.hpp>
#endif

#include <string>

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
}
#else
void bind_distributed(nb::module_& m) {
  nb::module_ d = m.def_submodule("distributed", "Not built: this build has no libstrata_distributed (Gloo).");
  d.attr("available") = false;
}
#endif

}  // namespace strata::python
