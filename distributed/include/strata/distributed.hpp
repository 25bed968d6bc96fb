// distributed.hpp — data-parallel process groups and collectives on Gloo.
//
// libstrata_distributed.so (CMake: strata::distributed) connects N processes
// — one per rank, on one host or many — into a process group and runs
// collectives (all-reduce, broadcast, all-gather, reduce-scatter, barrier,
// gather, scatter, all-to-all, send/recv; sub-groups with new_group)
// on CPU tensors through Gloo's TCP transport. It uses only the core's
// public API: tensors are reached with strata::native_view() (api "host").
//
//   strata::distributed::init_process_group();          // STRATA_RANK, ... from the environment
//   auto& pg = strata::distributed::group();
//   pg.all_reduce(grad, strata::distributed::ReduceOp::mean).wait();
//   strata::distributed::destroy_process_group();
//
// `strata launch -n N PROGRAM ARGS...` starts N local ranks with the
// environment set. docs/distributed.md describes rendezvous, the cost of the
// cross-rank shape check, errors and timeouts, and the multi-host form.
#pragma once

#include <strata/error.hpp>
#include <strata/tensor.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace strata::distributed {

/// How all_reduce and reduce_scatter combine the ranks' values. `mean` is
/// the sum divided by the world size (floating dtypes only).
enum class ReduceOp { sum, mean, max, min };

/// "sum", "mean", "max", "min".
std::string_view reduce_op_name(ReduceOp op);

/// Every failure of this library: bad options or environment, rendezvous
/// (port in use, a peer that never arrives), a tensor a collective cannot
/// take, tensors that differ across ranks, a peer that died or timed out.
/// Messages name the collective, this rank, the world size and what was
/// waited for.
class DistributedError : public strata::Error {
 public:
  using Error::Error;
};

/// Who this process is, as its launcher told it through the environment
/// (docs/distributed.md, "Launchers"). The launchers are asked in this
/// order, and the first whose rank variable is set is the one:
///   strata launch       STRATA_RANK, STRATA_WORLD_SIZE, STRATA_LOCAL_RANK
///   torchrun, Kubeflow  RANK, WORLD_SIZE, LOCAL_RANK
///   Open MPI            OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK
///   MPICH, Intel MPI    PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
///   Slurm (srun)        SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
/// (an inner launcher's variables describe this process; an outer one's, such
/// as an sbatch script's SLURM_PROCID=0 seen under mpirun, another). The
/// rendezvous address is STRATA_MASTER_ADDR/PORT, else MASTER_ADDR/PORT,
/// else under Slurm the first host of the step's node list and port 15000
/// plus the job id's last four digits, else unset (init uses 127.0.0.1 and
/// 29500). Throws DistributedError for a variable that is not an integer,
/// a launcher's rank without its world size, a local rank that cannot be
/// (above the rank), STRATA_RANK/STRATA_WORLD_SIZE that contradict the next
/// launcher's variables (naming both), a Slurm node list that is not one, or
/// ranks spread over hosts with no rendezvous address given.
struct LaunchEnvironment {
  std::string launcher;  // "strata launch", "torchrun", "Open MPI", "MPICH", "Slurm"; "" when none
  int rank = -1;         // -1 when not given
  int world_size = -1;
  int local_rank = -1;        // this rank's index among the ranks of its host
  int local_world_size = -1;  // the ranks on this host, where the launcher says
  std::string rank_from, world_from, local_rank_from;  // the variables read: "SLURM_PROCID"
  std::string master_addr;  // "" when not given
  int master_port = -1;
  std::string master_addr_from, master_port_from;  // where they came from, for messages
};
LaunchEnvironment launch_environment();

/// How to join a process group. Every field has an environment fallback
/// (launch_environment), so that programs run under `strata launch`,
/// torchrun, mpirun or srun need no arguments.
struct Options {
  int rank = -1;            // -1: the launcher's (launch_environment)
  int world_size = -1;      // -1: the launcher's
  /// Where rank 0 serves the TCP store, and the one address it listens on
  /// (so a loopback master is reachable from this host only).
  std::string master_addr;  // "": the launcher's, default "127.0.0.1"
  int master_port = -1;     // -1: the launcher's, default 29500
  /// The job's secret: every rank must present it to rank 0's TCP store,
  /// which refuses connections without it. `strata launch` sets a fresh
  /// random one per run. Empty (and no STRATA_JOB_TOKEN): the store admits
  /// any process that speaks its protocol (docs/distributed.md, "The TCP
  /// store"). At most 256 bytes.
  std::string job_token;  // "": STRATA_JOB_TOKEN
  /// Non-empty: rendezvous through files in this directory (ranks on one
  /// host, or a shared file system), no TCP store. The directory must exist
  /// and be empty of an earlier run's files.
  std::string file_store;
  /// How long rendezvous and every collective may wait for a peer.
  /// STRATA_DIST_TIMEOUT_MS overrides it when set.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  /// Before every collective, exchange a 128-byte header (collective, dtype,
  /// shape, op or root) with all ranks and fail on every rank, naming the
  /// ranks and shapes, when they differ. Costs one small all-gather per
  /// collective: a round trip of latency, which on a loaded machine was
  /// measured at several milliseconds (docs/distributed.md, "Performance").
  /// STRATA_DIST_CHECK=0 turns it off; without it, tensors of different
  /// sizes or element sizes make every rank wait until the timeout (the
  /// error says so), and tensors that differ otherwise give wrong results.
  bool check_consistency = true;
};

/// The result of an asynchronous collective. Collectives of one group run in
/// the order they were issued, on the group's worker thread. The tensors a
/// collective was given must not be read or written until its Work is
/// waited for. Copies share the same result.
class Work {
 public:
  /// An already-completed Work (nothing to wait for).
  Work();
  /// Blocks until the collective finished; rethrows its DistributedError
  /// (each call rethrows it again).
  void wait();
  /// True once the collective finished (successfully or not); never blocks.
  bool completed() const;

  struct State;
  explicit Work(std::shared_ptr<State> state);

 private:
  std::shared_ptr<State> state_;
};

/// A set of processes that run collectives together. Tensors: CPU (any
/// device whose native view is host memory; Gloo), or, for all_reduce,
/// broadcast and all_gather, a device without host memory whose plugin
/// offers strata.collectives (a DeviceCommunicator per device, made on first
/// use; docs/distributed.md, "Device collectives"), contiguous (a non-contiguous
/// tensor is an error naming its shape: pass .contiguous() and copy back),
/// of dtype f32, f64, bf16, f16, i32 or i64 (bool is refused; bf16 and f16
/// are reduced in f32 and rounded back per step; `mean` needs a floating
/// dtype). Every rank must call the same collectives in the same order with
/// tensors of the same dtype and shape. Bad arguments are reported like any
/// other failure, through Work::wait(), on every rank (the other ranks learn
/// which rank could not take part).
class ProcessGroup {
 public:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;

  /// In place: every rank's `t` becomes the reduction over all ranks.
  Work all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum);
  /// In place: every rank's `t` becomes rank `root`'s.
  Work broadcast(Tensor& t, int root = 0);
  /// `out` (shape [size(), *in.shape], same dtype) gets every rank's `in`,
  /// row r from rank r.
  Work all_gather(Tensor& out, const Tensor& in);
  /// `in` has shape [size(), *out.shape]; rank r's `out` gets the reduction
  /// over all ranks of their in[r].
  Work reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum);
  /// Completes once every rank has reached it.
  Work barrier();
  /// Rank `root`'s `out` (shape [size(), *in.shape], in's dtype) gets every
  /// rank's `in`, row r from rank r; the other ranks' `out` is not used (it
  /// may be undefined). Host memory only.
  Work gather(Tensor& out, const Tensor& in, int root = 0);
  /// Every rank's `out` gets row rank() of rank `root`'s `in` (shape
  /// [size(), *out.shape]); the other ranks' `in` is not used (it may be
  /// undefined). Host memory only.
  Work scatter(Tensor& out, const Tensor& in, int root = 0);
  /// `in` and `out` of shape [size(), ...] (the same): rank r's out[q] gets
  /// rank q's in[r]. Host memory only.
  Work all_to_all(Tensor& out, const Tensor& in);
  /// Point to point: `t` to rank `dst`, whose matching recv (this rank as
  /// `src`, the same `tag`, a tensor of the same dtype and size) receives
  /// it. Only the two ranks take part, so nothing is checked across ranks:
  /// a size or tag that does not match waits until the timeout, and the
  /// error names both ranks. A send waits in the group's queue until the
  /// peer posts its recv: two ranks that both send first to each other wait
  /// until the timeout (order them, even ranks first, or use all_to_all).
  /// `tag` in 0..2^31-1. Host memory only.
  Work send(const Tensor& t, int dst, int tag = 0);
  Work recv(Tensor& t, int src, int tag = 0);
  /// This group's ranks as ranks of the default group: rank r here is
  /// world_ranks()[r] there (0..size()-1 for the default group itself).
  const std::vector<int>& world_ranks() const;
  /// False on a rank of the default group that a new_group() left out: it
  /// holds the group (every rank calls new_group) but may not use it.
  bool is_member() const;

  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// A group of some of the default group's ranks, `ranks` (default-group
/// ranks, unique, in the order that numbers them in the new group: rank r
/// of the new group is ranks[r]). Every rank of the default group calls it
/// with the same list, in the same order as its other new_group calls and
/// collectives (the ranks meet through the default group's store, on its
/// queue). A rank not in `ranks` gets a group it is not a member of
/// (is_member() false, rank() -1): its collectives throw DistributedError
/// naming the group and the rank. DistributedError for an empty list, a
/// rank listed twice, or a rank outside the default group (naming it and
/// the world size). Device collectives (strata.collectives) are the default
/// group's only.
std::unique_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

/// Joins the default process group (see Options for the environment).
/// Returns once every rank has arrived and every pair of ranks is connected.
/// Throws DistributedError for bad options (rank >= world size, world size
/// < 1, a missing or malformed environment variable, named), a port in use,
/// a store it cannot reach within the timeout or that refuses the job
/// token, ranks that never arrive (named, with the address), ranks started
/// with different world sizes, a rank another process already joined as,
/// or Gloo failing to connect the ranks. Error when already initialised.
void init_process_group(const Options& options = {});
bool is_initialized();
/// The default group; DistributedError when not initialised.
ProcessGroup& group();
/// Waits for the default group's queued collectives (their errors are
/// dropped: wait on their Work to see them), closes its connections and, on
/// rank 0, stops the store. A no-op when not initialised. When Gloo fails
/// to close the connections, the group is destroyed all the same and
/// DistributedError says what failed.
void destroy_process_group();
/// The default group's rank and size; DistributedError when not initialised.
int rank();
int world_size();

}  // namespace strata::distributed
