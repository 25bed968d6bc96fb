// The SDK's typed kernel spec (strata/plugin/kernel.hpp): the signature text
// derives from the C++ types, a call that does not fit the signature never
// reaches the body and is refused naming the op and the operand at fault,
// and a body's exception becomes a status.
#include <strata/plugin/kernel.hpp>

#include <gtest/gtest.h>

#include <complex>
#include <stdexcept>
#include <string>

namespace {

using strata::plugin::Signature;
using strata::plugin::SignatureOf;
using strata::plugin::TypeList;

/// A backend's own storage type, named through STRATA_PLUGIN_DTYPE.
struct my_half {
  uint16_t bits;
};

}  // namespace

STRATA_PLUGIN_DTYPE(my_half, STRATA_F16);

namespace {

int g_body_runs = 0;

strata_status add_body(const strata_kernel_call& c) {
  ++g_body_runs;
  return c.n_inputs == 2 ? STRATA_OK : STRATA_ERROR_INTERNAL;
}

strata_status throwing_body(const strata_kernel_call&) { throw std::runtime_error("the device is on fire"); }

/// A call of `op` with the given operands (pointers kept by the caller).
struct Call {
  strata_tensor in[3]{}, out[2]{};
  const strata_tensor* in_ptr[3] = {&in[0], &in[1], &in[2]};
  const strata_tensor* out_ptr[2] = {&out[0], &out[1]};
  strata_error error{};
  strata_kernel_call call{};

  Call(const char* op, std::initializer_list<strata_dtype> ins, std::initializer_list<strata_dtype> outs) {
    int k = 0;
    for (strata_dtype d : ins) in[k++] = tensor(d);
    call.n_inputs = k;
    k = 0;
    for (strata_dtype d : outs) out[k++] = tensor(d);
    call.n_outputs = k;
    error.struct_size = sizeof(error);
    call.struct_size = sizeof(call);
    call.op = op;
    call.inputs = in_ptr;
    call.outputs = out_ptr;
    call.error = &error;
  }
  static strata_tensor tensor(strata_dtype d) {
    strata_tensor t{};
    t.struct_size = sizeof(t);
    t.dtype = d;
    t.rank = 1;
    t.shape[0] = 4;
    t.strides[0] = 1;
    return t;
  }
  std::string message() const { return error.message; }
};

TEST(SdkKernel, TheSignatureTextDerivesFromTheTypes) {
  EXPECT_EQ((SignatureOf<float(float, float)>::text()), "f32,f32->f32");
  EXPECT_EQ((SignatureOf<bool(double, double)>::text()), "f64,f64->bool");
  EXPECT_EQ(SignatureOf<int64_t()>::text(), "->i64");
  EXPECT_EQ((SignatureOf<my_half(my_half, bool, my_half)>::text()), "f16,bool,f16->f16");
  EXPECT_EQ((SignatureOf<std::complex<float>(std::complex<double>)>::text()), "c128->c64");
  using TwoOut = Signature<TypeList<float, int32_t>, TypeList<float, int64_t>>;
  EXPECT_EQ(TwoOut::text(), "f32,i32->f32,i64");
  EXPECT_EQ(TwoOut::n_in, 2);
  EXPECT_EQ(TwoOut::n_out, 2);
}

TEST(SdkKernel, ACallThatFitsRunsTheBodyAndOneThatDoesNotIsRefusedNamingTheOperand) {
  using Sig = SignatureOf<float(float, float)>;
  constexpr strata_kernel_fn fn = &strata::plugin::checked_kernel<Sig, add_body>;
  g_body_runs = 0;
  Call ok("strata::add", {STRATA_F32, STRATA_F32}, {STRATA_F32});
  EXPECT_EQ(fn(&ok.call), STRATA_OK);
  EXPECT_EQ(g_body_runs, 1);

  Call dtype("strata::add", {STRATA_F32, STRATA_F64}, {STRATA_F32});
  EXPECT_EQ(fn(&dtype.call), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dtype.message(), "strata::add (f32,f32->f32): input 1 is f64, the kernel takes f32");

  Call count("strata::add", {STRATA_F32}, {STRATA_F32});
  EXPECT_EQ(fn(&count.call), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(count.message(), "strata::add (f32,f32->f32): expected 2 inputs and 1 outputs, got 1 and 1");

  Call rank("strata::add", {STRATA_F32, STRATA_F32}, {STRATA_F32});
  rank.out[0].rank = STRATA_MAX_RANK + 1;
  EXPECT_EQ(fn(&rank.call), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(rank.message().find("output 0 has rank"), std::string::npos) << rank.message();

  Call small_descriptor("strata::add", {STRATA_F32, STRATA_F32}, {STRATA_F32});
  small_descriptor.in[0].struct_size = 8;
  EXPECT_EQ(fn(&small_descriptor.call), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(small_descriptor.message().find("input 0 has descriptor struct_size 8"), std::string::npos);

  Call null_operand("strata::add", {STRATA_F32, STRATA_F32}, {STRATA_F32});
  null_operand.out_ptr[0] = nullptr;
  EXPECT_EQ(fn(&null_operand.call), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(null_operand.message(), "strata::add (f32,f32->f32): output 0 is NULL");

  Call small_call("strata::add", {STRATA_F32, STRATA_F32}, {STRATA_F32});
  small_call.call.struct_size = 16;
  EXPECT_EQ(fn(&small_call.call), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(small_call.message().find("kernel call struct_size 16 is below"), std::string::npos);
  EXPECT_EQ(fn(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(g_body_runs, 1) << "no refused call reached the body";
}

TEST(SdkKernel, ABodysExceptionBecomesAStatusNamingTheOp) {
  using Sig = SignatureOf<float(float)>;
  Call c("acme::glow", {STRATA_F32}, {STRATA_F32});
  EXPECT_EQ((strata::plugin::checked_kernel<Sig, throwing_body>(&c.call)), STRATA_ERROR_INTERNAL);
  EXPECT_EQ(c.message(), "acme::glow: the device is on fire");
}

TEST(SdkKernel, AddKernelRegistersTheTextAndTheCheckedEntry) {
  strata::plugin::KernelTable table;
  strata::plugin::add_kernel<SignatureOf<float(float, float)>, add_body>(table, "strata::add");
  ASSERT_EQ(table.size(), 1u);
  const strata_kernel_entry& e = *table.data()[0];
  EXPECT_STREQ(e.op, "strata::add");
  EXPECT_STREQ(e.signature, "f32,f32->f32");
  EXPECT_EQ(e.flags, static_cast<uint32_t>(STRATA_KERNEL_STRIDED_INPUTS));
  Call bad("strata::add", {STRATA_I32, STRATA_F32}, {STRATA_F32});
  EXPECT_EQ(e.fn(&bad.call), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bad.message(), "strata::add (f32,f32->f32): input 0 is i32, the kernel takes f32");
}

TEST(SdkKernel, TheRunTimeFormChecksTheSameThings) {
  const strata_dtype in[] = {STRATA_F16, STRATA_I64};
  const strata_dtype out[] = {STRATA_F16};
  Call ok("strata::gather", {STRATA_F16, STRATA_I64}, {STRATA_F16});
  EXPECT_TRUE(strata::plugin::operands_match(ok.call, in, 2, out, 1));
  Call bad("strata::gather", {STRATA_F16, STRATA_I32}, {STRATA_F16});
  EXPECT_FALSE(strata::plugin::operands_match(bad.call, in, 2, out, 1));
  EXPECT_EQ(strata::plugin::refuse_call(&bad.call, "strata::gather", in, 2, out, 1), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bad.message(), "strata::gather (f16,i64->f16): input 1 is i32, the kernel takes i64");
  bad.in_ptr[1] = nullptr;
  EXPECT_FALSE(strata::plugin::operands_match(bad.call, in, 2, out, 1));
}

}  // namespace
