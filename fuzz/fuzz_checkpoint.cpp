// fuzz_checkpoint.cpp — bytes → a file → load_tensors, then
// load_training_state into a small model with an Adam optimizer and a
// GradScaler. A strata::Error (SerializationError and kin) is the expected
// answer to a damaged file; anything else is a bug.
#include "fuzz_common.hpp"

#include <strata/strata.hpp>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata_fuzz::quiet_runtime();
  const std::filesystem::path path = strata_fuzz::write_temp("strata_fuzz_checkpoint", data, size);
  try {
    strata::LoadedTensors loaded = strata::load_tensors(path);
    (void)loaded;
  } catch (const strata::Error&) {
  }
  try {
    auto model = strata_fuzz::small_model();
    strata::nn::Adam adam(model->parameters(), {.lr = 0.01});
    strata::GradScaler scaler;
    strata::TrainingStateExtras extras = strata::load_training_state(path, *model, &adam, &scaler);
    (void)extras;
    // A state that loaded must be usable: one step with it.
    adam.zero_grad();
    strata::Tensor loss = strata::sum((*model)(strata::ones({2, 3})));
    scaler.scale(loss).backward();
    (void)scaler.step(model->parameters(), [&] { adam.step(); });
    scaler.update();
  } catch (const strata::Error&) {
  }
  return 0;
}
