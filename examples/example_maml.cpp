// example_maml — MAML (Finn et al. 2017) on sine-wave regression, second
// order, next to first-order MAML (FOMAML) trained on the same tasks from
// the same initial weights.
//
// A task is a sine wave y = A·sin(x − φ), amplitude A in [0.1, 5], phase φ
// in [0, π], inputs uniform in [−5, 5]; K = 10 support points to adapt on
// and K query points to score the adapted model. The model is an MLP
// 1-40-40-1 with ReLU. Each meta-iteration samples a meta-batch of tasks;
// for each, the inner loop takes --inner-steps SGD steps (lr 0.01) from the
// meta-parameters θ on the support set, through nn::functional::sgd and
// nn::functional_call, so the adapted parameters θ' are a differentiable
// function of θ; the meta-loss is the mean query loss at θ', and an Adam
// step (lr 1e-3) updates θ. MAML differentiates through the inner gradients
// (higher-order tapes: the second-order term −α·H·∇L); FOMAML treats them as
// constants. Both see the same tasks in the same order. A meta-batch runs
// as one batched pass: strata::vmap over the stacked tasks, with the inner
// tape opened inside the vmapped function (docs/vmap.md).
//
// Prints both meta-losses every --print-every iterations, then the mean
// squared error on held-out tasks before and after adaptation (the inner
// steps, and 10 steps) for the random initialisation, MAML and FOMAML.
// Exits with status 1 unless MAML's meta-loss over the last --print-every
// iterations is below 3/4 of its first --print-every iterations' mean. The
// default run ends near 0.28 of it; 800 iterations, the CTest test's short
// run, near 0.55 for every seed tried (0-5), so 3/4 leaves room for other
// BLAS rounding while a meta-gradient that does not learn still fails.
#include <CLI/CLI.hpp>
#include <strata/strata.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <vector>

namespace {

using namespace strata;
namespace F = strata::nn::functional;

constexpr int64_t kShots = 10;        // K: support points (and query points) per task
constexpr double kInnerLr = 0.01;     // α
constexpr double kMetaLr = 1e-3;      // β (Adam)
constexpr int64_t kEvalQuery = 100;   // query points per held-out task
constexpr double kRequiredFall = 0.75;  // last window's meta-loss / first window's, at most

/// Support and query sets of one task, [K, 1] each.
struct Task {
  Tensor x_support, y_support, x_query, y_query;
};

/// Draws sine-wave tasks from one seeded generator, so that a seed fixes
/// the whole sequence of tasks.
class SineTasks {
 public:
  SineTasks(uint64_t seed, Device device) : rng_(seed), device_(device) {}

  Task next(int64_t query_points = kShots) {
    const double amplitude = uniform(0.1, 5.0);
    const double phase = uniform(0.0, std::numbers::pi);
    auto [xs, ys] = points(kShots, amplitude, phase);
    auto [xq, yq] = points(query_points, amplitude, phase);
    return {xs, ys, xq, yq};
  }

 private:
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
  std::pair<Tensor, Tensor> points(int64_t n, double amplitude, double phase) {
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<float>(uniform(-5.0, 5.0));
      y[i] = static_cast<float>(amplitude * std::sin(x[i] - phase));
    }
    return {from_data(x, {n, 1}, {.device = device_}), from_data(y, {n, 1}, {.device = device_})};
  }

  std::mt19937_64 rng_;
  Device device_;
};

std::shared_ptr<nn::Sequential> make_model() {
  auto model = std::make_shared<nn::Sequential>();
  model->emplace_back<nn::Linear>(1, 40);
  model->emplace_back<nn::ReLU>();
  model->emplace_back<nn::Linear>(40, 40);
  model->emplace_back<nn::ReLU>();
  model->emplace_back<nn::Linear>(40, 1);
  return model;
}

/// θ' after `steps` SGD steps on the task's support set, starting from
/// `params`. With `differentiable`, each inner gradient is taken on a
/// higher-order tape, so θ' depends on `params` through the gradients too
/// (MAML); otherwise the gradients are constants (FOMAML, evaluation).
std::vector<Tensor> adapt(nn::Module& model, std::vector<Tensor> params, const Task& task, int steps,
                          bool differentiable) {
  const nn::SGDOptions inner{.lr = kInnerLr};
  F::SGDState state = F::sgd_init(params, inner);
  for (int k = 0; k < steps; ++k) {
    GradientTape tape({.higher_order = differentiable});
    for (const Tensor& p : params) tape.watch(p);
    Tensor loss = nn::functional::mse_loss(nn::functional_call(model, params, task.x_support), task.y_support);
    F::SGDStepResult r = F::sgd(params, tape.gradient(loss, params), state, inner);
    params = std::move(r.params);
    state = std::move(r.state);
  }
  return params;
}

/// The tasks' support and query sets stacked: [tasks, K, 1] each.
std::vector<Tensor> stacked(const std::vector<Task>& tasks) {
  std::vector<Tensor> fields[4];
  for (const Task& t : tasks) {
    fields[0].push_back(t.x_support);
    fields[1].push_back(t.y_support);
    fields[2].push_back(t.x_query);
    fields[3].push_back(t.y_query);
  }
  return {stack(fields[0]), stack(fields[1]), stack(fields[2]), stack(fields[3])};
}

/// Each task's query loss after adapting `theta` on its support set, all
/// tasks in one batched pass: [tasks].
Tensor query_losses(nn::Module& model, const std::vector<Tensor>& theta, const std::vector<Task>& tasks, int steps,
                    bool differentiable) {
  auto one_task = [&](const std::vector<Tensor>& t) {
    const Task task{t[0], t[1], t[2], t[3]};
    std::vector<Tensor> adapted = adapt(model, theta, task, steps, differentiable);
    return std::vector<Tensor>{nn::functional::mse_loss(nn::functional_call(model, adapted, task.x_query), task.y_query)};
  };
  return vmap(one_task)(stacked(tasks))[0];
}

/// One learner: a model, its meta-optimizer, and its meta-loss history.
struct Learner {
  Learner(const char* learner_name, bool differentiate_inner_gradients, std::shared_ptr<nn::Sequential> net)
      : name(learner_name),
        second_order(differentiate_inner_gradients),
        model(std::move(net)),
        optimizer(std::make_unique<nn::Adam>(model->parameters(), nn::AdamOptions{.lr = kMetaLr})) {}

  const char* name;
  bool second_order;
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<nn::Adam> optimizer;
  double window_loss = 0.0;  // summed over the current print window
  double first_window = -1.0, last_window = -1.0;
  double seconds = 0.0;

  /// One meta-iteration on `tasks`; returns the meta-loss. The tasks run as
  /// one batch (vmap, docs/vmap.md): the inner loop's tape is opened inside
  /// the vmapped function, so each task adapts θ on its own support set,
  /// and backward() differentiates the whole batch through every inner step.
  double meta_step(const std::vector<Task>& tasks, int inner_steps) {
    auto start = std::chrono::steady_clock::now();
    optimizer->zero_grad();
    const std::vector<Tensor> theta = model->parameters();
    Tensor meta_loss = mean(query_losses(*model, theta, tasks, inner_steps, second_order));
    meta_loss.backward();
    optimizer->step();
    const double value = meta_loss.item<double>();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return value;
  }
};

/// Mean query MSE over `tasks` after `steps` plain SGD steps from the
/// model's parameters.
double held_out_loss(nn::Module& model, const std::vector<Task>& tasks, int steps) {
  // Detached parameters: evaluation records nothing for the meta-gradient.
  std::vector<Tensor> theta;
  for (const Tensor& p : model.parameters()) theta.push_back(p.detach());
  return mean(query_losses(model, theta, tasks, steps, false)).item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"MAML (second order) vs first-order MAML on sine-wave regression, with Strata"};
  int iterations = 5000;
  int inner_steps = 1;
  int meta_batch = 10;
  int print_every = 500;
  int eval_tasks = 100;
  uint64_t seed = 0;
  bool quiet = false;
  std::string config;
  app.add_option("--iterations", iterations, "meta-iterations (each learner)")->check(CLI::PositiveNumber);
  app.add_option("--inner-steps", inner_steps, "SGD steps of the inner loop (lr 0.01)")->check(CLI::PositiveNumber);
  app.add_option("--meta-batch", meta_batch, "tasks per meta-iteration")->check(CLI::PositiveNumber);
  app.add_option("--print-every", print_every, "iterations per printed meta-loss (their mean)")
      ->check(CLI::PositiveNumber);
  app.add_option("--eval-tasks", eval_tasks, "held-out tasks for the final evaluation")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the initial weights and of the task sequence");
  app.add_flag("--quiet", quiet, "print only the summary");
  app.add_option("--config", config, "configuration file (default: the built-in search)");
  CLI11_PARSE(app, argc, argv);
  print_every = std::min(print_every, iterations);

  try {
    if (!config.empty()) runtime().load_config(config);
    Device device = runtime().default_device();
    // Both learners, and the baseline, start from the same weights.
    std::shared_ptr<nn::Sequential> nets[3];
    for (auto& net : nets) {
      manual_seed(seed);
      net = make_model();
      net->to(device);
    }
    Learner maml("MAML", true, nets[0]);
    Learner fomaml("FOMAML", false, nets[1]);
    std::shared_ptr<nn::Sequential> untrained = nets[2];  // never meta-trained
    std::printf("MAML on sine waves (A in [0.1, 5], phase in [0, pi], x in [-5, 5]), K = %lld, MLP 1-40-40-1, "
                "%d inner SGD step%s (lr %g), meta-batch %d, Adam lr %g, %d iterations, seed %llu, %s\n",
                static_cast<long long>(kShots), inner_steps, inner_steps == 1 ? "" : "s", kInnerLr, meta_batch,
                kMetaLr, iterations, static_cast<unsigned long long>(seed), device.str().c_str());
    if (!quiet) std::printf("%10s  %16s  %16s\n", "iteration", "MAML meta-loss", "FOMAML meta-loss");

    SineTasks train_tasks(seed + 1, device);
    for (int it = 1; it <= iterations; ++it) {
      std::vector<Task> tasks;
      for (int t = 0; t < meta_batch; ++t) tasks.push_back(train_tasks.next());
      for (Learner* l : {&maml, &fomaml}) l->window_loss += l->meta_step(tasks, inner_steps);
      if (it % print_every == 0 || it == iterations) {
        const int window = it % print_every == 0 ? print_every : it % print_every;
        for (Learner* l : {&maml, &fomaml}) {
          l->last_window = l->window_loss / window;
          if (l->first_window < 0) l->first_window = l->last_window;
          l->window_loss = 0.0;
        }
        if (!quiet) std::printf("%10d  %16.4f  %16.4f\n", it, maml.last_window, fomaml.last_window);
      }
    }
    for (const Learner* l : {&maml, &fomaml}) {
      std::printf("%-6s meta-loss %.4f -> %.4f (mean of the first and last %d iterations), %.1f ms per "
                  "meta-iteration\n",
                  l->name, l->first_window, l->last_window, print_every, 1e3 * l->seconds / iterations);
    }

    // Held-out tasks from their own seed: MSE on kEvalQuery points per task
    // after adapting on K support points.
    SineTasks test_tasks(seed + 1000003, device);
    std::vector<Task> held_out;
    for (int t = 0; t < eval_tasks; ++t) held_out.push_back(test_tasks.next(kEvalQuery));
    const int eval_steps[] = {0, inner_steps, 10};
    std::printf("held-out tasks: %d, query MSE after k SGD steps (lr %g) on K = %lld support points\n", eval_tasks,
                kInnerLr, static_cast<long long>(kShots));
    std::printf("%-26s", "model");
    for (int k : eval_steps) std::printf("  k = %-6d", k);
    std::printf("\n");
    struct Row {
      const char* name;
      nn::Module* model;
    };
    const Row rows[] = {{"unadapted baseline (init)", untrained.get()},
                        {"MAML (second order)", maml.model.get()},
                        {"FOMAML (first order)", fomaml.model.get()}};
    double maml_adapted = 0.0, baseline_adapted = 0.0;
    for (const Row& row : rows) {
      std::printf("%-26s", row.name);
      for (int k : eval_steps) {
        const double loss = held_out_loss(*row.model, held_out, k);
        std::printf("  %-10.4f", loss);
        if (k == inner_steps && row.model == maml.model.get()) maml_adapted = loss;
        if (k == inner_steps && row.model == untrained.get()) baseline_adapted = loss;
      }
      std::printf("\n");
    }
    const bool fell = maml.last_window < kRequiredFall * maml.first_window;
    std::printf("maml_meta_loss_first=%.4f maml_meta_loss_last=%.4f (ratio %.2f: %s); held-out after %d step%s: "
                "MAML %.4f vs baseline %.4f\n",
                maml.first_window, maml.last_window, maml.last_window / maml.first_window,
                fell ? "fell" : "did NOT fall below 0.75", inner_steps, inner_steps == 1 ? "" : "s", maml_adapted,
                baseline_adapted);
    return fell ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_maml: %s\n", e.what());
    return 1;
  }
}
