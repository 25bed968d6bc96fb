// launch_env.cpp — who this rank is, from the variables its launcher set
// (distributed.hpp, launch_environment; docs/distributed.md, "Launchers").
//
// Launchers, in the order they are asked: `strata launch` (STRATA_*),
// torchrun and the Kubernetes operators (RANK, WORLD_SIZE, LOCAL_RANK),
// Open MPI (OMPI_COMM_WORLD_*), MPICH / Intel MPI's Hydra (PMI_RANK,
// PMI_SIZE, MPI_LOCALRANKID), Slurm's srun (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID). The first whose rank variable is set is the launcher: an
// inner launcher sets its own variables, and the outer one's (an sbatch
// script's SLURM_PROCID=0 under mpirun) describe another process.
#include "launch_env.hpp"

#include <strata/distributed.hpp>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace strata::distributed {

namespace {

struct Launcher {
  const char* name;
  const char* rank;
  const char* world;
  const char* local_rank;        // may be null
  const char* local_world_size;  // may be null
};

constexpr Launcher kLaunchers[] = {
    {"strata launch", "STRATA_RANK", "STRATA_WORLD_SIZE", "STRATA_LOCAL_RANK", "STRATA_LOCAL_WORLD_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

const char* env(const char* name) {
  if (name == nullptr) return nullptr;
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

namespace detail {

std::optional<int> env_integer(const char* name) {
  const char* v = env(name);
  if (v == nullptr) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0')
    throw DistributedError(std::string("init_process_group: ") + name + "=\"" + v + "\" is not an integer");
  if (errno == ERANGE || value < INT32_MIN || value > INT32_MAX)
    throw DistributedError(std::string("init_process_group: ") + name + "=\"" + v + "\" is out of range (" +
                           std::to_string(INT32_MIN) + ".." + std::to_string(INT32_MAX) + ")");
  return static_cast<int>(value);
}

std::string first_slurm_host(const std::string& list) {
  std::string host;
  for (size_t i = 0; i < list.size();) {
    const char c = list[i];
    if (c == ',') break;  // the end of the first entry
    if (c == ']') return {};
    if (c != '[') {
      host += c;
      ++i;
      continue;
    }
    const size_t close = list.find(']', i);
    if (close == std::string::npos) return {};
    size_t k = i + 1;
    std::string first;
    while (k < close && list[k] >= '0' && list[k] <= '9') first += list[k++];
    if (first.empty() || (k < close && list[k] != '-' && list[k] != ',')) return {};
    host += first;
    i = close + 1;
  }
  return host;
}

}  // namespace detail

namespace {

using detail::env_integer;

std::string shown(const char* name, int value) { return std::string(name) + "=" + std::to_string(value); }

}  // namespace

LaunchEnvironment launch_environment() {
  LaunchEnvironment e;
  const Launcher* found = nullptr;
  for (const Launcher& l : kLaunchers) {
    if (env(l.rank) != nullptr) {
      found = &l;
      break;
    }
  }
  if (found != nullptr) {
    e.launcher = found->name;
    e.rank_from = found->rank;
    e.world_from = found->world;
    e.rank = *env_integer(found->rank);
    const std::optional<int> world = env_integer(found->world);
    if (!world) {
      throw DistributedError(std::string("init_process_group: ") + found->world + " is not set, but " +
                             shown(found->rank, e.rank) + " is (" + found->name +
                             "'s variables come together: was the program started by " + found->name + "?)");
    }
    e.world_size = *world;
    if (const std::optional<int> local = env_integer(found->local_rank)) {
      if (*local < 0 || (e.rank >= 0 && *local > e.rank)) {
        throw DistributedError("init_process_group: " + shown(found->local_rank, *local) + " cannot be the local "
                               "rank of " + shown(found->rank, e.rank) + " (" + found->name +
                               "'s variables contradict each other)");
      }
      e.local_rank = *local;
      e.local_rank_from = found->local_rank;
    }
    if (const std::optional<int> local_world = env_integer(found->local_world_size)) e.local_world_size = *local_world;
    // STRATA_* beside a launcher's own variables: a rank set by hand must
    // agree with the launcher's (`strata launch` clears the others for its
    // ranks, so they never meet there).
    if (found == &kLaunchers[0]) {
      for (const Launcher& l : std::span(kLaunchers).subspan(1)) {
        const std::optional<int> their_rank = env_integer(l.rank), their_world = env_integer(l.world);
        if (!their_rank || !their_world) continue;
        if (*their_world != e.world_size || *their_rank != e.rank) {
          throw DistributedError("init_process_group: " + shown(found->rank, e.rank) + " and " +
                                 shown(found->world, e.world_size) + " contradict " + l.name + "'s " +
                                 shown(l.rank, *their_rank) + " and " + shown(l.world, *their_world) +
                                 ": unset one or the other");
        }
        break;  // only the launcher that would otherwise have been used
      }
    }
  }
  // The rendezvous address: STRATA_MASTER_*, then torchrun's MASTER_*, then
  // (under Slurm) the job's first node and a port of the job's own.
  if (const char* a = env("STRATA_MASTER_ADDR")) {
    e.master_addr = a;
    e.master_addr_from = "STRATA_MASTER_ADDR";
  } else if (const char* m = env("MASTER_ADDR")) {
    e.master_addr = m;
    e.master_addr_from = "MASTER_ADDR";
  }
  if (const std::optional<int> p = env_integer("STRATA_MASTER_PORT")) {
    e.master_port = *p;
    e.master_port_from = "STRATA_MASTER_PORT";
  } else if (const std::optional<int> q = env_integer("MASTER_PORT")) {
    e.master_port = *q;
    e.master_port_from = "MASTER_PORT";
  }
  if (e.launcher == "Slurm") {
    const char* list_name = env("SLURM_STEP_NODELIST") != nullptr ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
    if (e.master_addr.empty()) {
      if (const char* list = env(list_name)) {
        e.master_addr = detail::first_slurm_host(list);
        if (e.master_addr.empty())
          throw DistributedError(std::string("init_process_group: ") + list_name + "=\"" + list +
                                 "\" is not a Slurm host list (set MASTER_ADDR to rank 0's host)");
        e.master_addr_from = std::string("the first host of ") + list_name;
      }
    }
    if (e.master_port < 0) {
      if (const char* job = env("SLURM_JOB_ID")) {
        // Jobs sharing a node must not share a port: 15000 plus the job
        // id's last four digits, as PyTorch Lightning picks it.
        const std::string id(job);
        const std::string tail = id.size() > 4 ? id.substr(id.size() - 4) : id;
        char* end = nullptr;
        const long digits = std::strtol(tail.c_str(), &end, 10);
        if (end != tail.c_str() && *end == '\0' && digits >= 0) {
          e.master_port = 15000 + static_cast<int>(digits);
          e.master_port_from = "15000 + the last four digits of SLURM_JOB_ID";
        }
      }
    }
  }
  // A launcher whose ranks span hosts needs an address other than loopback.
  if (e.master_addr.empty() && e.local_world_size > 0 && e.world_size > e.local_world_size) {
    throw DistributedError("init_process_group: " + e.launcher + " started " + std::to_string(e.world_size) +
                           " ranks, " + std::to_string(e.local_world_size) +
                           " on this host: set MASTER_ADDR (or STRATA_MASTER_ADDR) to rank 0's host on every "
                           "rank (mpirun -x MASTER_ADDR=...), and MASTER_PORT to a port free there");
  }
  return e;
}

}  // namespace strata::distributed
