// distributed.cpp — strata._strata.distributed: process groups on Gloo
// (docs/distributed.md) for Python's strata.distributed. Built when the
// C++ build has libstrata_distributed (STRATA_HAVE_DISTRIBUTED).
#include "bindings.hpp"

#include <nanobind/stl/chrono.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#ifdef STRATA_HAVE_DISTRIBUTED
#include <strata/distributed.hpp>
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
  d.def("all_reduce", [](Tensor& t, const std::string& op) { return dist::group().all_reduce(t, op_of(op)); },
        nb::arg("tensor"), nb::arg("op") = "sum", kRelease, "Reduces `tensor` in place over the ranks.");
  d.def("broadcast", [](Tensor& t, int root) { return dist::group().broadcast(t, root); }, nb::arg("tensor"),
        nb::arg("src") = 0, kRelease);
  d.def("all_gather", [](Tensor& out, const Tensor& in) { return dist::group().all_gather(out, in); },
        nb::arg("output"), nb::arg("input"), kRelease);
  d.def("barrier", [] { dist::group().barrier().wait(); }, kRelease);
  d.def("reduce_scatter", [](Tensor& out, const Tensor& in, const std::string& op) {
    return dist::group().reduce_scatter(out, in, op_of(op));
  }, nb::arg("output"), nb::arg("input"), nb::arg("op") = "sum", kRelease,
     "`input` of shape [world_size, *output.shape]: this rank's `output` becomes the reduction of row rank().");
  d.def("gather", [](Tensor& out, const Tensor& in, int dst) { return dist::group().gather(out, in, dst); },
        nb::arg("output"), nb::arg("input"), nb::arg("dst") = 0, kRelease,
        "Rank `dst`'s `output` ([world_size, *input.shape]) gets every rank's `input`; elsewhere it is unused.");
  d.def("scatter", [](Tensor& out, const Tensor& in, int src) { return dist::group().scatter(out, in, src); },
        nb::arg("output"), nb::arg("input"), nb::arg("src") = 0, kRelease,
        "Every rank's `output` gets row rank() of rank `src`'s `input` ([world_size, *output.shape]).");
  d.def("all_to_all", [](Tensor& out, const Tensor& in) { return dist::group().all_to_all(out, in); },
        nb::arg("output"), nb::arg("input"), kRelease, "Rank r's output[q] gets rank q's input[r].");
  d.def("send", [](const Tensor& t, int dst, int tag) { return dist::group().send(t, dst, tag); }, nb::arg("tensor"),
        nb::arg("dst"), nb::arg("tag") = 0, kRelease,
        "Point to point; it waits for the peer's matching recv (docs/distributed.md, \"Point to point\").");
  d.def("recv", [](Tensor& t, int src, int tag) { return dist::group().recv(t, src, tag); }, nb::arg("tensor"),
        nb::arg("src"), nb::arg("tag") = 0, kRelease);
}
#else
void bind_distributed(nb::module_& m) {
  nb::module_ d = m.def_submodule("distributed", "Not built: this build has no libstrata_distributed (Gloo).");
  d.attr("available") = false;
}
#endif

}  // namespace strata::python
