// example_digits — trains an MLP classifier on the UCI handwritten digits on
// the device the configuration selects, optionally with activation
// checkpointing and mixed precision; saves a checkpoint, reloads it into a
// fresh model and checks the predictions are identical; prints the test
// accuracy as its last line: test_accuracy=0.9xx.
//
// With --distributed (built when strata::distributed is), run under
// `strata launch -n N`: each rank trains on its own slice of every global
// batch (--batch is the global batch, split evenly over the ranks) through
// nn::DistributedDataParallel, rank 0 evaluates, prints and writes the
// checkpoint, and every rank reloads it. With --state-dir DIR the training
// state is saved after every epoch and a restarted run (strata launch
// --max-restarts) resumes after the newest one.
#include "digits_data.hpp"

#include <CLI/CLI.hpp>
#include <strata/strata.hpp>
#ifdef STRATA_HAVE_DISTRIBUTED
#include <strata/checkpointer.hpp>
#include <strata/ddp.hpp>
#include <strata/distributed.hpp>
#endif

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

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

/// Progress the way tools of the field show it: on a terminal a bar redrawn
/// in place; piped into a file or a CI log, one line per epoch (a log of
/// carriage-return redraws is thousands of lines nobody can read).
void progress(int epoch, int epochs, int64_t done, int64_t total, double loss, bool quiet) {
  if (quiet) return;
  static const bool terminal = ::isatty(STDERR_FILENO) != 0;
  if (!terminal) {
    if (done == total) {
      std::fprintf(stderr, "epoch %3d/%d %lld/%lld loss %.4f\n", epoch, epochs, static_cast<long long>(done),
                   static_cast<long long>(total), loss);
    }
    return;
  }
  constexpr int kWidth = 30;
  int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
  std::fprintf(stderr, "\repoch %3d/%d [%s%s] %4lld/%lld loss %.4f", epoch, epochs, std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), static_cast<long long>(done), static_cast<long long>(total),
               loss);
  if (done == total) std::fprintf(stderr, "\n");
}

#ifdef STRATA_HAVE_DISTRIBUTED
/// Ranks started with different arguments would each train "correctly" on
/// data that does not fit together (--batch is the global batch: ranks with
/// different values slice different batches and take different numbers of
/// steps), and no collective would notice. Gathers every rank's settings
/// and fails on every rank, naming the first that differs and each rank's
/// value.
void check_same_settings(const std::vector<std::pair<std::string, std::string>>& settings) {
  auto& pg = distributed::group();
  // Each setting as a 64-bit hash of its text: one all_gather for all.
  std::vector<int64_t> mine;
  for (const auto& [flag, value] : settings) mine.push_back(static_cast<int64_t>(std::hash<std::string>{}(value)));
  const auto k = static_cast<int64_t>(mine.size());
  const TensorOptions host{.dtype = DType::i64, .device = Device("cpu:0")};
  Tensor all = zeros({pg.size(), k}, host);
  pg.all_gather(all, from_data(mine, {k}, host)).wait();
  std::vector<int64_t> every = all.to_vector<int64_t>();
  for (int64_t i = 0; i < k; ++i) {
    bool same = true;
    for (int r = 1; r < pg.size(); ++r) same = same && every[static_cast<size_t>(r * k + i)] == every[static_cast<size_t>(i)];
    if (same) continue;
    // The texts themselves, to name them: one more gather of fixed-size rows.
    constexpr int64_t kWidth = 32;
    std::string text = settings[static_cast<size_t>(i)].second.substr(0, kWidth - 1);
    std::vector<int64_t> row(kWidth, 0);
    for (size_t c = 0; c < text.size(); ++c) row[c] = static_cast<unsigned char>(text[c]);
    Tensor texts = zeros({pg.size(), kWidth}, host);
    pg.all_gather(texts, from_data(row, {kWidth}, host)).wait();
    std::vector<int64_t> chars = texts.to_vector<int64_t>();
    std::string values;
    for (int r = 0; r < pg.size(); ++r) {
      std::string v;
      for (int64_t c = 0; c < kWidth && chars[static_cast<size_t>(r * kWidth + c)] != 0; ++c)
        v += static_cast<char>(chars[static_cast<size_t>(r * kWidth + c)]);
      values += (r ? ", rank " : "rank ") + std::to_string(r) + ": " + v;
    }
    throw ValueError(settings[static_cast<size_t>(i)].first + " differs across the ranks (" + values +
                     "): start every rank with the same arguments");
  }
}
#endif

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
  std::string trace_step;
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
  std::string state_dir;
  app.add_option("--state-dir", state_dir,
                 "save the training state here after every epoch and resume from the newest one at start "
                 "(for restarts: strata launch --max-restarts)");
  app.add_option("--trace-step", trace_step,
                 "save one training step's loss as a traced graph to this file (Graph::save; for `strata trace "
                 "diff` and `strata trace ops`) and exit without training");
  app.add_option("--seed", seed, "seed for initialisation, shuffling and the split");
  app.add_flag("--quiet", quiet, "no progress bars");
  bool distributed = false;
  app.add_flag("--distributed", distributed,
               "data-parallel over the ranks of `strata launch -n N` (--batch is the global batch)");
  CLI11_PARSE(app, argc, argv);

  try {
    int rank = 0;
    int world = 1;
    if (distributed) {
#ifdef STRATA_HAVE_DISTRIBUTED
      strata::distributed::init_process_group();
      rank = strata::distributed::rank();
      world = strata::distributed::world_size();
      if (batch < world) throw ValueError("--batch " + std::to_string(batch) + " is smaller than the world size");
      quiet = quiet || rank != 0;
#else
      throw Error("--distributed: this build has no strata::distributed (Gloo was not found)");
#endif
    }
    const bool lead = rank == 0;
    if (!config.empty()) runtime().load_config(config);
#ifdef STRATA_HAVE_DISTRIBUTED
    if (distributed) {
      char lr_text[32];
      std::snprintf(lr_text, sizeof lr_text, "%.17g", lr);
      check_same_settings({{"--batch", std::to_string(batch)},
                           {"--epochs", std::to_string(epochs)},
                           {"--hidden", std::to_string(hidden)},
                           {"--lr", lr_text},
                           {"--seed", std::to_string(seed)},
                           {"--amp", amp},
                           {"--checkpoint", use_checkpoint ? "on" : "off"}});
    }
#endif
    Device device = device_flag.empty() ? runtime().default_device() : Device(device_flag);
    digits::Dataset ds = digits::load(digits::data_file(data), device, 0.2, seed);
    if (lead) std::fprintf(stderr, "device %s (%s); %lld training and %lld test images; checkpointing %s, amp %s\n",
                 device.str().c_str(), runtime().device_info(device).name.c_str(),
                 static_cast<long long>(ds.train.x.size(0)), static_cast<long long>(ds.test.x.size(0)),
                 use_checkpoint ? "on" : "off", amp.c_str());
    if (lead && distributed) {
      std::fprintf(stderr, "distributed: %d ranks, global batch %lld (about %lld per rank)\n", world,
                   static_cast<long long>(batch), static_cast<long long>(batch / world));
    }

    manual_seed(seed);
    DigitsMlp model(hidden, use_checkpoint);
    model.to(device);
#ifdef STRATA_HAVE_DISTRIBUTED
    std::optional<nn::DistributedDataParallel> ddp;
    if (distributed) ddp.emplace(model);  // rank 0's initial parameters everywhere
    auto forward = [&](const Tensor& x) { return ddp ? (*ddp)(x) : model(x); };
#else
    auto forward = [&](const Tensor& x) { return model(x); };
#endif
    if (!trace_step.empty()) {
      // The loss of the first batch as a program of the batch: the
      // parameters and the labels are the graph's constants, so every op of
      // the forward pass, and the gradients a backward pass computes from
      // them, can be replayed on another device.
      const int64_t rows = std::min<int64_t>(batch, ds.train.x.size(0));
      const Tensor yb = ds.train.y.slice(0, 0, rows);
      Graph step = trace(
          [&](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{nn::functional::cross_entropy(cast(model(in[0]), DType::f32), yb)};
          },
          {ds.train.x.slice(0, 0, rows).contiguous()});
      step.save(trace_step);
      std::printf("saved one training step (%zu ops, batch %lld) to %s\n", step.nodes.size(),
                  static_cast<long long>(rows), trace_step.c_str());
      return 0;
    }
    nn::Adam opt(model.parameters(), {.lr = lr});
    nn::CosineAnnealingLR schedule(opt, epochs);
    GradScaler scaler({.enabled = amp == "f16"});  // bf16 has f32's range: no scaling needed
    std::optional<AutocastOptions> autocast;
    if (amp != "off") autocast = AutocastOptions{.dtype = amp == "bf16" ? DType::bf16 : DType::f16, .device = device};

    // Restarts: resume after the newest saved epoch (every rank loads it).
    int64_t done = 0;
#ifdef STRATA_HAVE_DISTRIBUTED
    std::optional<strata::distributed::Checkpointer> states;
    if (!state_dir.empty()) {
      states.emplace(state_dir);
      done = std::max<int64_t>(0, states->restore(model, &opt, &scaler));
      schedule.set_step(done);
      if (lead && done > 0) {
        const char* restart = std::getenv("STRATA_RESTART_COUNT");
        std::fprintf(stderr, "resumed from epoch %lld of %s (restart %s)\n", static_cast<long long>(done),
                     state_dir.c_str(), restart != nullptr ? restart : "?");
      }
    }
#else
    if (!state_dir.empty()) throw Error("--state-dir: this build has no strata::distributed (Gloo was not found)");
#endif
    int64_t n = ds.train.x.size(0);
    std::mt19937_64 rng(seed + 1);
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    auto start = std::chrono::steady_clock::now();
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      std::shuffle(order.begin(), order.end(), rng);
      if (epoch <= done) continue;  // trained before the restart: only its shuffle, to keep the order
      Tensor perm = from_data(order, {n}, {.dtype = DType::i64, .device = device});
      double loss_sum = 0.0;
      int64_t batches = 0;
      for (int64_t b = 0; b < n; b += batch) {
        int64_t e = std::min(n, b + batch);
        // This rank's slice of the global batch (all of it in one process).
        int64_t len = e - b;
        Tensor idx = perm.slice(0, b + len * rank / world, b + len * (rank + 1) / world);
        Tensor xb = index_select(ds.train.x, 0, idx);
        Tensor yb = index_select(ds.train.y, 0, idx);
        opt.zero_grad();
        Tensor loss;
        {
          std::optional<Autocast> scope;
          if (autocast) scope.emplace(*autocast);
          loss = nn::functional::cross_entropy(cast(forward(xb), DType::f32), yb);
        }
        scaler.scale(loss).backward();
        scaler.step(model.parameters(), [&] { opt.step(); });
        scaler.update();
        loss_sum += loss.item<double>();
        ++batches;
        progress(epoch, epochs, e, n, loss_sum / static_cast<double>(batches), quiet);
      }
      schedule.step();
#ifdef STRATA_HAVE_DISTRIBUTED
      if (states) states->save(epoch, model, &opt, scaler.state_dict());
#endif
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (lead) {
      const auto trained = static_cast<int>(epochs - done);
      std::fprintf(stderr, "trained %d epochs in %.2f s (%.1f ms per epoch)\n", trained, seconds,
                   trained > 0 ? 1000.0 * seconds / trained : 0.0);
    }

    // Save, reload into a fresh model, and compare: rank 0 (the only one
    // that evaluates) its predictions; the other ranks their parameters,
    // which also shows that the replicas stayed identical.
    Tensor before;
    double acc = lead ? accuracy(model, ds.test, &before) : 0.0;
    // One file for all ranks: rank 0's process id names the temporary one.
    int64_t file_id = ::getpid();
#ifdef STRATA_HAVE_DISTRIBUTED
    if (distributed) {
      Tensor id = full({1}, static_cast<double>(file_id), {.dtype = DType::i64, .device = Device("cpu:0")});
      strata::distributed::group().broadcast(id, 0).wait();
      file_id = id.item<int64_t>();
    }
#endif
    std::filesystem::path file =
        save.empty() ? std::filesystem::temp_directory_path() / ("strata_digits_" + std::to_string(file_id) + ".st")
                     : std::filesystem::path(save);
    // Rank 0 writes the model state in the single-process format (the
    // wrapped model's own names); every rank reads it.
    if (lead) save_training_state(file, model, &opt, scaler.state_dict(), {{"example", "digits"}});
#ifdef STRATA_HAVE_DISTRIBUTED
    if (distributed) strata::distributed::group().barrier().wait();
#endif
    DigitsMlp reloaded(hidden, use_checkpoint);
    reloaded.to(device);
    nn::Adam reloaded_opt(reloaded.parameters(), {.lr = lr});
    load_training_state(file, reloaded, &reloaded_opt);
#ifdef STRATA_HAVE_DISTRIBUTED
    if (distributed) strata::distributed::group().barrier().wait();  // every rank has read it
#endif
    if (save.empty() && lead) std::filesystem::remove(file);
    bool identical = true;
    if (lead) {
      Tensor after;
      accuracy(reloaded, ds.test, &after);
      identical = before.to_vector<int64_t>() == after.to_vector<int64_t>();
      std::fprintf(stderr, "checkpoint %s: reloaded model predictions %s\n",
                   save.empty() ? "(temporary)" : save.c_str(), identical ? "identical" : "DIFFER");
    } else {
      auto mine = model.parameters();
      auto loaded = reloaded.parameters();
      for (size_t i = 0; i < mine.size(); ++i) identical = identical && mine[i].to_bytes() == loaded[i].to_bytes();
      if (!identical) std::fprintf(stderr, "rank %d: parameters differ from rank 0's checkpoint\n", rank);
    }
    if (!identical) return 1;
    if (lead) std::printf("test_accuracy=%.3f\n", acc);
#ifdef STRATA_HAVE_DISTRIBUTED
    if (distributed) strata::distributed::destroy_process_group();
#endif
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_digits: %s\n", e.what());
    return 1;
  }
}
