// Dtypes per device, on the "mini" test accelerator (stores f32, i64 and
// bool): no tensor of another dtype is ever made on it. Creating one, moving
// one there, casting to one there or an op whose result would be one is a
// DTypeError naming the op, the device and the dtype and listing what mini:0
// stores; nothing falls back to the CPU for it, and the inputs and the device
// stay usable. The library's own host scalars (optimizer and GradScaler
// state) stay off such a device.
#include <strata/strata.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "mini_fixture.hpp"

namespace {

using namespace strata;

constexpr const char* kStores = "(it stores f32, i64, bool)";

class DeviceDtypes : public strata_test::OnMini {
 protected:
  /// The DTypeError's message of `body`, or a note that it threw none.
  static std::string error_of(const std::function<void()>& body) {
    try {
      body();
    } catch (const DTypeError& e) {
      return e.what();
    }
    return "(no DTypeError)";
  }

  /// Whether anything fell back to the CPU with `dtype` in its signature.
  static bool fell_back_with(DType dtype) {
    for (const FallbackRecord& r : runtime().fallback_stats()) {
      if (r.signature.find(dtype_name(dtype)) != std::string::npos) return true;
    }
    return false;
  }

  Device cpu{"cpu:0"};
};

TEST_F(DeviceDtypes, DeviceInfoListsWhatTheDeviceStores) {
  EXPECT_EQ(runtime().device_info(mini).dtypes, (std::vector<DType>{DType::f32, DType::i64, DType::boolean}));
}

TEST_F(DeviceDtypes, CreatingAnUnstoredDtypeNamesOpDeviceAndDtype) {
  for (DType dtype : {DType::f64, DType::f16, DType::bf16, DType::i32}) {
    const TensorOptions on_mini{.dtype = dtype, .device = mini};
    const std::string tail = ": mini:0 cannot store " + std::string(dtype_name(dtype)) + " " + kStores;
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const std::vector<double> values{1, 2, 3};
    const std::vector<uint8_t> bytes(3 * dtype_size(dtype), 0);
    const std::vector<std::pair<std::string, std::function<void()>>> cases = {
        {"zeros", [&] { (void)zeros({2, 3}, on_mini); }},
        {"ones", [&] { (void)ones({2}, on_mini); }},
        {"full", [&] { (void)full({4}, 0.5, on_mini); }},
        {"full", [&] { (void)scalar_tensor(0.5, on_mini); }},
        {"empty", [&] { (void)empty({2, 2}, on_mini); }},
        {"from_data", [&] { (void)from_data(std::span<const double>(values), {3}, on_mini); }},
        {"from_bytes", [&] { (void)from_bytes(bytes, {3}, on_mini); }},
        {"arange", [&] { (void)arange(0.0, 3.0, 1.0, on_mini); }},
    };
    for (const auto& [op, body] : cases) EXPECT_EQ(error_of(body), op + tail);
    if (is_floating(dtype)) {
      EXPECT_EQ(error_of([&] { (void)rand({3}, on_mini); }), "rand" + tail);
      EXPECT_EQ(error_of([&] { (void)randn({3}, on_mini); }), "randn" + tail);
    }
  }
  // zeros_like of a CPU tensor moved nowhere: still the CPU's dtype rules.
  EXPECT_EQ(zeros_like(zeros({2}, {.dtype = DType::f64, .device = cpu})).device(), cpu);
  EXPECT_FALSE(fell_back_with(DType::f64));
  EXPECT_FALSE(fell_back_with(DType::f16));
}

TEST_F(DeviceDtypes, MovingAnUnstoredDtypeThereIsADTypeError) {
  Tensor host = full({2, 2}, 0.125, {.dtype = DType::f64, .device = cpu});
  host.set_requires_grad(true);
  EXPECT_EQ(error_of([&] { (void)host.to(mini); }), std::string("to_device: mini:0 cannot store f64 ") + kStores);
  // The input is unchanged and still works, on the CPU and with autograd.
  EXPECT_EQ(host.to_vector<double>(), (std::vector<double>(4, 0.125)));
  Tensor loss = sum(host * host);
  loss.backward();
  EXPECT_EQ(host.grad().to_vector<double>(), (std::vector<double>(4, 0.25)));
  // A stored dtype moves.
  EXPECT_EQ(cast(host.detach(), DType::f32).to(mini).to_vector<float>(), (std::vector<float>(4, 0.125f)));
}

TEST_F(DeviceDtypes, OpsWhoseResultTheDeviceCannotStoreFailBeforeAnyFallback) {
  Tensor x = full({3}, 1.5, {.device = mini});
  Tensor i = full({3}, 2.0, {.dtype = DType::i64, .device = mini});
  for (DType dtype : {DType::f64, DType::f16, DType::i32}) {
    const std::string m = error_of([&] { (void)cast(x, dtype); });
    EXPECT_NE(m.find("cast(f32[3]) on mini:0: mini:0 cannot store " + std::string(dtype_name(dtype)) + " " + kStores),
              std::string::npos)
        << m;
    EXPECT_NE(error_of([&] { (void)x.to(dtype); }).find("cannot store"), std::string::npos);
  }
  // A composite (mean decomposes into primitives) of stored dtypes works.
  EXPECT_FLOAT_EQ(mean(cast(i, DType::f32)).item<float>(), 2.0f);
  // Nothing was sent to the CPU for the refused calls.
  EXPECT_FALSE(fell_back_with(DType::f64));
  EXPECT_FALSE(fell_back_with(DType::f16));
  EXPECT_FALSE(fell_back_with(DType::i32));
  // The inputs and the device carry on.
  EXPECT_EQ((x + x).to_vector<float>(), (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(cast(i, DType::f32).to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ((x + x).device(), mini);
}

TEST_F(DeviceDtypes, FallbackResultsComeBackInAStoredDtype) {
  // mul has no kernel on mini: it runs on cpu:0 and its f32 result comes back.
  Tensor a = full({2}, 3.0, {.device = mini});
  Tensor c = a * a;
  EXPECT_EQ(c.device(), mini);
  EXPECT_EQ(c.dtype(), DType::f32);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{9, 9}));
  // Comparisons come back as bool, which mini stores.
  EXPECT_EQ(lt(a, c).dtype(), DType::boolean);
}

// The digits demo's f64 fill on vulkan:0: optimizer and GradScaler state
// dicts held their f64 scalars on the default device, and
// load_training_state read them onto it. They live on cpu:0 now: a training
// state of parameters on mini:0, the default device, saves and loads.
TEST_F(DeviceDtypes, TrainingStateOfParametersOnADeviceWithoutF64) {
  struct RestoreDefault {
    Device previous = runtime().default_device();
    ~RestoreDefault() { runtime().set_default_device(previous); }
  } restore;
  runtime().set_default_device(mini);
  nn::Linear model(3, 2);
  model.to(mini);
  nn::Adam opt(model.parameters(), {.lr = 0.01});
  GradScaler scaler;
  Tensor x = full({4, 3}, 0.5, {.device = mini});
  Tensor loss = sum(model(x));
  loss.backward();
  opt.step();
  for (const auto& [name, t] : opt.state_dict()) {
    if (t.dtype() == DType::f64) {
      EXPECT_EQ(t.device(), cpu) << name;
    }
  }
  for (const auto& [name, t] : scaler.state_dict()) {
    EXPECT_EQ(t.device(), cpu) << name;
  }
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("strata_dtypes_" + std::to_string(::getpid()) + ".st");
  save_training_state(file, model, &opt, scaler.state_dict());
  nn::Linear reloaded(3, 2);
  reloaded.to(mini);
  nn::Adam reloaded_opt(reloaded.parameters(), {.lr = 0.5});
  GradScaler reloaded_scaler;
  load_training_state(file, reloaded, &reloaded_opt, &reloaded_scaler);
  std::filesystem::remove(file);
  EXPECT_DOUBLE_EQ(reloaded_opt.lr(), 0.01);
  EXPECT_EQ(reloaded.weight.device(), mini);
  EXPECT_EQ(reloaded.weight.to_vector<float>(), model.weight.to_vector<float>());
  EXPECT_FALSE(fell_back_with(DType::f64)) << "an f64 tensor was made on mini:0";
}

}  // namespace
