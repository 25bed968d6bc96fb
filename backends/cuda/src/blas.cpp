// blas.cpp — cuBLAS opened at run time (see blas.hpp), and the per-device
// handle. The HIP build compiles only destroy_blas (nothing to destroy) and
// reports cuBLAS as absent.
#include "blas.hpp"

#include <dlfcn.h>

#include <mutex>

#include "entry_points.hpp"

#if STRATA_GPU_HAS_BLAS
#include <cublas_api.h>
#endif

namespace strata::gpu {

#if !STRATA_GPU_HAS_BLAS

bool blas_available(std::string* why) {
  *why = "no BLAS library in the HIP build (Debian 12 has neither hipBLAS nor rocBLAS)";
  return false;
}
bool blas_gemm(Device&, cudaStream_t, const GemmCall&, std::string* why) { return blas_available(why); }
void destroy_blas(Device&) {}

#else

namespace {

struct Blas {
  bool ok = false;
  std::string why;
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  const char* (*status_string)(cublasStatus_t) = nullptr;
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                         const void*, cudaDataType, int, long long, const void*, cudaDataType, int, long long,
                         const void*, void*, cudaDataType, int, long long, int, cublasComputeType_t,
                         cublasGemmAlgo_t) = nullptr;
};

template <class F>
bool bind(void* lib, const char* name, F& out, std::string* why) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (out == nullptr) *why = std::string("cuBLAS has no symbol ") + name;
  return out != nullptr;
}

const Blas& blas() {
  static const Blas b = [] {
    Blas r;
    void* lib = nullptr;
    std::string tried;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      const char* e = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (e != nullptr ? e : name);
    }
    if (lib == nullptr) {
      r.why = "cannot load cuBLAS: " + tried;
      return r;
    }
    r.ok = bind(lib, "cublasCreate_v2", r.create, &r.why) && bind(lib, "cublasDestroy_v2", r.destroy, &r.why) &&
           bind(lib, "cublasSetStream_v2", r.set_stream, &r.why) &&
           bind(lib, "cublasGetStatusString", r.status_string, &r.why) &&
           bind(lib, "cublasGemmStridedBatchedEx", r.gemm, &r.why);
    return r;
  }();
  return b;
}

}  // namespace

bool blas_available(std::string* why) {
  const Blas& b = blas();
  if (!b.ok) *why = b.why;
  return b.ok;
}

bool blas_gemm(Device& d, cudaStream_t stream, const GemmCall& g, std::string* why) {
  const Blas& b = blas();
  if (!b.ok) {
    *why = b.why;
    return false;
  }
  cudaDataType type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* alpha = &one_f;
  const void* beta = &zero_f;
  switch (g.dtype) {
    case STRATA_F32: break;
    case STRATA_F16: type = CUDA_R_16F; break;
    case STRATA_BF16: type = CUDA_R_16BF; break;
    case STRATA_F64:
      type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      alpha = &one_d;
      beta = &zero_d;
      break;
    default: *why = "cuBLAS path has no dtype " + std::string(plugin::dtype_name(g.dtype)); return false;
  }
  std::lock_guard lock(d.blas_mutex);
  auto handle = static_cast<cublasHandle_t>(d.blas);
  if (handle == nullptr) {
    if (cublasStatus_t s = b.create(&handle); s != CUBLAS_STATUS_SUCCESS) {
      *why = std::string("cublasCreate: ") + b.status_string(s);
      return false;
    }
    d.blas = handle;
  }
  if (cublasStatus_t s = b.set_stream(handle, stream); s != CUBLAS_STATUS_SUCCESS) {
    *why = std::string("cublasSetStream: ") + b.status_string(s);
    return false;
  }
  const cublasStatus_t s =
      b.gemm(handle, g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n,
             g.k, alpha, g.a, type, g.lda, g.stride_a, g.b, type, g.ldb, g.stride_b, beta, g.c, type, g.ldc,
             g.stride_c, g.count, compute, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    *why = std::string("cublasGemmStridedBatchedEx: ") + b.status_string(s);
    return false;
  }
  return true;
}

void destroy_blas(Device& d) {
  if (d.blas == nullptr) return;
  if (blas().ok) blas().destroy(static_cast<cublasHandle_t>(d.blas));
  d.blas = nullptr;
}

#endif

}  // namespace strata::gpu
