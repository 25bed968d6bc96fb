// make_seeds.cpp — writes the binary seeds of fuzz/corpus from the current
// file formats: traced graphs for fuzz_graph, a tensors file and a training
// state (small_model + Adam + GradScaler, two steps trained) for
// fuzz_checkpoint. Run after a format change:
//
//   build/fuzz/bin/fuzz/fuzz_make_seeds fuzz/corpus
#include "fuzz_common.hpp"

#include <strata/strata.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus folder>\n", argv[0]);
    return 2;
  }
  namespace fs = std::filesystem;
  using namespace strata;
  const fs::path root = argv[1];
  strata_fuzz::quiet_runtime();
  manual_seed(7);

  fs::create_directories(root / "fuzz_graph");
  {
    auto model = strata_fuzz::small_model();
    Graph g = trace([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{(*model)(in[0])}; },
                    {randn({2, 3})});
    g.save(root / "fuzz_graph" / "small_mlp.json");
  }
  {
    Graph g = trace(
        [](const std::vector<Tensor>& in) {
          Tensor m = matmul(in[0], in[1].transpose(0, 1));
          return std::vector<Tensor>{sum(exp(m) * 0.5, {1}), m.reshape({-1})};
        },
        {randn({2, 3}), randn({4, 3})});
    g.save(root / "fuzz_graph" / "two_inputs.json");
  }

  fs::create_directories(root / "fuzz_checkpoint");
  save_tensors(root / "fuzz_checkpoint" / "tensors.safetensors",
               {{"w", randn({2, 3})}, {"i", arange(4)}, {"h", ones({3}).to(DType::f16)}}, {{"note", "seed"}});
  {
    auto model = strata_fuzz::small_model();
    nn::Adam adam(model->parameters(), {.lr = 0.01});
    GradScaler scaler({.init_scale = 1024.0});
    Tensor x = randn({4, 3});
    for (int step = 0; step < 2; ++step) {
      adam.zero_grad();
      Tensor loss = sum((*model)(x) * (*model)(x));
      scaler.scale(loss).backward();
      (void)scaler.step(model->parameters(), [&] { adam.step(); });
      scaler.update();
    }
    save_training_state(root / "fuzz_checkpoint" / "training_state.safetensors", *model, &adam,
                        scaler.state_dict(), {{"epoch", "2"}});
  }
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
