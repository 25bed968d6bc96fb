// matmul.cpp — the matmul kernel (docs/ops.md, "Linear algebra").
//
// f32 and bf16 run on oneDNN's matmul primitive, which takes the operands'
// strides as they are: batch dims are collapsed, a stride-0 batch dim becomes
// a broadcast dim of size 1, and transposed matrices are described by their
// strides. Primitive creation costs far more than a small matmul, so
// primitives are cached per (dtype, threads, dims, strides). When oneDNN has
// no fast implementation for a layout (it would pick its reference kernel),
// the operands are first copied to compact tensors. Large f32 matrices use
// dnnl_sgemm instead (faster, see try_sgemm). f16 (no CPU f16 matmul
// in oneDNN 2.6) computes through f32 copies; f64 and tiny problems use
// gemm_loops.cpp. The fused linear (y = act(x @ wᵀ + bias)) is the same
// primitive with the bias and the relu as its epilogue. oneDNN always runs
// single-threaded: a GEMM worth several threads is cut into row or column
// blocks on the plugin's work pool (split_gemm).
#include "matmul.hpp"

#include "data.hpp"
#include "elementwise.hpp"
#include "kernel.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace strata::cpu {
namespace {

/// Multiply-adds per thread below which a GEMM gets fewer threads (about
/// 20 µs of AVX-512 work: a smaller share gains less than handing it out
/// costs).
constexpr int64_t kMatmulWorkPerThread = int64_t{1} << 20;

/// Multiply-adds per matrix from which f32 goes to dnnl_sgemm (128^3).
constexpr int64_t kSgemmMinWork = int64_t{1} << 21;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

/// The oneDNN view of one call: dims and strides of a, b and y (in that order).
struct Problem {
  int nd = 0;
  int64_t dims[3][kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};
};

/// Strides of a rows x cols matrix with size-1 dims given the stride that
/// makes it plain row-major or column-major, as oneDNN expects. A column
/// (cols == 1) is row-major with leading dimension rs: read as column-major
/// (ld = rows) it is a transposed operand, which dnnl_sgemm is not given and
/// for which oneDNN's matmul primitive has only its reference kernel, so a
/// matrix-vector product past gemm_small's sizes found no kernel at all.
void normalize_matrix(int64_t rows, int64_t cols, int64_t& rs, int64_t& cs) {
  if (rows == 1 && cols == 1) {
    rs = cs = 1;
  } else if (rows == 1) {
    rs = cs == 1 ? cols : 1;
  } else if (cols == 1) {
    cs = 1;
  }
}

Problem describe(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y) {
  const int r = y.rank;
  const int64_t mkn[3][2] = {{a.shape[r - 2], a.shape[r - 1]}, {b.shape[r - 2], b.shape[r - 1]},
                             {y.shape[r - 2], y.shape[r - 1]}};
  const strata_tensor* t[3] = {&a, &b, &y};
  const Layout<3> bl = batch_layout(y, a, b);  // operand order there: y, a, b
  const int layout_of[3] = {1, 2, 0};
  const int nb = bl.numel() > 1 ? bl.rank : 0;
  Problem p;
  p.nd = nb + 2;
  for (int k = 0; k < 3; ++k) {
    p.dims[k][nb] = mkn[k][0];
    p.dims[k][nb + 1] = mkn[k][1];
    p.strides[k][nb] = t[k]->strides[r - 2];
    p.strides[k][nb + 1] = t[k]->strides[r - 1];
    normalize_matrix(mkn[k][0], mkn[k][1], p.strides[k][nb], p.strides[k][nb + 1]);
    int64_t extent = 1;  // of the dims inside the current one, for broadcast strides
    for (int d = nb + 1; d >= 0; --d) {
      if (d < nb) {
        const int64_t s = bl.strides[layout_of[k]][d];
        p.dims[k][d] = s == 0 ? 1 : bl.shape[d];
        p.strides[k][d] = s == 0 ? extent : s;
      }
      extent = std::max(extent, p.strides[k][d] * p.dims[k][d]);
    }
  }
  return p;
}

/// What a plan applies to the product on the way out: nothing (matmul),
/// a bias row [1, N] (linear), or the bias then relu (linear with its relu).
enum class Epilogue : int64_t { none = 0, bias = 1, bias_relu = 2 };

using Key = std::array<int64_t, 4 + 6 * kMaxRank>;

Key make_key(const Problem& p, strata_dtype dtype, int threads, Epilogue epilogue) {
  Key key{};
  key[0] = dtype;
  key[1] = threads;
  key[2] = p.nd;
  key[3] = static_cast<int64_t>(epilogue);
  size_t i = 4;
  for (int k = 0; k < 3; ++k) {
    for (int d = 0; d < p.nd; ++d) {
      key[i++] = p.dims[k][d];
      key[i++] = p.strides[k][d];
    }
  }
  return key;
}

struct Plan {
  bool usable = false;  // false: no fast oneDNN implementation for this layout
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, y, bias, scratchpad;  // bias: with an epilogue only
};

/// Cached plans; leaked on purpose so that kernels running during process
/// exit never see it destroyed.
struct PlanCache {
  static constexpr size_t kCapacity = 1024;  // dropped wholesale when full
  std::mutex mutex;
  std::map<Key, std::shared_ptr<const Plan>> plans;
};

PlanCache& plan_cache() {
  static auto* cache = new PlanCache;
  return *cache;
}

std::shared_ptr<const Plan> create_plan(const Problem& p, dnnl::memory::data_type dt, Epilogue epilogue) {
  auto plan = std::make_shared<Plan>();
  const auto md = [&](int k) {
    return dnnl::memory::desc(dnnl::memory::dims(p.dims[k], p.dims[k] + p.nd), dt,
                              dnnl::memory::dims(p.strides[k], p.strides[k] + p.nd));
  };
  try {
    plan->a = md(0);
    plan->b = md(1);
    plan->y = md(2);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // concurrent calls need their own
    if (epilogue == Epilogue::bias_relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::desc desc(plan->a, plan->b, plan->y);
    if (epilogue != Epilogue::none) {  // one row of N, broadcast over the rows of y (2-D problems only)
      const int64_t n = p.dims[2][p.nd - 1];
      plan->bias = dnnl::memory::desc({1, n}, dt, dnnl::memory::dims{n, 1});
      desc = dnnl::matmul::desc(plan->a, plan->b, plan->bias, plan->y);
    }
    const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    // The reference implementation is orders of magnitude slower than copying
    // the operands to a layout the optimised ones accept.
    if (std::string_view(pd.impl_info_str()).starts_with("ref")) return plan;
    plan->scratchpad = pd.scratchpad_desc();
    plan->primitive = dnnl::matmul(pd);
    plan->usable = true;
  } catch (const dnnl::error&) {
    // dnnl_unimplemented for this dtype/layout: unusable.
  }
  return plan;
}

std::shared_ptr<const Plan> find_plan(const Problem& p, strata_dtype dtype, dnnl::memory::data_type dt,
                                      int threads, Epilogue epilogue = Epilogue::none) {
  const Key key = make_key(p, dtype, threads, epilogue);
  PlanCache& cache = plan_cache();
  {
    const std::lock_guard lock(cache.mutex);
    if (const auto it = cache.plans.find(key); it != cache.plans.end()) return it->second;
  }
  auto plan = create_plan(p, dt, epilogue);  // slow: outside the lock
  const std::lock_guard lock(cache.mutex);
  if (cache.plans.size() >= PlanCache::kCapacity) cache.plans.clear();
  return cache.plans.emplace(key, std::move(plan)).first->second;
}

/// Per-thread scratchpad memory, grown on demand and 64-byte aligned.
void* scratchpad(size_t bytes) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buffer;
  if (bytes > buffer.size) {
    std::free(buffer.p);
    buffer.size = 0;
    buffer.p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (buffer.p == nullptr) throw std::bad_alloc();
    buffer.size = bytes;
  }
  return buffer.p;
}

template <class T>
constexpr dnnl::memory::data_type dnnl_type() {
  return std::is_same_v<T, float> ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;
}

/// How many threads a GEMM of this size is worth: one per
/// kMatmulWorkPerThread multiply-adds, at most `max_threads`.
int gemm_threads(const strata_tensor& a, const strata_tensor& y, int max_threads) {
  const int64_t work = plugin::numel(y) * a.shape[a.rank - 1];
  return static_cast<int>(std::clamp<int64_t>(work / kMatmulWorkPerThread, 1, max_threads));
}

/// oneDNN runs single-threaded on the calling thread: it reads the OpenMP
/// team size of the thread that calls it (and some implementations fix their
/// blocking from it at creation), and the plugin's GEMMs are split into
/// blocks on its own work pool instead (split_gemm below).
void dnnl_single_threaded() {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
}

/// Columns (or rows) below which a GEMM block costs more than it balances:
/// every block packs the whole of the other operand again (A for a column
/// block), so narrow blocks repeat that work. Measured on the bf16 step's
/// weight gradient (M = N = 1024, K = 256, 2 threads, oneDNN 2.6, Zen 4):
/// 1.30 ms in blocks of 512 columns, 1.40 ms in 256, 1.54 ms in 128.
constexpr int64_t kMinBlockExtent = 256;

/// Blocks are multiples of this many rows or columns, but the last.
constexpr int64_t kBlockAlign = 16;

/// How many blocks split_gemm cuts an extent into for `threads` threads:
/// one without a second thread (before 2026-11-27 even a one-thread GEMM was
/// cut into four blocks, which cost the bf16 step's GEMMs 5-15% against
/// libtorch's on the same oneDNN); else up to kChunksPerThread per thread,
/// so that a thread the system deschedules leaves its blocks to the others,
/// but none narrower than kMinBlockExtent, and at least one per thread.
int64_t gemm_chunks(int threads, int64_t extent) {
  if (threads <= 1) return 1;
  const int64_t most = std::min<int64_t>(int64_t{threads} * kChunksPerThread, (extent + kBlockAlign - 1) / kBlockAlign);
  return std::min<int64_t>(most, std::max<int64_t>(threads, extent / kMinBlockExtent));
}

/// One operand of a block: `t` narrowed to `len` along `dim` from `start`.
strata_tensor narrowed(const strata_tensor& t, int dim, int64_t start, int64_t len) {
  strata_tensor s = t;
  s.offset += start * t.strides[dim];
  s.shape[dim] = len;
  return s;
}

/// Runs y = a @ b as blocks on the work pool, each a single-threaded call of
/// `block(a, b, y, bias)` (bias narrowed too when given: linear's [N] row):
/// column blocks of b and y when N ≥ M — every block reads its own slice of
/// b once and all of a — else row blocks of a and y. Blocks are claimed, not
/// assigned (work_pool.hpp), so a GEMM, like the other loops, never waits
/// for a thread the system has descheduled, and one thread pool serves
/// every kernel (two pools, OpenMP's beside the plugin's, took each other's
/// cores: the two-thread bf16 step ran at 1.26x the one-thread speed, libtorch's at 1.75x).
/// Blocks are multiples of 16 rows or columns but the last. False when a
/// block returned false (no fast implementation for its layout).
template <class Block>
bool split_gemm(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y, const strata_tensor* bias,
                int max_threads, Block&& block) {
  const int r = y.rank;
  const int64_t M = y.shape[r - 2], N = y.shape[r - 1];
  const int threads = gemm_threads(a, y, max_threads);
  const bool by_columns = N >= M;
  const int64_t extent = by_columns ? N : M;
  const int64_t chunks = gemm_chunks(threads, extent);
  if (chunks <= 1) {
    dnnl_single_threaded();
    return block(a, b, y, bias);
  }
  const auto bound = [&](int64_t c) { return c >= chunks ? extent : extent * c / chunks / kBlockAlign * kBlockAlign; };
  std::atomic<bool> ok{true};
  for_each_chunk(chunks, threads, [&](int64_t c) {
    const int64_t start = bound(c), len = bound(c + 1) - start;
    if (len <= 0 || !ok.load(std::memory_order_relaxed)) return;
    dnnl_single_threaded();
    bool done = false;
    if (by_columns) {
      const strata_tensor bias_block = bias != nullptr ? narrowed(*bias, 0, start, len) : strata_tensor{};
      done = block(a, narrowed(b, r - 1, start, len), narrowed(y, r - 1, start, len),
                   bias != nullptr ? &bias_block : nullptr);
    } else {
      done = block(narrowed(a, r - 2, start, len), b, narrowed(y, r - 2, start, len), bias);
    }
    if (!done) ok.store(false, std::memory_order_relaxed);
  });
  return ok.load();
}

/// A matrix as BLAS sees it: row-major with leading dimension ld, or its
/// transpose ('T'); false when neither describes the strides.
bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, char& trans, int64_t& ld) {
  normalize_matrix(rows, cols, rs, cs);
  if (cs == 1 && rs >= cols) {
    trans = 'N';
    ld = rs;
  } else if (rs == 1 && cs >= rows) {
    trans = 'T';
    ld = cs;
  } else {
    return false;
  }
  return true;
}

/// Large f32 matrices go to dnnl_sgemm, oneDNN's BLAS-style entry: its jit
/// GEMM is 10-20% faster than the matmul primitive's brgemm kernels for
/// single matrices from ~128^3 up on AVX-512 (measured with oneDNN 2.6), and
/// needs no primitive. One call per batch matrix, on the calling thread.
/// False: not applicable.
bool sgemm_block(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y) {
  const int r = y.rank;
  const int64_t M = y.shape[r - 2], N = y.shape[r - 1], K = a.shape[r - 1];
  char ta = 0, tb = 0, ty = 0;
  int64_t lda = 0, ldb = 0, ldy = 0;
  if (!blas_layout(M, K, a.strides[r - 2], a.strides[r - 1], ta, lda) ||
      !blas_layout(K, N, b.strides[r - 2], b.strides[r - 1], tb, ldb) ||
      !blas_layout(M, N, y.strides[r - 2], y.strides[r - 1], ty, ldy) || ty != 'N') {
    return false;
  }
  const Layout<3> batches = batch_layout(y, a, b);
  bool ok = true;
  for_each_run(batches, 0, batches.numel(), [&](const int64_t* off, int64_t count) {
    for (int64_t t = 0; ok && t < count; ++t) {
      ok = dnnl_sgemm(ta, tb, M, N, K, 1.0f, data<const float>(a) + off[1] + t * batches.inner_stride(1), lda,
                      data<const float>(b) + off[2] + t * batches.inner_stride(2), ldb, 0.0f,
                      data<float>(y) + off[0] + t * batches.inner_stride(0), ldy) == dnnl_success;
    }
  });
  return ok;
}

/// y = a @ b through dnnl_sgemm when it serves the layout; false otherwise.
bool try_sgemm(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y, int max_threads) {
  const int r = y.rank;
  const int64_t M = y.shape[r - 2], N = y.shape[r - 1], K = a.shape[r - 1];
  if (M * N * K < kSgemmMinWork) return false;
  char tb = 0;
  int64_t ldb = 0;
  if (!blas_layout(K, N, b.strides[r - 2], b.strides[r - 1], tb, ldb)) return false;
  // A transposed B (Linear's x @ weight.mT()) is what dnnl_sgemm does worst:
  // K = N = 1024 took 0.96 / 1.70 ms at M = 64 / 256 against the matmul
  // primitive's 0.30 / 1.06 ms (2 threads, oneDNN 2.6, AVX-512); at
  // M = 1024 they tie. That layout goes to the primitive.
  if (tb == 'T') return false;
  return split_gemm(a, b, y, nullptr, max_threads,
                    [](const strata_tensor& ab, const strata_tensor& bb, const strata_tensor& yb,
                       const strata_tensor*) { return sgemm_block(ab, bb, yb); });
}

/// Runs one block on the oneDNN plan for its problem, single-threaded;
/// false when oneDNN has no fast implementation. `bias` (an [N] row) with
/// an epilogue only.
template <class T>
bool dnnl_block(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y, const strata_tensor* bias,
                Epilogue epilogue) {
  const auto plan = find_plan(describe(a, b, y), Scalar<T>::dtype, dnnl_type<T>(), 1, epilogue);
  if (!plan->usable) return false;
  dnnl::engine& engine = cpu_engine();
  thread_local dnnl::stream stream(engine);
  const auto handle = [](const strata_tensor& t) { return static_cast<void*>(data<T>(t)); };
  dnnl::memory am(plan->a, engine, handle(a)), bm(plan->b, engine, handle(b)), ym(plan->y, engine, handle(y));
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, ym}};
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, dnnl::memory(plan->bias, engine, handle(*bias)));
  if (const size_t bytes = plan->scratchpad.get_size(); bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(plan->scratchpad, engine, scratchpad(bytes)));
  }
  plan->primitive.execute(stream, args);
  stream.wait();
  return true;
}

/// Runs y = a @ b (+ bias, epilogue) on oneDNN in blocks; false when it has
/// no fast implementation for the layout.
template <class T>
bool try_dnnl(const strata_tensor& a, const strata_tensor& b, const strata_tensor& y, int max_threads,
              const strata_tensor* bias = nullptr, Epilogue epilogue = Epilogue::none) {
  return split_gemm(a, b, y, bias, max_threads,
                    [epilogue](const strata_tensor& ab, const strata_tensor& bb, const strata_tensor& yb,
                               const strata_tensor* biasb) { return dnnl_block<T>(ab, bb, yb, biasb, epilogue); });
}

/// A compact copy of t in element type To, owning its memory.
template <class To>
struct CompactCopy {
  std::vector<To> storage;
  strata_tensor tensor;

  template <class From>
  CompactCopy(const strata_tensor& src, std::type_identity<From>, int threads)
      : storage(static_cast<size_t>(plugin::numel(src))),
        tensor(compact_tensor(storage.data(), Scalar<To>::dtype, src.rank, src.shape)) {
    if constexpr (std::is_same_v<To, From>) {
      copy_tensor(tensor, src, threads);
    } else {
      const strata_tensor* const operands[] = {&src};
      map<To, From>(tensor, operands, threads, [](auto v) { return convert<compute_t<To>>(v); });
    }
  }
};

/// y = a @ b through compact f32 copies (f16, and bf16 where oneDNN lacks it).
template <class T>
strata_status matmul_via_f32(const KernelCall& call, const strata_tensor& a, const strata_tensor& b,
                             const strata_tensor& y) {
  const CompactCopy<float> af(a, std::type_identity<T>{}, call.threads), bf(b, std::type_identity<T>{}, call.threads);
  std::vector<float> ys(static_cast<size_t>(plugin::numel(y)));
  const strata_tensor yf = compact_tensor(ys.data(), STRATA_F32, y.rank, y.shape);
  if (!try_sgemm(af.tensor, bf.tensor, yf, call.threads) && !try_dnnl<float>(af.tensor, bf.tensor, yf, call.threads)) {
    return fail(call.error, STRATA_ERROR_INTERNAL, "%s: oneDNN rejected a compact f32 problem", STRATA_OP_MATMUL);
  }
  const strata_tensor* const operands[] = {&yf};
  map<T, float>(y, operands, call.threads, [](float v) { return v; });
  return STRATA_OK;
}

template <class T>
struct Matmul {
  static constexpr const char* name = STRATA_OP_MATMUL;
  using signature = T(T, T);
  static constexpr uint32_t flags = kStrided;

  static strata_status run(const KernelCall& call) {
    const strata_tensor &a = call.in(0), &b = call.in(1), &y = call.out();
    if (!matmul_shapes_ok(a, b, y)) return refuse_matmul_shapes(call.error, name, a, b, y);
    if (outer_product<T>(a, b, y, call.threads)) return STRATA_OK;
    if (gemm_small<T>(a, b, y)) return STRATA_OK;
    if constexpr (std::is_same_v<T, double>) {
      gemm_f64(a, b, y, call.threads);
      return STRATA_OK;
    } else if constexpr (std::is_same_v<T, f16>) {
      return matmul_via_f32<T>(call, a, b, y);
    } else {
      if constexpr (std::is_same_v<T, float>) {
        if (try_sgemm(a, b, y, call.threads)) return STRATA_OK;
      }
      if (try_dnnl<T>(a, b, y, call.threads)) return STRATA_OK;
      const CompactCopy<T> ac(a, std::type_identity<T>{}, call.threads), bc(b, std::type_identity<T>{}, call.threads);
      if (try_dnnl<T>(ac.tensor, bc.tensor, y, call.threads)) return STRATA_OK;
      if constexpr (!std::is_same_v<T, float>) return matmul_via_f32<T>(call, a, b, y);
      return fail(call.error, STRATA_ERROR_UNSUPPORTED, "%s: oneDNN has no implementation for this f32 layout", name);
    }
  }
};

/// strata::linear (docs/ops.md): y = act(x @ wᵀ + bias) as one oneDNN matmul
/// with the bias and the relu as its epilogue. Operands arrive compact
/// (no strided flag): x [..., K] is read as [M, K], w [N, K] as the
/// column-major [K, N] matrix wᵀ. f32 and bf16; a layout oneDNN has no fast
/// implementation for is declined, and the core decomposes the op.
template <class T>
struct Linear {
  static constexpr const char* name = STRATA_OP_LINEAR;
  using signature = T(T, T, T);
  static constexpr uint32_t flags = 0;

  static strata_status run(const KernelCall& call) {
    const strata_tensor &x = call.in(0), &w = call.in(1), &bias = call.in(2), &y = call.out();
    const strata_attr* act = plugin::attr_of_kind(call.abi, "activation", STRATA_ATTR_STRING);
    const std::string_view activation = act != nullptr && act->string != nullptr ? act->string : "none";
    if (activation != "none" && activation != "relu") {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: unknown activation \"%.*s\"", name,
                  static_cast<int>(activation.size()), activation.data());
    }
    const int r = x.rank;
    if (r < 1 || w.rank != 2 || bias.rank != 1 || y.rank != r || x.shape[r - 1] != w.shape[1] ||
        bias.shape[0] != w.shape[0] || y.shape[r - 1] != w.shape[0]) {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: operands %s, %s, %s -> %s do not form [..., K], [N, K], [N] -> [..., N]", name,
                  plugin::describe(x).c_str(), plugin::describe(w).c_str(), plugin::describe(bias).c_str(),
                  plugin::describe(y).c_str());
    }
    const int64_t K = w.shape[1], N = w.shape[0], M = plugin::numel(y) / N;
    // x as [M, K], wᵀ as the column-major [K, N] view of w, y as [M, N].
    const int64_t x_dims[2] = {M, K}, y_dims[2] = {M, N};
    const strata_tensor x2 = compact_tensor(data<T>(x), Scalar<T>::dtype, 2, x_dims);
    const strata_tensor y2 = compact_tensor(data<T>(y), Scalar<T>::dtype, 2, y_dims);
    strata_tensor wt = w;
    wt.shape[0] = K;
    wt.shape[1] = N;
    wt.strides[0] = 1;
    wt.strides[1] = K;
    const Epilogue epilogue = activation == "relu" ? Epilogue::bias_relu : Epilogue::bias;
    if (try_dnnl<T>(x2, wt, y2, call.threads, &bias, epilogue)) return STRATA_OK;
    return fail(call.error, STRATA_ERROR_UNSUPPORTED, "%s: oneDNN has no fast implementation for %s", name,
                plugin::describe(x).c_str());
  }
};

}  // namespace

strata_status refuse_matmul_shapes(strata_error* error, const char* op, const strata_tensor& a,
                                   const strata_tensor& b, const strata_tensor& y) {
  return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
              "%s: operand shapes %s @ %s -> %s do not form [..., M, K] @ [..., K, N] -> [..., M, N]", op,
              plugin::describe(a).c_str(), plugin::describe(b).c_str(), plugin::describe(y).c_str());
}

void clear_matmul_cache() {
  PlanCache& cache = plan_cache();
  const std::lock_guard lock(cache.mutex);
  cache.plans.clear();
}

void register_matmul_kernels(plugin::KernelTable& table) {
  for_each_type(FloatTypes{}, [&]<class T>() { add<Matmul<T>>(table); });
  add<Linear<float>>(table);
  add<Linear<bf16>>(table);
}

}  // namespace strata::cpu
