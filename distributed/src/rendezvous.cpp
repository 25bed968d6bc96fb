// rendezvous.cpp — init_process_group's work: options from the
// environment, the store (rank 0 serves it), claiming the rank, arrival
// (every rank, with its world size), Gloo's full mesh and a first barrier.
// Every failure on the way is a DistributedError naming this rank and the
// cause; nothing Gloo throws escapes (docs/distributed.md, "Rendezvous").
#include "group_impl.hpp"
#include "launch_env.hpp"

#include <gloo/barrier.h>
#include <gloo/transport/tcp/device.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <optional>

namespace strata::distributed::detail {
namespace {

/// The most ranks a group may have: every rank holds a connection to every
/// other, and the arrival wait names every rank in one store request.
constexpr int kMaxWorldSize = 1 << 20;
/// Connections rank 0's store accepts beyond one per rank (a rank that
/// reconnects, a stranger waiting to be refused).
constexpr size_t kSpareConnections = 32;
/// Arrival waits in slices this long, so that a rank that gave up (a world
/// size mismatch) ends every rank's wait at once.
constexpr auto kArrivalSlice = std::chrono::milliseconds(250);
/// How long rank 0 keeps serving after its rendezvous failed, at most.
constexpr auto kLinger = std::chrono::milliseconds(5000);

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

wire::Bytes bytes(const std::string& s) { return {s.begin(), s.end()}; }

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1"; }

/// Gloo's TCP transport writes to its sockets without MSG_NOSIGNAL in
/// places, so a write to a peer that has gone raises SIGPIPE, whose default
/// action kills this process (seen: a survivor killed while the dead rank's
/// connection closed). A group turns that into an error instead: SIGPIPE is
/// ignored when the program left it at its default (a handler the program
/// installed is kept), as Python does for every program.
void ignore_sigpipe() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
      (current.sa_flags & SA_SIGINFO) == 0) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
}

/// Arrival. Every rank sets "arrived/<rank>" to "<world size>\n<Gloo
/// address>" and waits for all the others; a rank whose world size differs
/// from this one's ends the wait on both sides (the rank that notices sets
/// "init_failed", which every waiting rank checks between slices). Returns
/// the ranks' Gloo addresses.
std::vector<std::string> arrive(PrefixedStore& store, int rank, int world, const std::string& address,
                                std::chrono::milliseconds timeout, const std::string& who, const std::string& where) {
  store.set("arrived/" + std::to_string(rank), bytes(std::to_string(world) + "\n" + address));
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("arrived/" + std::to_string(r));
  std::vector<std::string> watched = keys;
  watched.push_back("init_failed");
  std::vector<std::optional<std::string>> addresses(static_cast<size_t>(world));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      store.wait(keys, std::clamp(left, std::chrono::milliseconds(1), kArrivalSlice));
    } catch (const DistributedError&) {  // not all there yet: see who is
    }
    std::vector<bool> present = store.check(watched);
    if (present.back()) {
      std::vector<char> why = store.get("init_failed");
      throw DistributedError(who + ": another rank gave up: " + std::string(why.begin(), why.end()));
    }
    int missing = 0;
    for (int r = 0; r < world; ++r) {
      if (!present[r]) ++missing;
      if (!present[r] || addresses[r]) continue;
      std::vector<char> value = store.get(keys[r]);
      std::string text(value.begin(), value.end());
      size_t nl = text.find('\n');
      std::string theirs = text.substr(0, nl == std::string::npos ? 0 : nl);
      if (theirs != std::to_string(world)) {
        std::string why = "rank " + std::to_string(r) + " was started with a world size of " +
                          (theirs.empty() ? "?" : theirs) + ", rank " + std::to_string(rank) + " with " +
                          std::to_string(world) +
                          " (STRATA_WORLD_SIZE or Options::world_size): every rank must be given the same";
        store.set("init_failed", bytes(why));
        throw DistributedError(who + ": " + why);
      }
      addresses[r] = text.substr(nl + 1);
    }
    if (missing == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::vector<int> absent;
      for (int r = 0; r < world; ++r)
        if (!present[r]) absent.push_back(r);
      std::string list;
      for (int r : absent) list += (list.empty() ? "" : ", ") + std::to_string(r);
      throw DistributedError(who + ": timed out after " + std::to_string(timeout.count()) + " ms waiting for rank" +
                             (absent.size() > 1 ? "s " : " ") + list + " to arrive at the " + where +
                             " (not started, crashed, or given another address or port?)");
    }
  }
  std::vector<std::string> out;
  for (auto& a : addresses) out.push_back(*a);
  return out;
}

/// Gloo's TCP device: loopback when the master is, else this host's name
/// (STRATA_DIST_HOSTNAME or STRATA_DIST_IFACE override it).
std::shared_ptr<gloo::transport::Device> make_device(const std::string& addr, bool file_store, const std::string& who) {
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("STRATA_DIST_IFACE"); iface && *iface) {
    attr.iface = iface;
  } else {
    std::string host = env_or("STRATA_DIST_HOSTNAME", "");
    if (host.empty()) {
      if (is_loopback(addr) || file_store) {
        host = "127.0.0.1";
      } else {
        char name[256] = {};
        ::gethostname(name, sizeof name - 1);
        host = name;
      }
    }
    attr.hostname = host;
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw DistributedError(who + ": cannot create Gloo's TCP device on \"" +
                           (attr.iface.empty() ? attr.hostname : "interface " + attr.iface) + "\": " + e.what() +
                           " (set STRATA_DIST_HOSTNAME or STRATA_DIST_IFACE)");
  }
}

/// Connects every pair of ranks, learns every pair's listening address (so
/// that a Gloo message naming an address can be turned into its rank), sets
/// the liveness key and passes a first barrier, so that no rank needs the
/// store once init returns.
void connect_mesh(ProcessGroup::Impl& g, PrefixedStore& store, std::shared_ptr<gloo::transport::Device>& device) {
  g.context = std::make_shared<gloo::rendezvous::Context>(g.rank, g.size);
  g.context->setTimeout(g.timeout);
  PrefixedStore mesh("strata/default/mesh/", *g.store);
  g.context->connectFullMesh(mesh, device);
  g.meshed = true;
  // Rank q publishes, line by line, the address of its pair with each rank.
  std::string mine;
  for (int r = 0; r < g.size; ++r)
    mine += (r == g.rank ? std::string() : g.context->getPair(r)->address().str()) + "\n";
  store.set("pairs/" + std::to_string(g.rank), bytes(mine));
  for (int q = 0; q < g.size; ++q) {
    if (q == g.rank) continue;
    auto bytes = store.get("pairs/" + std::to_string(q));
    std::string lines(bytes.begin(), bytes.end());
    size_t pos = 0;
    for (int r = 0; r < g.size && pos <= lines.size(); ++r) {
      size_t nl = lines.find('\n', pos);
      if (nl == std::string::npos) break;
      if (r == g.rank) g.peer_addresses[q] = lines.substr(pos, nl - pos);
      pos = nl + 1;
    }
  }
  // Liveness: a key that lives as long as this rank's connection to the TCP
  // store, so that when a Gloo connection breaks the survivors can ask
  // which rank is gone (Impl::gone_peers). Set before the barrier, so every
  // rank's key exists once init returns.
  g.liveness = store.set_owned("alive/" + std::to_string(g.rank), {});
  if (g.size > 1) {
    gloo::BarrierOptions opts(g.context);
    opts.setTimeout(g.timeout);
    gloo::barrier(opts);
  }
}

}  // namespace

std::unique_ptr<ProcessGroup> make_group(const Options& options) {
  ignore_sigpipe();
  auto impl = std::make_unique<ProcessGroup::Impl>();
  const LaunchEnvironment launched = launch_environment();
  // The launcher's local rank picks this rank's accelerator (one per rank
  // of a host); STRATA_LOCAL_RANK did at start when the launcher set it.
  if (launched.local_rank >= 0 && std::getenv("STRATA_LOCAL_RANK") == nullptr)
    runtime().set_local_rank(launched.local_rank);
  auto missing = [](const std::string& variable, const std::string& field) {
    return DistributedError("init_process_group: " + variable + " is not set and Options::" + field +
                            " was not given (run under `strata launch -n N`, torchrun, mpirun or srun, or set "
                            "STRATA_RANK and STRATA_WORLD_SIZE)");
  };
  // A launcher found has set both (launch_environment refuses one without
  // the other); its values are checked below, naming its variables.
  if (options.world_size < 0 && launched.launcher.empty()) throw missing("STRATA_WORLD_SIZE", "world_size");
  if (options.rank < 0 && launched.launcher.empty()) throw missing("STRATA_RANK", "rank");
  const int world = options.world_size >= 0 ? options.world_size : launched.world_size;
  const int rank = options.rank >= 0 ? options.rank : launched.rank;
  const std::string world_from = options.world_size >= 0 ? "Options::world_size" : launched.world_from;
  const std::string rank_from = options.rank >= 0 ? "Options::rank" : launched.rank_from;
  if (world < 1)
    throw DistributedError("init_process_group: world size " + std::to_string(world) + " (" + world_from +
                           ") must be >= 1");
  if (world > kMaxWorldSize)
    throw DistributedError("init_process_group: world size " + std::to_string(world) + " (" + world_from +
                           ") is more than " + std::to_string(kMaxWorldSize) +
                           ", the most ranks a group connects (every rank connects to every other)");
  if (rank < 0)
    throw DistributedError("init_process_group: rank " + std::to_string(rank) + " (" + rank_from + ") must be >= 0");
  if (rank >= world)
    throw DistributedError("init_process_group: rank " + std::to_string(rank) + " (" + rank_from +
                           ") is not below the world size " + std::to_string(world) + " (" + world_from + ")");
  std::string addr = !options.master_addr.empty() ? options.master_addr
                     : !launched.master_addr.empty() ? launched.master_addr
                                                     : std::string("127.0.0.1");
  const std::string addr_from = !options.master_addr.empty()    ? std::string("Options::master_addr")
                                : !launched.master_addr.empty() ? launched.master_addr_from
                                                                : std::string("the default address");
  int port = options.master_port >= 0 ? options.master_port : launched.master_port >= 0 ? launched.master_port : 29500;
  if (port < 1 || port > 65535)
    throw DistributedError("init_process_group: master port " + std::to_string(port) + " (" +
                           (options.master_port >= 0 ? std::string("Options::master_port") : launched.master_port_from) +
                           ") is not in 1..65535");
  std::string token = !options.job_token.empty() ? options.job_token : env_or("STRATA_JOB_TOKEN", "");
  if (token.size() > wire::kMaxTokenBytes)
    throw DistributedError("init_process_group: the job token (" +
                           std::string(options.job_token.empty() ? "STRATA_JOB_TOKEN" : "Options::job_token") +
                           ") has " + std::to_string(token.size()) + " bytes; at most " +
                           std::to_string(wire::kMaxTokenBytes));
  auto timeout = options.timeout;
  if (const char* t = std::getenv("STRATA_DIST_TIMEOUT_MS"); t && *t) {
    const int ms = detail::env_integer("STRATA_DIST_TIMEOUT_MS").value_or(0);
    if (ms <= 0)
      throw DistributedError(std::string("init_process_group: STRATA_DIST_TIMEOUT_MS=\"") + t + "\" must be > 0");
    timeout = std::chrono::milliseconds(ms);
  }
  bool check = options.check_consistency;
  if (const char* c = std::getenv("STRATA_DIST_CHECK"); c && *c) check = std::string(c) != "0";

  impl->rank = rank;
  impl->size = world;
  impl->world_rank = rank;
  for (int r = 0; r < world; ++r) impl->world_ranks.push_back(r);
  impl->timeout = timeout;
  impl->check = check;
  const std::string who = "init_process_group on " + impl->who();
  const bool file_store = !options.file_store.empty();

  // The store: rank 0 serves it on the master address itself.
  if (file_store) {
    impl->store = std::make_unique<FileRendezvousStore>(options.file_store, timeout);
  } else {
    if (rank == 0) {
      try {
        impl->server = std::make_unique<TcpStoreServer>(
            TcpStoreServer::Options{addr, port, token, timeout, static_cast<size_t>(world) + kSpareConnections,
                                    addr_from});
      } catch (const DistributedError& e) {
        throw DistributedError(who + ": " + e.what());
      }
    }
    impl->store = std::make_unique<TcpStoreClient>(addr, port, timeout, who, token);
  }
  impl->store_where = impl->store->describe();
  const std::string where = (file_store ? "" : "TCP store at ") + impl->store_where;

  PrefixedStore store("strata/default/", *impl->store);
  if (!store.claim("rank/" + std::to_string(rank)))
    throw DistributedError(who + ": another process already joined as rank " + std::to_string(rank) + " at the " +
                           where + " (two processes given STRATA_RANK=" + std::to_string(rank) +
                           (file_store ? ", or a directory holding an earlier run's files?)"
                                       : ", or a rank of an earlier run still using this port?)"));
  std::shared_ptr<gloo::transport::Device> device = make_device(addr, file_store, who);
  impl->transport = device;
  try {
    impl->peer_addresses = arrive(store, rank, world, device->str(), timeout, who, where);
  } catch (const DistributedError&) {
    // Rank 0 serves the store: stay until the others have read why (or
    // gave up themselves), so that each names the cause, not a lost store.
    if (impl->server) {
      impl->store.reset();
      impl->server->linger(std::min<std::chrono::milliseconds>(timeout, kLinger));
    }
    throw;
  }

  try {
    connect_mesh(*impl, store, device);
  } catch (const DistributedError& e) {
    throw DistributedError(who + ": connecting the ranks: " + e.what());
  } catch (const std::exception& e) {  // gloo::Exception, gloo::EnforceNotMet, std::system_error
    int r = impl->peer_rank_in(e.what());
    throw DistributedError(who + ": connecting the ranks failed" + (r < 0 ? "" : " (with " + impl->peer_name(r) + ")") +
                           ": " + e.what());
  }
  impl->start_worker();
  return std::make_unique<ProcessGroup>(std::move(impl));
}

std::unique_ptr<ProcessGroup> make_subgroup(ProcessGroup::Impl& world, const std::vector<int>& ranks) {
  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
  const std::string label = "group [" + list + "]";
  const std::string who = "new_group(" + label.substr(6) + ") on rank " + std::to_string(world.rank) + " of " +
                          std::to_string(world.size);
  if (!world.label.empty()) throw DistributedError(who + ": sub-groups are made from the default group only");
  if (ranks.empty()) throw DistributedError(who + ": no ranks");
  std::vector<bool> seen(static_cast<size_t>(world.size), false);
  for (int r : ranks) {
    if (r < 0 || r >= world.size)
      throw DistributedError(who + ": rank " + std::to_string(r) + " is not a rank of the default group (0.." +
                             std::to_string(world.size - 1) + ", world size " + std::to_string(world.size) + ")");
    if (seen[static_cast<size_t>(r)]) throw DistributedError(who + ": rank " + std::to_string(r) + " is listed twice");
    seen[static_cast<size_t>(r)] = true;
  }
  // Every rank counts its new_group calls, so the k-th group of every rank
  // is the same group and meets under the same store keys.
  const int serial = world.subgroups++;
  auto sub = std::make_unique<ProcessGroup::Impl>();
  sub->world_ranks = ranks;
  sub->label = label;
  sub->world_rank = world.rank;
  sub->size = static_cast<int>(ranks.size());
  sub->rank = -1;
  for (size_t k = 0; k < ranks.size(); ++k)
    if (ranks[k] == world.rank) sub->rank = static_cast<int>(k);
  sub->timeout = world.timeout;
  sub->check = world.check;
  sub->store_where = world.store_where;
  sub->peer_addresses.assign(ranks.size(), std::string());
  if (sub->rank < 0) return std::make_unique<ProcessGroup>(std::move(sub));  // not a member: nothing to connect
  // The members connect through the default group's store, on its queue, so
  // that no collective of the default group uses the store meanwhile.
  ProcessGroup::Impl& g = *sub;
  world
      .enqueue([&world, &g, serial] {
        g.context = std::make_shared<gloo::rendezvous::Context>(g.rank, g.size);
        g.context->setTimeout(g.timeout);
        PrefixedStore mesh("strata/group/" + std::to_string(serial) + "/mesh/", *world.store);
        try {
          g.context->connectFullMesh(mesh, world.transport);
        } catch (const std::exception& e) {  // gloo::Exception, gloo::EnforceNotMet, std::system_error
          throw DistributedError("connecting the ranks of " + g.label + " failed: " + e.what());
        }
        g.meshed = true;
      })
      .wait();
  sub->start_worker();
  return std::make_unique<ProcessGroup>(std::move(sub));
}

}  // namespace strata::distributed::detail
