// Exception safety under faults, on the "faulty" behaviour plugin
// (tests/plugins/behaviour/faulty_plugin.c): its kernels, allocations and
// copies fail on demand, armed through the extension
// "strata_tests.faulty_probe" (faulty_probe.h). DESIGN.md: a failed op
// leaves its inputs and the tape unchanged; docs/autograd.md ("Failures"):
// a failed backward pass leaves grad(), retained gradients and the tape's
// results as they were, and a pass over a graph it did not free can be run
// again.
//
// Forward: a failing kernel, allocation and copy each throw a strata::Error
// naming the device (and the op where there is one); the inputs keep their
// values, shapes and version, the tape its saved tensors and its answer, the
// device allocator its live bytes. Backward and checkpoint recomputation:
// every kernel, allocation and copy the pass makes is failed in turn (the
// 1st, 2nd, ... call of each op, each allocation, each copy direction), and
// after each failure grad() and the allocator are as before and a retry
// gives the right gradients.
#include <strata/checkpoint.hpp>
#include <strata/plugin/strata_plugin.h>
#include <strata/strata.hpp>

#include "behaviour_test_support.hpp"
#include "faulty_probe.h"

#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <string>
#include <vector>

namespace {

using namespace strata;
using namespace behaviour_test;

std::vector<float> values_of(const Tensor& t) { return t.to_vector<float>(); }

/// `total` + `g` elementwise in f32, as grad() accumulates.
void add_to(std::vector<float>& total, const std::vector<float>& g) {
  for (size_t i = 0; i < total.size(); ++i) total[i] += g[i];
}

/// One kind of call a fault can be armed for, with its filter.
struct FaultSite {
  int kind;
  const char* filter;  // op name, copy direction, or nullptr
  std::string name() const {
    static const char* const kinds[] = {"kernel", "alloc", "copy"};
    return std::string(kinds[kind]) + (filter != nullptr ? std::string(" ") + filter : std::string());
  }
};

/// Every call the faulty device makes, by op and by direction.
const std::vector<FaultSite>& every_site() {
  static const std::vector<FaultSite> sites = {
      {FAULTY_KERNEL, "fill"}, {FAULTY_KERNEL, "copy"}, {FAULTY_KERNEL, "add"}, {FAULTY_KERNEL, "sub"},
      {FAULTY_KERNEL, "mul"},  {FAULTY_KERNEL, "neg"},  {FAULTY_KERNEL, "sum"}, {FAULTY_ALLOC, nullptr},
      {FAULTY_COPY, "h2d"},    {FAULTY_COPY, "d2h"},    {FAULTY_COPY, "d2d"},
  };
  return sites;
}

class Faulty : public Behaviour {
 protected:
  void SetUp() override {
    Behaviour::SetUp();
    PluginInfo plugin = loaded_plugin("faulty");
    dev = Device("faulty:0");  // once the configuration is loaded
    probe = probe_extension<faulty_probe_extension>(plugin.path, FAULTY_PROBE_EXTENSION, FAULTY_PROBE_VERSION);
    ASSERT_NE(probe, nullptr) << "no " << FAULTY_PROBE_EXTENSION << " on the table of the loaded " << plugin.path;
    probe->clear_faults();
  }
  void TearDown() override {
    if (probe != nullptr) probe->clear_faults();
  }

  Tensor on_dev(std::vector<float> v, bool requires_grad = false) {
    Shape shape{static_cast<int64_t>(v.size())};
    return from_data(v, shape, {.device = dev, .requires_grad = requires_grad});
  }

  uint64_t live() { return runtime().memory_stats(dev).allocated_bytes; }

  /// Arms `site` at its `nth` call from now on (emptying the core's cache
  /// first for an allocation, so that the allocations reach the plugin).
  void arm(const FaultSite& site, uint64_t nth) {
    if (site.kind == FAULTY_ALLOC) runtime().empty_cache();
    probe->set_fault(site.kind, site.filter, nth, 0);
  }

  /// The message of the E (a strata::Error) that `f` throws with `site`
  /// armed at its first call; checks that the fault fired and the message
  /// names the device and the injected fault.
  template <class E = Error, class F>
  std::string fails_at(const FaultSite& site, const std::string& what, F&& f) {
    arm(site, 1);
    const uint64_t fired = probe->fired();
    std::string m = message_of<E>(what, f);
    EXPECT_EQ(probe->fired(), fired + 1) << what << ": the " << site.name() << " fault did not fire";
    EXPECT_FALSE(probe->armed(site.kind));
    EXPECT_TRUE(has(m, "faulty:0")) << what << ": " << m;
    EXPECT_TRUE(has(m, "injected fault")) << what << ": " << m;
    return m;
  }

  /// Runs `pass` with every fault site armed in turn at its 1st, 2nd, ...
  /// call, until a run of the pass no longer reaches the armed call. After
  /// each failure (which must be a strata::Error naming the device),
  /// `after_failure(site, n)`; after the clean run, `after_success()`.
  /// Returns the number of failures.
  int fail_everywhere(const std::function<void()>& pass,
                      const std::function<void(const FaultSite&, uint64_t)>& after_failure,
                      const std::function<void()>& after_success) {
    int failures = 0;
    for (const FaultSite& site : every_site()) {
      for (uint64_t n = 1;; ++n) {
        arm(site, n);
        const uint64_t fired = probe->fired();
        bool threw = false;
        try {
          pass();
        } catch (const Error& e) {
          threw = true;
          std::string m = e.what();
          EXPECT_TRUE(has(m, "faulty:0") && has(m, "injected fault")) << site.name() << " #" << n << ": " << m;
          if (site.kind == FAULTY_KERNEL) {
            EXPECT_TRUE(has(m, site.filter)) << site.name() << " #" << n << ": " << m;
          }
        } catch (const std::exception& e) {
          ADD_FAILURE() << site.name() << " #" << n << ": not a strata::Error: " << e.what();
          threw = true;
        }
        if (!threw) {
          EXPECT_TRUE(probe->armed(site.kind)) << site.name() << " #" << n << " fired and the pass did not fail";
          EXPECT_EQ(probe->fired(), fired);
          probe->clear_faults();
          after_success();
          break;
        }
        EXPECT_EQ(probe->fired(), fired + 1) << site.name() << " #" << n << ": the pass failed without the fault";
        ++failures;
        after_failure(site, n);
        if (::testing::Test::HasFailure() || n >= 64) return failures;  // stop at the first broken guarantee
      }
    }
    return failures;
  }

  /// y.backward(retain_graph) on tensors whose grad() is undefined, failed
  /// first at its first mul (every grad() stays undefined), then run, then
  /// failed at every fault site in turn (fail_everywhere): after each
  /// failure every grad() and the allocator's live bytes are as before the
  /// pass and `also(what)` holds; each pass that runs adds the expected
  /// gradient of each tensor (`grads`) once more. Returns the failures.
  int fail_backward_everywhere(const Tensor& y, const std::vector<std::pair<Tensor, std::vector<float>>>& grads,
                               const std::function<void(const std::string&)>& also) {
    auto pass = [&] { y.backward({}, {.retain_graph = true}); };
    fails_at({FAULTY_KERNEL, "mul"}, "first backward", pass);
    for (const auto& [t, g] : grads) EXPECT_FALSE(t.grad().defined()) << "after the failed first pass";
    pass();
    std::vector<std::vector<float>> expected;  // grad() after each pass that ran
    for (const auto& [t, g] : grads) expected.push_back(g);
    auto check = [&](const std::string& what) {
      for (size_t k = 0; k < grads.size(); ++k) {
        EXPECT_EQ(values_of(grads[k].first.grad()), expected[k]) << what << ", tensor " << k;
      }
      also(what);
    };
    check("the first pass");
    uint64_t before = live();
    return fail_everywhere(
        pass,
        [&](const FaultSite& site, uint64_t n) {
          const std::string what = site.name() + " #" + std::to_string(n);
          check(what);
          EXPECT_EQ(live(), before) << what;
        },
        [&] {
          for (size_t k = 0; k < grads.size(); ++k) add_to(expected[k], grads[k].second);
          check("a retry");
          before = live();
        });
  }

  Device dev;
  const faulty_probe_extension* probe = nullptr;
};

// ---- forward ---------------------------------------------------------------------------------

TEST_F(Faulty, DeviceWorksAndCountsItsCalls) {
  const uint64_t kernels = probe->calls(FAULTY_KERNEL), copies = probe->calls(FAULTY_COPY);
  Tensor a = on_dev({1, 2, 3});
  Tensor b = on_dev({4, 5, 6});
  EXPECT_EQ(values_of(a * b + a), (std::vector<float>{5, 12, 21}));
  EXPECT_EQ(probe->calls(FAULTY_KERNEL) - kernels, 2u);
  EXPECT_GE(probe->calls(FAULTY_COPY) - copies, 3u);
  EXPECT_FALSE(probe->armed(FAULTY_KERNEL));
  // A fault counts only the calls it filters: the second mul, not the add.
  probe->set_fault(FAULTY_KERNEL, "mul", 2, 0);
  Tensor c = a * b;
  Tensor d = c + a;
  EXPECT_TRUE(probe->armed(FAULTY_KERNEL));
  EXPECT_THROW(Tensor e = d * a, DeviceError);  // a kernel's STRATA_ERROR_INTERNAL
  EXPECT_FALSE(probe->armed(FAULTY_KERNEL));
  EXPECT_EQ(values_of(d * a), (std::vector<float>{5, 24, 63}));
}

TEST_F(Faulty, FailedKernelLeavesInputsTapeAndMemoryAsTheyWere) {
  GradientTape tape({.persistent = true});
  Tensor a = on_dev({1, 2, 3});
  Tensor b = on_dev({4, 5, 6});
  tape.watch(a);
  tape.watch(b);
  Tensor c = a * b;
  Tensor s = sum(c);
  const std::vector<Tensor> expected = tape.gradient(s, {a, b});
  const uint64_t saved = tape.saved_bytes();
  const uint64_t before = live();

  std::string m = fails_at({FAULTY_KERNEL, "add"}, "add", [&] { Tensor d = c + b; });
  EXPECT_TRUE(has(m, "add(f32[3], f32[3]) on faulty:0")) << m;
  m = fails_at({FAULTY_KERNEL, "mul"}, "mul", [&] { Tensor d = sum(c * a); });
  EXPECT_TRUE(has(m, "mul(f32[3], f32[3]) on faulty:0")) << m;

  EXPECT_EQ(values_of(a), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(values_of(b), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(values_of(c), (std::vector<float>{4, 10, 18}));
  EXPECT_EQ(c.sizes(), (Shape{3}));
  EXPECT_EQ(live(), before) << "the failed op's output must be released";
  EXPECT_EQ(tape.saved_bytes(), saved) << "the failed op must not be recorded";
  std::vector<Tensor> again = tape.gradient(s, {a, b});
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(values_of(again[0]), values_of(expected[0]));
  EXPECT_EQ(values_of(again[1]), values_of(expected[1]));

  // The device carries on.
  EXPECT_EQ(values_of(c + b), (std::vector<float>{8, 15, 24}));
}

// copy_ writes into an existing tensor: a failed one must not move its
// version, or a backward that saved it would call it modified.
TEST_F(Faulty, FailedInPlaceCopyKeepsTheVersionOfItsDestination) {
  Tensor x = on_dev({1, 2, 3});
  Tensor w = on_dev({4, 5, 6}, true);
  Tensor y = sum(x * w);  // saves x
  Tensor source = on_dev({7, 8, 9});
  const uint64_t saved = implicit_graph_saved_bytes();
  std::string m = fails_at({FAULTY_KERNEL, "copy"}, "copy_", [&] { x.copy_(source); });
  EXPECT_TRUE(has(m, "copy(f32[3]) on faulty:0")) << m;
  EXPECT_EQ(values_of(x), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(implicit_graph_saved_bytes(), saved);
  ASSERT_NO_THROW(y.backward({}, {.retain_graph = true})) << "x was not modified";
  EXPECT_EQ(values_of(w.grad()), (std::vector<float>{1, 2, 3}));

  // A copy that ran does move it.
  x.copy_(source);
  EXPECT_EQ(values_of(x), (std::vector<float>{7, 8, 9}));
  m = message_of<Error>("backward after x changed", [&] { y.backward({}, {.retain_graph = true}); });
  EXPECT_TRUE(has(m, "modified in place")) << m;
}

TEST_F(Faulty, FailedAllocationIsOutOfMemoryAndChangesNothing) {
  Tensor a = on_dev({1, 2, 3}, true);
  Tensor b = on_dev({4, 5, 6});
  Tensor c = a * b;
  const uint64_t saved = implicit_graph_saved_bytes();
  const uint64_t before = live();

  std::string m = fails_at<OutOfMemoryError>({FAULTY_ALLOC, nullptr}, "mul", [&] { Tensor d = c * a; });
  EXPECT_TRUE(has(m, "mul")) << m;
  EXPECT_TRUE(has(m, "injected fault: alloc")) << m;
  EXPECT_EQ(values_of(a), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(values_of(c), (std::vector<float>{4, 10, 18}));
  EXPECT_EQ(live(), before);
  EXPECT_EQ(implicit_graph_saved_bytes(), saved);
  sum(c).backward();
  EXPECT_EQ(values_of(a.grad()), (std::vector<float>{4, 5, 6}));

  // With blocks in the core's cache, a failed allocation is tried once more
  // after the cache went back to the plugin, and the op succeeds.
  runtime().empty_cache();
  { Tensor big = empty({4096}, {.device = dev}); }  // 16 KiB, cached when released
  ASSERT_GT(runtime().memory_stats(dev).cached_bytes, 0u);
  probe->set_fault(FAULTY_ALLOC, nullptr, 1, 0);
  const uint64_t fired = probe->fired();
  Tensor d = c * b;
  EXPECT_EQ(probe->fired(), fired + 1);
  EXPECT_EQ(values_of(d), (std::vector<float>{16, 50, 108}));
}

TEST_F(Faulty, FailedCopiesChangeNothing) {
  const uint64_t before = live();
  std::string m = fails_at({FAULTY_COPY, "h2d"}, "from_data", [&] { Tensor t = on_dev({1, 2, 3}); });
  EXPECT_TRUE(has(m, "copy h2d")) << m;
  EXPECT_EQ(live(), before) << "the new tensor's memory must be released";

  Tensor p = from_data(std::vector<float>{1, 2, 3}, {3}, {.requires_grad = true});  // cpu:0
  const uint64_t saved = implicit_graph_saved_bytes();
  fails_at({FAULTY_COPY, "h2d"}, "to(faulty:0)", [&] { Tensor t = p.to(dev); });
  EXPECT_EQ(live(), before);
  EXPECT_EQ(implicit_graph_saved_bytes(), saved);
  EXPECT_EQ(values_of(p), (std::vector<float>{1, 2, 3}));

  Tensor a = on_dev({1, 2, 3});
  fails_at({FAULTY_COPY, "d2h"}, "reading", [&] { (void)a.to_vector<float>(); });
  EXPECT_EQ(values_of(a), (std::vector<float>{1, 2, 3}));
  fails_at({FAULTY_COPY, "d2h"}, "to(cpu:0)", [&] { Tensor t = a.to(Device("cpu:0")); });

  // A forward op that falls back to the CPU (exp has no kernel on
  // faulty:0) moves its operands to the host and its result back: a failure
  // of either copy leaves the tape as it was.
  GradientTape tape({.persistent = true});
  tape.watch(a);
  Tensor s = sum(a * a);
  const std::vector<float> expected = values_of(tape.gradient(s, {a})[0]);
  const uint64_t tape_saved = tape.saved_bytes();
  const uint64_t with_a = live();
  for (const char* direction : {"d2h", "h2d"}) {
    m = fails_at({FAULTY_COPY, direction}, std::string("exp, copy ") + direction, [&] { Tensor e = exp(a); });
    EXPECT_EQ(live(), with_a) << direction;
    EXPECT_EQ(tape.saved_bytes(), tape_saved) << direction;
    EXPECT_EQ(values_of(tape.gradient(s, {a})[0]), expected) << direction;
  }
  EXPECT_EQ(values_of(a), (std::vector<float>{1, 2, 3}));
  EXPECT_NEAR(values_of(exp(a))[0], 2.7182817f, 1e-6f);
}

// A checkpointed function that fails in its first run records nothing.
TEST_F(Faulty, FailedCheckpointForwardRecordsNothing) {
  Tensor x = on_dev({1, 2, 3}, true);
  Tensor w = on_dev({4, 5, 6}, true);
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * in[1] + in[0]}; };
  const uint64_t saved = implicit_graph_saved_bytes();
  const uint64_t before = live();
  fails_at({FAULTY_KERNEL, "add"}, "checkpoint", [&] { Tensor y = checkpoint(fn, {x, w})[0]; });
  EXPECT_EQ(implicit_graph_saved_bytes(), saved);
  EXPECT_EQ(live(), before);
  sum(checkpoint(fn, {x, w})[0]).backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<float>{5, 6, 7}));
  EXPECT_EQ(values_of(w.grad()), (std::vector<float>{1, 2, 3}));
}

// ---- backward --------------------------------------------------------------------------------

// y = sum(h + x), h = x * w (retain_grad): dy/dx = w + 1, dy/dw = x,
// dy/dh = 1. Every call of the pass is failed in turn; grad() of the leaves
// and of h keeps its value and the allocator its live bytes after each
// failure, and the next pass accumulates exactly once more.
TEST_F(Faulty, FailedBackwardLeavesGradAsBeforeAndARetryWorks) {
  Tensor x = on_dev({1, -1, 2, 3}, true);
  Tensor w = on_dev({2, 3, 4, 5}, true);
  Tensor h = x * w;
  h.retain_grad();
  Tensor y = sum(h + x);
  const std::vector<float> gx{3, 4, 5, 6}, gw{1, -1, 2, 3}, gh{1, 1, 1, 1};

  int passes = 0;
  int failures = fail_backward_everywhere(y, {{x, gx}, {w, gw}, {h, gh}}, [&](const std::string& what) {
    if (what == "a retry") ++passes;
  });
  std::cout << "[ backward ] " << failures << " fault points failed the pass\n";
  EXPECT_GE(failures, 6) << "the pass must reach mul (2), add (2, accumulating) and the seed's fill";
  EXPECT_EQ(passes, static_cast<int>(every_site().size())) << "one retry after each site";
}

// Without retain_graph the pass frees the saved tensors of the nodes it
// ran; after a failure the same graph cannot run again (a clear error), a
// new forward pass can, and grad() never saw the failed pass.
TEST_F(Faulty, FailedBackwardWithoutRetainGraphCanBeRunAgainFromANewForward) {
  Tensor x = on_dev({1, -1, 2, 3}, true);
  Tensor w = on_dev({2, 3, 4, 5}, true);
  Tensor y = sum(x * w + x);
  fails_at({FAULTY_KERNEL, "mul"}, "backward", [&] { y.backward(); });
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  std::string m = message_of<Error>("the same graph again", [&] { y.backward(); });
  EXPECT_TRUE(has(m, "retain_graph")) << m;
  EXPECT_FALSE(x.grad().defined());
  sum(x * w + x).backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(values_of(w.grad()), (std::vector<float>{1, -1, 2, 3}));
}

// A persistent tape: a failed gradient() leaves its retained gradients and
// the graph as they were, and the next call gives the same answer.
TEST_F(Faulty, FailedTapeGradientLeavesTheTapeAsItWas) {
  GradientTape tape({.persistent = true});
  Tensor x = on_dev({1, -1, 2, 3});
  Tensor w = on_dev({2, 3, 4, 5});
  tape.watch(x);
  tape.watch(w);
  Tensor h = x * w;
  tape.retain(h);
  Tensor y = sum(h + x);
  const std::vector<float> gx{3, 4, 5, 6}, gw{1, -1, 2, 3}, gh{1, 1, 1, 1};
  auto check = [&](const std::vector<Tensor>& g, const std::string& what) {
    ASSERT_EQ(g.size(), 2u) << what;
    EXPECT_EQ(values_of(g[0]), gx) << what;
    EXPECT_EQ(values_of(g[1]), gw) << what;
  };
  check(tape.gradient(y, {x, w}), "first");
  const uint64_t saved = tape.saved_bytes();
  uint64_t before = live();
  int failures = fail_everywhere([&] { (void)tape.gradient(y, {x, w}); },
                                 [&](const FaultSite& site, uint64_t n) {
                                   const std::string what = site.name() + " #" + std::to_string(n);
                                   EXPECT_EQ(tape.saved_bytes(), saved) << what;
                                   ASSERT_TRUE(tape.retained_gradient(h).defined()) << what;
                                   EXPECT_EQ(values_of(tape.retained_gradient(h)), gh) << what;
                                   EXPECT_EQ(live(), before) << what;
                                 },
                                 [&] {
                                   check(tape.gradient(y, {x, w}), "a retry");
                                   before = live();
                                 });
  std::cout << "[ tape     ] " << failures << " fault points failed the pass\n";
  EXPECT_GE(failures, 3);
}

// ---- checkpoint recomputation ----------------------------------------------------------------

// The checkpointed function draws random numbers (replayed in the
// recomputation) and runs on faulty:0; every call of the backward pass,
// recomputation included, is failed in turn. After each failure grad(), the
// generator's state and the allocator are as before; each retry
// accumulates the gradients of the plain run once more.
TEST_F(Faulty, FailedCheckpointRecomputationLeavesGradAsBeforeAndARetryWorks) {
  manual_seed(7);
  Tensor x = on_dev({1, -1, 2, 3}, true);
  Tensor w = on_dev({2, 3, 4, 5}, true);
  auto fn = [this](const std::vector<Tensor>& in) {
    Tensor noise = rand({4}, {.device = dev});
    return std::vector<Tensor>{in[0] * in[1] * noise + in[0]};
  };
  // The plain run, with the same draw.
  const RngState start = get_rng_state();
  std::vector<float> gx, gw;
  {
    Tensor px = on_dev(values_of(x), true), pw = on_dev(values_of(w), true);
    sum(fn({px, pw})[0]).backward();
    gx = values_of(px.grad());
    gw = values_of(pw.grad());
  }
  set_rng_state(start);
  Tensor y = sum(checkpoint(fn, {x, w})[0]);

  const std::string rng = get_rng_state().data;
  int failures = fail_backward_everywhere(y, {{x, gx}, {w, gw}}, [&](const std::string& what) {
    EXPECT_EQ(get_rng_state().data, rng) << what << ": the recomputation must give the generator back";
  });
  std::cout << "[checkpoint] " << failures << " fault points failed the pass\n";
  EXPECT_GE(failures, 8) << "the recomputation's kernels, copies and allocations must all be reached";
}

}  // namespace
