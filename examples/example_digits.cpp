// example_digits — trains an MLP classifier on the UCI handwritten digits on
// the device the configuration selects, optionally with activation
// checkpointing and mixed precision; saves a checkpoint, reloads it into a
// fresh model and checks the predictions are identical; prints the test
// accuracy as its last line: test_accuracy=0.9xx.
#include "digits_data.hpp"

#include <CLI/CLI.hpp>
#include <strata/strata.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

namespace {

using namespace strata;

/// 64 -> hidden -> hidden -> 10 with ReLU; the hidden blocks can be
/// checkpointed (recomputed in backward instead of kept).
class DigitsMlp : public nn::Module {
 public:
  DigitsMlp(int64_t hidden, bool checkpointed) : checkpointed_(checkpointed) {
    l1_ = register_module("l1", std::make_shared<nn::Linear>(64, hidden));
    l2_ = register_module("l2", std::make_shared<nn::Linear>(hidden, hidden));
    l3_ = register_module("l3", std::make_shared<nn::Linear>(hidden, 10));
  }
  Tensor forward(const Tensor& x) override {
    auto block = [this](const Tensor& in) { return relu((*l2_)(relu((*l1_)(in)))); };
    Tensor h = checkpointed_ && is_training() ? checkpoint(block, x) : block(x);
    return (*l3_)(h);
  }
  std::string name() const override { return "DigitsMlp"; }

 private:
  bool checkpointed_;
  std::shared_ptr<nn::Linear> l1_, l2_, l3_;
};

double accuracy(nn::Module& model, const digits::Split& split, Tensor* predictions = nullptr) {
  NoGradGuard no_grad;
  model.eval();
  Tensor pred = argmax(model(split.x), 1);
  model.train();
  if (predictions != nullptr) *predictions = pred;
  return mean(cast(eq(pred, split.y), DType::f32)).item<double>();
}

void progress(int epoch, int epochs, int64_t done, int64_t total, double loss, bool quiet) {
  if (quiet) return;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
  std::fprintf(stderr, "\repoch %3d/%d [%s%s] %4lld/%lld loss %.4f", epoch, epochs, std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), static_cast<long long>(done), static_cast<long long>(total),
               loss);
  if (done == total) std::fprintf(stderr, "\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train an MLP on the UCI handwritten digits with Strata"};
  int epochs = 30;
  int64_t batch = 64;
  int64_t hidden = 128;
  double lr = 3e-3;
  bool use_checkpoint = false;
  std::string amp = "off";
  std::string config;
  std::string device_flag;
  std::string data;
  std::string save = "";
  bool quiet = false;
  uint64_t seed = 0;
  app.add_option("--epochs", epochs, "training epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--hidden", hidden, "hidden layer width")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "Adam learning rate")->check(CLI::PositiveNumber);
  app.add_flag("--checkpoint", use_checkpoint, "recompute the hidden block in backward (activation checkpointing)");
  app.add_option("--amp", amp, "mixed precision: off, bf16 or f16 (with dynamic loss scaling)")
      ->check(CLI::IsMember({"off", "bf16", "f16"}));
  app.add_option("--config", config, "configuration file (default: the built-in search)");
  app.add_option("--device", device_flag, "device id, e.g. cpu:0 (default: the configuration's choice)");
  app.add_option("--data", data, "path of digits.csv.gz");
  app.add_option("--save", save, "checkpoint file (default: a temporary file, removed at exit)");
  app.add_option("--seed", seed, "seed for initialisation, shuffling and the split");
  app.add_flag("--quiet", quiet, "no progress bars");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!config.empty()) runtime().load_config(config);
    Device device = device_flag.empty() ? runtime().default_device() : Device(device_flag);
    digits::Dataset ds = digits::load(digits::data_file(data), device, 0.2, seed);
    std::fprintf(stderr, "device %s (%s); %lld training and %lld test images; checkpointing %s, amp %s\n",
                 device.str().c_str(), runtime().device_info(device).name.c_str(),
                 static_cast<long long>(ds.train.x.size(0)), static_cast<long long>(ds.test.x.size(0)),
                 use_checkpoint ? "on" : "off", amp.c_str());

    manual_seed(seed);
    DigitsMlp model(hidden, use_checkpoint);
    model.to(device);
    nn::Adam opt(model.parameters(), {.lr = lr});
    nn::CosineAnnealingLR schedule(opt, epochs);
    GradScaler scaler({.enabled = amp == "f16"});  // bf16 has f32's range: no scaling needed
    std::optional<AutocastOptions> autocast;
    if (amp != "off") autocast = AutocastOptions{.dtype = amp == "bf16" ? DType::bf16 : DType::f16, .device = device};

    int64_t n = ds.train.x.size(0);
    std::mt19937_64 rng(seed + 1);
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    auto start = std::chrono::steady_clock::now();
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      std::shuffle(order.begin(), order.end(), rng);
      Tensor perm = from_data(order, {n}, {.dtype = DType::i64, .device = device});
      double loss_sum = 0.0;
      int64_t batches = 0;
      for (int64_t b = 0; b < n; b += batch) {
        int64_t e = std::min(n, b + batch);
        Tensor idx = perm.slice(0, b, e);
        Tensor xb = index_select(ds.train.x, 0, idx);
        Tensor yb = index_select(ds.train.y, 0, idx);
        opt.zero_grad();
        Tensor loss;
        {
          std::optional<Autocast> scope;
          if (autocast) scope.emplace(*autocast);
          loss = nn::functional::cross_entropy(cast(model(xb), DType::f32), yb);
        }
        scaler.scale(loss).backward();
        scaler.step(model.parameters(), [&] { opt.step(); });
        scaler.update();
        loss_sum += loss.item<double>();
        ++batches;
        progress(epoch, epochs, e, n, loss_sum / static_cast<double>(batches), quiet);
      }
      schedule.step();
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "trained %d epochs in %.2f s (%.1f ms per epoch)\n", epochs, seconds,
                 1000.0 * seconds / epochs);

    // Save, reload into a fresh model, and compare predictions.
    Tensor before;
    double acc = accuracy(model, ds.test, &before);
    std::filesystem::path file =
        save.empty() ? std::filesystem::temp_directory_path() / ("strata_digits_" + std::to_string(::getpid()) + ".st")
                     : std::filesystem::path(save);
    save_training_state(file, model, &opt, scaler.state_dict(), {{"example", "digits"}});
    DigitsMlp reloaded(hidden, use_checkpoint);
    reloaded.to(device);
    nn::Adam reloaded_opt(reloaded.parameters(), {.lr = lr});
    load_training_state(file, reloaded, &reloaded_opt);
    if (save.empty()) std::filesystem::remove(file);
    Tensor after;
    accuracy(reloaded, ds.test, &after);
    bool identical = before.to_vector<int64_t>() == after.to_vector<int64_t>();
    std::fprintf(stderr, "checkpoint %s: reloaded model predictions %s\n", save.empty() ? "(temporary)" : save.c_str(),
                 identical ? "identical" : "DIFFER");
    if (!identical) return 1;
    std::printf("test_accuracy=%.3f\n", acc);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_digits: %s\n", e.what());
    return 1;
  }
}
