// serialize_test.cpp — tensor and checkpoint files: round trips of every
// dtype, files of other safetensors writers, every kind of damaged or foreign
// file, atomic writes that leave the previous file intact, and model +
// optimizer checkpoints.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <strata/strata.hpp>
#include <thread>
#include <tuple>

#include "nn_test_util.hpp"

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using namespace nn_test;
namespace fs = std::filesystem;

class Files : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("strata_nn_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

  /// Files in the test directory other than `keep` (leftover temp files).
  std::vector<std::string> others(const std::vector<std::string>& keep) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      std::string name = e.path().filename().string();
      if (std::find(keep.begin(), keep.end(), name) == keep.end()) out.push_back(name);
    }
    return out;
  }

  static std::string read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void write_all(const fs::path& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  /// A safetensors file as another writer would produce it.
  static std::string safetensors(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return out + header + data;
  }
  /// Expects load_tensors(p) to throw a SerializationError naming the path
  /// and containing `part`.
  static void expect_load_error(const fs::path& p, const std::string& part) {
    try {
      load_tensors(p);
      ADD_FAILURE() << "expected a SerializationError containing '" << part << "'";
    } catch (const SerializationError& e) {
      std::string msg = e.what();
      EXPECT_EQ(e.path(), p);
      EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
    }
  }

  /// CRC-32 (zlib's polynomial), written here independently of the library.
  static uint32_t crc32(const std::string& bytes) {
    uint32_t crc = 0xffffffffu;
    for (unsigned char c : bytes) {
      crc ^= c;
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
  }
  /// `file` with its checksum recomputed as format_version 2 defines it: the
  /// CRC-32 of the whole file with the 8 digits of "crc32" read as "00000000".
  static std::string rechecksum(std::string file) {
    const std::string field = "\"crc32\":\"";
    const size_t at = file.find(field) + field.size();
    file.replace(at, 8, "00000000");
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", crc32(file));
    file.replace(at, 8, hex);
    return file;
  }
  /// `s` with its one occurrence of `from` replaced by `to`, of the same
  /// length (the header length stays right).
  static std::string replace_once(const std::string& s, const std::string& from, const std::string& to) {
    EXPECT_EQ(from.size(), to.size());
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    EXPECT_EQ(s.find(from, at + 1), std::string::npos) << from;
    std::string out = s;
    out.replace(at, from.size(), to);
    return out;
  }

  fs::path dir_;
};

TEST_F(Files, RoundTripOfEveryDTypeAndLayout) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  manual_seed(1);
  Tensor base = randn({3, 4}, {.dtype = DType::f64});
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"f32", randn({2, 3})},
      {"f64.transposed", base.mT()},  // non-contiguous
      {"f16", randn({5}, {.dtype = DType::f16})},
      {"bf16.sliced", randn({6, 2}, {.dtype = DType::bf16}).slice(0, 1, 6, 2)},  // strided view
      {"i32", from_data(std::vector<int32_t>{-7, 0, 2147483647}, {3})},
      {"i64", make_i64({-9000000000000LL, 1, 2, 3}, {2, 1, 2})},
      {"bool", gt(randn({4}), scalar_tensor(0.0))},
      {"scalar", scalar_tensor(2.5, {.dtype = DType::f64})},
      {"empty", zeros({0, 3})},
  };
  fs::path p = dir_ / "all.safetensors";
  save_tensors(p, tensors, {{"note", "hello"}});
  LoadedTensors loaded = load_tensors(p, Device("cpu:0"));
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    const Tensor& u = loaded.tensors[i].second;
    EXPECT_EQ(loaded.tensors[i].first, name);
    EXPECT_EQ(u.dtype(), t.dtype()) << name;
    EXPECT_EQ(u.sizes(), t.sizes()) << name;
    EXPECT_TRUE(u.is_contiguous()) << name;
    if (t.dtype() == DType::i64) {
      EXPECT_EQ(u.to_vector<int64_t>(), t.to_vector<int64_t>()) << name;
    } else {
      EXPECT_EQ(u.to_vector<double>(), t.to_vector<double>()) << name;  // bit-exact for every dtype
    }
  }
  EXPECT_EQ(loaded.metadata.at("note"), "hello");
  EXPECT_EQ(loaded.metadata.at("format"), "strata-checkpoint");
  EXPECT_EQ(loaded.metadata.at("format_version"), "2");
  EXPECT_EQ(loaded.metadata.at("crc32").size(), 8u);
  EXPECT_TRUE(loaded.find("scalar").defined());
  EXPECT_FALSE(loaded.find("nope").defined());
  // The layout other tools expect: header length, '{', data 8-aligned.
  std::string bytes = read_all(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(bytes[8], '{');
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_NE(bytes.find("\"dtype\":\"BF16\""), std::string::npos);
  EXPECT_EQ(others({"all.safetensors"}), std::vector<std::string>{});  // no temp file left
}

TEST_F(Files, ReadsFilesOfOtherSafetensorsWriters) {
  // As written by the Python safetensors package: metadata {"format": "pt"},
  // no checksum.
  std::string data(12, '\0');
  float values[3] = {1.5f, -2.0f, 3.25f};
  std::memcpy(data.data(), values, 12);
  std::string header = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  fs::path p = dir_ / "torch.safetensors";
  write_all(p, safetensors(header, data));
  LoadedTensors loaded = load_tensors(p);
  ASSERT_EQ(loaded.tensors.size(), 1u);
  EXPECT_EQ(loaded.tensors[0].second.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(loaded.metadata.at("format"), "pt");
  // Without any metadata, with space padding after the JSON.
  fs::path q = dir_ / "bare.safetensors";
  write_all(q, safetensors(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})" + std::string(5, ' '), data));
  EXPECT_EQ(load_tensors(q).tensors[0].second.to_vector<float>()[2], 3.25f);
  // Corrupting such a file's data cannot be detected (no checksum): it loads.
  std::string bytes = read_all(q);
  bytes[bytes.size() - 1] ^= 0x01;
  write_all(q, bytes);
  EXPECT_NO_THROW(load_tensors(q));
}

TEST_F(Files, DamagedAndForeignFilesAreNamedErrors) {
  fs::path good = dir_ / "good.safetensors";
  save_tensors(good, {{"a", randn({4, 4})}, {"b", randn({3})}});
  const std::string bytes = read_all(good);
  fs::path p = dir_ / "bad.safetensors";

  write_all(p, bytes.substr(0, bytes.size() - 5));
  expect_load_error(p, "truncated");
  write_all(p, bytes.substr(0, 5));
  expect_load_error(p, "fewer than the 8-byte header length");
  write_all(p, bytes.substr(0, 40));
  expect_load_error(p, "exceeds the file size");

  std::string corrupt = bytes;
  corrupt[corrupt.size() - 3] ^= 0x10;
  write_all(p, corrupt);
  expect_load_error(p, "corrupted");

  std::string trailing = bytes + "xyz";
  write_all(p, trailing);
  expect_load_error(p, "3 unexpected bytes");

  write_all(p, "#!/bin/sh\necho this is a shell script, not a tensor file\n");
  expect_load_error(p, "not a safetensors file");
  write_all(p, safetensors("[1, 2, 3]", ""));
  expect_load_error(p, "does not start with '{'");
  write_all(p, safetensors("{\"a\": {\"dtype\": ", ""));
  expect_load_error(p, "malformed header JSON");
  write_all(p, safetensors(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "xx"));
  expect_load_error(p, "unknown dtype 'F8_E4M3'");
  write_all(p, safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxx"));
  expect_load_error(p, "needs 8 bytes");
  write_all(p, safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", "xxxxxxxx"));
  expect_load_error(p, "beyond the data buffer");
  write_all(p, safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           "xxxxxxxx"));
  expect_load_error(p, "overlap");
  write_all(p, safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           "xxxxxxxx"));
  expect_load_error(p, "duplicate key 'a'");
  write_all(p, safetensors(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "xxxx"));
  expect_load_error(p, "non-negative integer");
  write_all(p, safetensors(R"({"a":{"dtype":"F32","shape":[1]}})", "xxxx"));
  expect_load_error(p, "no 'data_offsets'");
  write_all(p, safetensors(R"({"__metadata__":{"format":"strata-checkpoint","format_version":"7","crc32":"0"}})", ""));
  expect_load_error(p, "unsupported strata-checkpoint format_version '7'");
  expect_load_error(p, "reads versions 2 and 1");
  write_all(p, safetensors(R"({"__metadata__":{"format":"strata-checkpoint","format_version":"1"}})", ""));
  expect_load_error(p, "without its 'crc32' checksum");
  expect_load_error(dir_ / "missing.safetensors", "cannot open");
  expect_load_error(dir_, "is a directory");
}

TEST_F(Files, BadArgumentsAreRejectedBeforeWriting) {
  fs::path p = dir_ / "x.safetensors";
  expect_error<ValueError>([&] { save_tensors(p, {{"a", zeros({1})}, {"a", zeros({1})}}); }, {"duplicate name 'a'"});
  expect_error<ValueError>([&] { save_tensors(p, {{"", zeros({1})}}); }, {"empty tensor name"});
  expect_error<ValueError>([&] { save_tensors(p, {{"a", Tensor()}}); }, {"'a' is undefined"});
  expect_error<ValueError>([&] { save_tensors(p, {{"a", zeros({1})}}, {{"crc32", "0"}}); }, {"reserved"});
  EXPECT_FALSE(fs::exists(p));
  EXPECT_EQ(others({}), std::vector<std::string>{});
}

TEST_F(Files, FailedSavesLeaveThePreviousFileIntact) {
  fs::path p = dir_ / "model.safetensors";
  save_tensors(p, {{"w", full({4}, 1.0)}});
  const std::string before = read_all(p);

  // A directory that does not exist.
  try {
    save_tensors(dir_ / "no" / "such" / "dir" / "m.safetensors", {{"w", zeros({1})}});
    ADD_FAILURE() << "expected a SerializationError";
  } catch (const SerializationError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  // The target is a directory: the rename fails, the temp file is removed.
  fs::create_directory(dir_ / "taken");
  try {
    save_tensors(dir_ / "taken", {{"w", zeros({1})}});
    ADD_FAILURE() << "expected a SerializationError";
  } catch (const SerializationError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
    EXPECT_EQ(e.path(), dir_ / "taken");
  }
  EXPECT_TRUE(fs::is_directory(dir_ / "taken"));

  // The disk "fills up" in the middle of the data: a file size limit makes
  // write() fail with EFBIG (this works as root, unlike permissions).
  struct rlimit old_limit {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    save_tensors(p, {{"w", zeros({100000})}});
  } catch (const SerializationError& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("cannot write"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);

  EXPECT_EQ(read_all(p), before);
  EXPECT_EQ(load_tensors(p).tensors[0].second.to_vector<float>(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(others({"model.safetensors", "taken"}), std::vector<std::string>{});
}

/// Clears the capabilities that let a process write through file
/// permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER) from the
/// calling thread's effective set. Capabilities are per thread on Linux, so
/// the rest of the process keeps them. "" on success, else why not.
std::string drop_permission_overrides_of_this_thread() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (::syscall(SYS_capget, &header, data) != 0) return std::string("capget: ") + std::strerror(errno);
  for (unsigned cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) {
    data[cap / 32].effective &= ~(1u << (cap % 32));
  }
  if (::syscall(SYS_capset, &header, data) != 0) return std::string("capset: ") + std::strerror(errno);
  return "";
}

// Root (or any process with CAP_DAC_OVERRIDE) writes through permissions, so
// the save runs on a thread that dropped those capabilities: the test means
// the same, and can fail the same, whoever runs it.
TEST_F(Files, ReadOnlyDirectory) {
  fs::path ro = dir_ / "ro";
  fs::create_directory(ro);
  save_tensors(ro / "m.safetensors", {{"w", full({2}, 3.0)}});
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  std::string dropped, error;
  bool writable = false, threw = false;
  std::thread([&] {
    dropped = drop_permission_overrides_of_this_thread();
    if (!dropped.empty()) return;
    writable = ::faccessat(AT_FDCWD, ro.c_str(), W_OK, AT_EACCESS) == 0;
    try {
      save_tensors(ro / "m.safetensors", {{"w", zeros({2})}});
    } catch (const SerializationError& e) {
      threw = true;
      error = e.what();
    }
  }).join();
  ASSERT_EQ(dropped, "") << "cannot take the permission overrides away from the saving thread";
  EXPECT_FALSE(writable) << ro << " is writable without CAP_DAC_OVERRIDE: the test cannot make a read-only folder";
  EXPECT_TRUE(threw) << "a save into a read-only folder succeeded";
  EXPECT_NE(error.find("cannot create a temporary file"), std::string::npos) << error;
  EXPECT_EQ(load_tensors(ro / "m.safetensors").tensors[0].second.to_vector<float>(), (std::vector<float>{3, 3}));
}

/// A small model for checkpoint tests.
std::shared_ptr<nn::Sequential> make_model() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 8), std::make_shared<nn::Tanh>(), std::make_shared<nn::LayerNorm>(Shape{8}),
      std::make_shared<nn::Linear>(8, 2)});
}

/// One training step on fixed data; returns the loss.
double train_step(nn::Module& model, nn::Optimizer& opt, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = nn::functional::cross_entropy(model(x), y);
  loss.backward();
  opt.step();
  return loss.item<double>();
}

TEST_F(Files, CheckpointResumesTrainingBitForBit) {
  manual_seed(11);
  Tensor x = randn({16, 3});
  Tensor y = make_i64({0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0}, {16});
  auto model = make_model();
  nn::Adam opt(model->parameters(), {.lr = 0.01, .weight_decay = 0.01});
  for (int i = 0; i < 3; ++i) train_step(*model, opt, x, y);
  GradScaler scaler;
  fs::path p = dir_ / "ckpt.safetensors";
  save_training_state(p, *model, &opt, scaler.state_dict(), {{"epoch", "3"}});
  std::vector<double> continued;
  for (int i = 0; i < 3; ++i) continued.push_back(train_step(*model, opt, x, y));

  manual_seed(99);  // different initial weights
  auto resumed = make_model();
  nn::Adam opt2(resumed->parameters(), {.lr = 0.5});
  TrainingStateExtras extras = load_training_state(p, *resumed, &opt2);
  EXPECT_EQ(extras.metadata.at("epoch"), "3");
  ASSERT_EQ(extras.tensors.size(), 3u);
  GradScaler scaler2({.init_scale = 8.0});
  scaler2.load_state_dict(extras.tensors);
  EXPECT_EQ(scaler2.get_scale(), scaler.get_scale());
  EXPECT_EQ(opt2.lr(), 0.01);
  EXPECT_EQ(opt2.options().weight_decay, 0.01);
  std::vector<double> after;
  for (int i = 0; i < 3; ++i) after.push_back(train_step(*resumed, opt2, x, y));
  EXPECT_EQ(after, continued);
  auto a = model->state_dict(), b = resumed->state_dict();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_vector<float>(), b[i].second.to_vector<float>());
}

TEST_F(Files, CheckpointMismatchIsNamedAndLoadsNothing) {
  manual_seed(12);
  auto model = make_model();
  nn::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  fs::path p = dir_ / "ckpt.safetensors";
  save_training_state(p, *model, &opt);

  nn::Sequential wider{std::make_shared<nn::Linear>(3, 8), std::make_shared<nn::Tanh>(),
                       std::make_shared<nn::LayerNorm>(Shape{8}), std::make_shared<nn::Linear>(8, 3)};
  std::vector<float> before = wider.parameters()[0].to_vector<float>();
  try {
    load_training_state(p, wider);
    ADD_FAILURE() << "expected a SerializationError";
  } catch (const SerializationError& e) {
    std::string msg = e.what();
    for (const char* part : {"ckpt.safetensors", "3.weight", "[3, 8]", "[2, 8]"}) {
      EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
    }
  }
  EXPECT_EQ(wider.parameters()[0].to_vector<float>(), before);  // nothing loaded

  // The model fits but the optimizer does not (Adam has other state): the
  // model must stay untouched too.
  manual_seed(13);
  auto same = make_model();
  nn::Adam adam(same->parameters());
  std::vector<float> same_before = same->parameters()[0].to_vector<float>();
  EXPECT_THROW(load_training_state(p, *same, &adam), SerializationError);
  EXPECT_EQ(same->parameters()[0].to_vector<float>(), same_before);

  // A checkpoint without optimizer state cannot fill an optimizer.
  fs::path model_only = dir_ / "model_only.safetensors";
  save_training_state(model_only, *model);
  expect_error<SerializationError>([&] { load_training_state(model_only, *same, &adam); }, {"no optimizer state"});
  EXPECT_NO_THROW(load_training_state(model_only, *same));
  EXPECT_EQ(same->parameters()[0].to_vector<float>(), model->parameters()[0].to_vector<float>());
}


/// A model with an optimizer of `kind` ("SGD" with momentum, "Adam",
/// "AdamW") and a GradScaler, trained two steps: every piece has state.
struct TrainingRun {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<nn::Optimizer> opt;
  std::unique_ptr<GradScaler> scaler;
};

TrainingRun make_run(const std::string& kind, uint64_t seed, double init_scale) {
  manual_seed(seed);
  TrainingRun run{make_model(), nullptr, std::make_unique<GradScaler>(GradScalerOptions{.init_scale = init_scale})};
  std::vector<Tensor> params = run.model->parameters();
  if (kind == "SGD") {
    run.opt = std::make_unique<nn::SGD>(params, nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
  } else if (kind == "Adam") {
    run.opt = std::make_unique<nn::Adam>(params, nn::AdamOptions{.lr = 0.01});
  } else {
    run.opt = std::make_unique<nn::AdamW>(params, nn::AdamOptions{.lr = 0.02, .weight_decay = 0.01});
  }
  Tensor x = randn({16, 3});
  Tensor y = make_i64({0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0}, {16});
  for (int i = 0; i < 2; ++i) train_step(*run.model, *run.opt, x, y);
  return run;
}

/// Everything a TrainingRun holds, as numbers.
std::vector<std::pair<std::string, std::vector<double>>> snapshot(const TrainingRun& run) {
  std::vector<std::pair<std::string, std::vector<double>>> out;
  for (const auto& [n, t] : run.model->state_dict()) out.emplace_back("model." + n, t.to_vector<double>());
  for (const auto& [n, t] : run.opt->state_dict()) out.emplace_back("optimizer." + n, t.to_vector<double>());
  out.emplace_back("optimizer.lr()", std::vector<double>{run.opt->lr()});
  out.emplace_back("optimizer.step_count()", std::vector<double>{static_cast<double>(run.opt->step_count())});
  for (const auto& [n, t] : run.scaler->state_dict()) out.emplace_back("scaler." + n, t.to_vector<double>());
  return out;
}

/// Writes a training state of `kind` (the scaler's state in extra) to `p`.
void save_run(const fs::path& p, const std::string& kind) {
  TrainingRun run = make_run(kind, 21, 4096.0);
  save_training_state(p, *run.model, run.opt.get(), run.scaler->state_dict(), {{"epoch", "3"}});
}

/// Expects loading `p` into `run` (model, optimizer and scaler) to fail with
/// a SerializationError naming the file and every one of `parts`, and to
/// leave the model, the optimizer and the scaler as they were.
void expect_refused(const fs::path& p, TrainingRun& run, const std::vector<std::string>& parts) {
  const auto before = snapshot(run);
  try {
    load_training_state(p, *run.model, run.opt.get(), run.scaler.get());
    ADD_FAILURE() << "expected a SerializationError naming '" << parts.front() << "'";
  } catch (const SerializationError& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.path(), p);
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  }
  EXPECT_EQ(snapshot(run), before) << "a refused load changed the model, the optimizer or the scaler";
}

/// Copies training-state file `from` to `to` through load_tensors and
/// save_tensors, dropping entry `drop` (if not empty) and adding `add`.
void rewrite(const fs::path& from, const fs::path& to, const std::string& drop,
             const std::vector<std::pair<std::string, Tensor>>& add = {}) {
  LoadedTensors loaded = load_tensors(from);
  std::vector<std::pair<std::string, Tensor>> kept;
  bool dropped = drop.empty();
  for (const auto& [n, t] : loaded.tensors) {
    if (n == drop) {
      dropped = true;
    } else {
      kept.emplace_back(n, t);
    }
  }
  ASSERT_TRUE(dropped) << drop;
  for (const auto& e : add) kept.push_back(e);
  std::map<std::string, std::string> metadata = loaded.metadata;
  for (const char* reserved : {file_format::kFormatKey, file_format::kVersionKey, file_format::kChecksumKey}) {
    metadata.erase(reserved);
  }
  save_tensors(to, kept, metadata);
}

const std::vector<std::string> kOptimizers = {"SGD", "Adam", "AdamW"};

TEST_F(Files, ChecksumCoversTheHeader) {
  fs::path good = dir_ / "good.safetensors";
  save_run(good, "Adam");
  const std::string bytes = read_all(good);
  // The checksum is the one the format defines (recomputed independently).
  EXPECT_EQ(rechecksum(bytes), bytes);
  EXPECT_NE(bytes.find(R"("format_version":"2")"), std::string::npos);

  // The fuzzing probe's file: lr's dtype flipped from F64 to I64 in the
  // header text only (same length). Its data would read as 4.58e18.
  fs::path p = dir_ / "tampered.safetensors";
  write_all(p, replace_once(bytes, R"("optimizer.lr":{"dtype":"F64")", R"("optimizer.lr":{"dtype":"I64")"));
  expect_load_error(p, "corrupted");
  expect_load_error(p, "checksum (crc32)");
  TrainingRun run = make_run("Adam", 5, 64.0);
  expect_refused(p, run, {"checksum (crc32)", "header and data"});

  // Any header byte counts: user metadata, a shape that still fits the data.
  write_all(p, replace_once(bytes, R"("epoch":"3")", R"("epoch":"4")"));
  expect_load_error(p, "checksum (crc32)");
  write_all(p, replace_once(bytes, R"("model.0.weight":{"dtype":"F32","shape":[8,3])",
                            R"("model.0.weight":{"dtype":"F32","shape":[3,8])"));
  expect_load_error(p, "checksum (crc32)");
  // The checksum field must be written as save_tensors() writes it.
  write_all(p, safetensors(R"({"__metadata__":{"format":"strata-checkpoint","format_version":"2","crc32": "0"}})", ""));
  expect_load_error(p, "is not written as");
}

// One flipped bit in the format tag must not turn the checksum off: a file
// strata wrote carries three marks (the "strata-checkpoint" tag, the version
// and crc32 keys), so with any one damaged it is still checked, and a data
// bit flipped as well is caught. Every bit of the tag's key and value.
TEST_F(Files, AFlippedFormatTagStillChecksTheFile) {
  fs::path good = dir_ / "good.safetensors";
  save_tensors(good, {{"w", randn({16})}}, {{"note", "x"}});
  const std::string bytes = read_all(good);
  const std::string tag = R"("format":"strata-checkpoint")";
  const size_t at = bytes.find(tag);
  ASSERT_NE(at, std::string::npos);
  fs::path p = dir_ / "flipped.safetensors";
  int refused = 0, cases = 0;
  for (size_t i = at; i < at + tag.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = bytes;
      damaged[i] = static_cast<char>(damaged[i] ^ (1 << bit));
      damaged[damaged.size() - 2] = static_cast<char>(damaged[damaged.size() - 2] ^ 0x04);  // and one data bit
      write_all(p, damaged);
      ++cases;
      try {
        load_tensors(p);
        ADD_FAILURE() << "byte " << i - at << " of the tag, bit " << bit << ": loaded";
      } catch (const SerializationError&) {
        ++refused;
      }
    }
  }
  EXPECT_EQ(refused, cases);
  // A foreign file with only the common "format" key stays foreign (loaded
  // unchecked): Hugging Face writes "format": "pt".
  write_all(p, safetensors(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                           std::string(4, '\0')));
  EXPECT_EQ(load_tensors(p).tensors.size(), 1u);
}

// A header nested deeper than any safetensors header is refused while it is
// parsed (the fuzzing probe's 100,000-deep array crashed the reader), for
// tensors and for training states.
TEST_F(Files, DeeplyNestedHeadersAreRefused) {
  fs::path p = dir_ / "deep.safetensors";
  for (size_t depth : {size_t{65}, size_t{100000}}) {
    const std::string header = R"({"a":)" + std::string(depth, '[') + std::string(depth, ']') + "}";
    write_all(p, safetensors(header, ""));
    expect_load_error(p, "nested deeper than 64 levels");
  }
  TrainingRun run = make_run("Adam", 5, 64.0);
  expect_refused(p, run, {"nested deeper than 64 levels"});
}

TEST_F(Files, ReChecksummedDTypeTamperingIsRefusedNamingTheEntry) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  for (const std::string& kind : kOptimizers) {
    SCOPED_TRACE(kind);
    fs::path good = dir_ / (kind + ".safetensors");
    save_run(good, kind);
    const std::string bytes = read_all(good);
    fs::path p = dir_ / (kind + "-tampered.safetensors");
    TrainingRun run = make_run(kind, 6, 64.0);

    // lr as I64, checksum recomputed: the file itself is sound...
    write_all(p, rechecksum(replace_once(bytes, R"("optimizer.lr":{"dtype":"F64")",
                                         R"("optimizer.lr":{"dtype":"I64")")));
    LoadedTensors loaded = load_tensors(p);
    EXPECT_EQ(loaded.find("optimizer.lr").dtype(), DType::i64);
    EXPECT_GT(loaded.find("optimizer.lr").item<double>(), 1e18);  // the probe's 4.58e18
    // ...but not an optimizer's state.
    expect_refused(p, run, {"'optimizer.lr'", "expected f64[]", "found i64[]"});

    write_all(p, rechecksum(replace_once(bytes, R"("optimizer.step":{"dtype":"I64")",
                                         R"("optimizer.step":{"dtype":"F64")")));
    expect_refused(p, run, {"'optimizer.step'", "expected i64[]", "found f64[]"});

    const std::string buffer = kind == "SGD" ? "optimizer.param.0.momentum_buffer" : "optimizer.param.0.exp_avg";
    write_all(p, rechecksum(replace_once(bytes, "\"" + buffer + R"(":{"dtype":"F32")",
                                         "\"" + buffer + R"(":{"dtype":"I32")")));
    expect_refused(p, run, {"'" + buffer + "'", "expected f32[8, 3]", "found i32[8, 3]"});

    if (kind != "SGD") {
      write_all(p, rechecksum(replace_once(bytes, R"("optimizer.param.1.step":{"dtype":"I64")",
                                           R"("optimizer.param.1.step":{"dtype":"F64")")));
      expect_refused(p, run, {"'optimizer.param.1.step'", "expected i64[]", "found f64[]"});
    }

    // The scaler's state.
    write_all(p, rechecksum(replace_once(bytes, R"("extra.scale":{"dtype":"F64")", R"("extra.scale":{"dtype":"I64")")));
    expect_refused(p, run, {"'extra.scale'", "expected f64[]", "found i64[]"});
    write_all(p, rechecksum(replace_once(bytes, R"("extra.growth_tracker":{"dtype":"I64")",
                                         R"("extra.growth_tracker":{"dtype":"F64")")));
    expect_refused(p, run, {"'extra.growth_tracker'", "expected i64[]", "found f64[]"});
  }
}

TEST_F(Files, MissingStateEntryIsRefusedAndChangesNothing) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  // One entry of each kind the optimizers need: a moment buffer, a
  // per-parameter step, a hyperparameter, the step count, the lr.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Adam", "optimizer.param.2.exp_avg_sq"}, {"Adam", "optimizer.param.5.exp_avg"},
      {"AdamW", "optimizer.param.0.step"},      {"Adam", "optimizer.beta2"},
      {"SGD", "optimizer.momentum"},            {"SGD", "optimizer.step"},
      {"AdamW", "optimizer.lr"},
  };
  for (const auto& [kind, entry] : cases) {
    SCOPED_TRACE(kind + " without " + entry);
    fs::path good = dir_ / (kind + ".safetensors");
    save_run(good, kind);
    fs::path p = dir_ / "missing.safetensors";
    rewrite(good, p, entry);
    TrainingRun run = make_run(kind, 7, 64.0);
    ASSERT_GT(run.opt->step_count(), 0);
    expect_refused(p, run, {"missing entry '" + entry + "'"});
    // The intact file loads (the check is not simply refusing everything).
    EXPECT_NO_THROW(load_training_state(good, *run.model, run.opt.get(), run.scaler.get()));
  }
  // The probe's case: Adam with 23 of its 24 entries.
  fs::path good = dir_ / "Adam.safetensors";
  TrainingRun source = make_run("Adam", 21, 4096.0);
  EXPECT_EQ(source.opt->state_dict().size(), 24u);
  // The scaler's state, with the scaler passed.
  fs::path p = dir_ / "missing.safetensors";
  for (const char* entry : {"extra.growth_tracker", "extra.scale", "extra.skipped_steps"}) {
    rewrite(good, p, entry);
    TrainingRun run = make_run("Adam", 8, 64.0);
    expect_refused(p, run, {std::string("missing entry '") + entry + "'"});
  }
}

TEST_F(Files, UnknownStateEntryIsRefused) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  const std::vector<std::tuple<std::string, std::string, Tensor>> cases = {
      {"Adam", "optimizer.param.0.momentum_buffer", zeros({8, 3})},
      {"SGD", "optimizer.param.0.exp_avg", zeros({8, 3})},
      {"AdamW", "optimizer.amsgrad", scalar_tensor(0.0, {.dtype = DType::f64})},
      {"Adam", "optimizer.param.99.exp_avg", zeros({8, 3})},
      {"SGD", "unprefixed", zeros({1})},
  };
  for (const auto& [kind, entry, tensor] : cases) {
    SCOPED_TRACE(kind + " with " + entry);
    fs::path good = dir_ / (kind + ".safetensors");
    save_run(good, kind);
    fs::path p = dir_ / "extra.safetensors";
    rewrite(good, p, "", {{entry, tensor}});
    TrainingRun run = make_run(kind, 9, 64.0);
    expect_refused(p, run, {"'" + entry + "'"});
  }
  // A GradScaler refuses state with an unknown, a duplicate or a misshapen
  // entry, and keeps its own.
  GradScaler scaler({.init_scale = 32.0});
  auto state = GradScaler({.init_scale = 2.0}).state_dict();
  auto with = [&](const std::string& name, const Tensor& t) {
    auto s = state;
    s.emplace_back(name, t);
    return s;
  };
  expect_error<ValueError>([&] { scaler.load_state_dict(with("found_inf", scalar_tensor(0.0))); },
                           {"unexpected entry 'found_inf'"});
  expect_error<ValueError>(
      [&] { scaler.load_state_dict(with("scale", scalar_tensor(4.0, {.dtype = DType::f64}))); },
      {"duplicate entry 'scale'"});
  state[0].second = full({1}, 2.0, {.dtype = DType::f64});
  expect_error<ShapeError>([&] { scaler.load_state_dict(state); }, {"'scale'", "expected f64[]", "found f64[1]"});
  EXPECT_EQ(scaler.get_scale(), 32.0);
}

TEST_F(Files, ScalerStateLoadsWithTheTrainingState) {
  TrainingRun source = make_run("AdamW", 22, 4096.0);
  fs::path p = dir_ / "state.safetensors";
  std::vector<std::pair<std::string, Tensor>> extra = source.scaler->state_dict();
  extra.emplace_back("user.tensor", full({2}, 7.0));
  save_training_state(p, *source.model, source.opt.get(), extra);
  TrainingRun run = make_run("AdamW", 23, 64.0);
  TrainingStateExtras extras = load_training_state(p, *run.model, run.opt.get(), run.scaler.get());
  EXPECT_EQ(snapshot(run), snapshot(source));
  EXPECT_EQ(run.scaler->get_scale(), 4096.0);
  ASSERT_EQ(extras.tensors.size(), 1u);  // the scaler's entries are taken out
  EXPECT_EQ(extras.tensors[0].first, "user.tensor");
  // Without a scaler they are all returned, as before.
  EXPECT_EQ(load_training_state(p, *run.model, run.opt.get()).tensors.size(), 4u);
}

TEST_F(Files, PreviousFormatVersionStillLoads) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  // Written by the format_version 1 code (data-only checksum): nn::Linear(2,
  // 1) after one SGD step (lr 0.125, momentum 0.5), a default GradScaler.
  const fs::path v1 = fs::path(STRATA_NN_TEST_DATA_DIR) / "training_state_v1.safetensors";
  const std::string bytes = read_all(v1);
  ASSERT_FALSE(bytes.empty()) << v1;
  ASSERT_NE(bytes.find(R"("format_version":"1")"), std::string::npos);
  nn::Linear model(2, 1);
  nn::SGD opt(model.parameters(), {.lr = 0.5});
  GradScaler scaler({.init_scale = 2.0});
  TrainingStateExtras extras = load_training_state(v1, model, &opt, &scaler);
  EXPECT_EQ(extras.metadata.at("format_version"), "1");
  EXPECT_EQ(extras.metadata.at("note"), "v1");
  EXPECT_EQ(model.parameters()[0].to_vector<float>(), (std::vector<float>{0x1.58p-1f, -0x1.08p-2f}));
  EXPECT_EQ(model.parameters()[1].to_vector<float>(), (std::vector<float>{0x1.48p-1f}));
  EXPECT_EQ(opt.lr(), 0.125);
  EXPECT_EQ(opt.options().momentum, 0.5);
  EXPECT_EQ(opt.step_count(), 1);
  nn::NamedTensors state = opt.state_dict();
  auto entry = [&](const std::string& n) {
    for (const auto& [k, t] : state) {
      if (k == n) return t.to_vector<float>();
    }
    return std::vector<float>{};
  };
  EXPECT_EQ(entry("param.0.momentum_buffer"), (std::vector<float>{-0x1.6p+0f, 0x1p-4f}));
  EXPECT_EQ(entry("param.1.momentum_buffer"), (std::vector<float>{0x1.cp-1f}));
  EXPECT_EQ(scaler.get_scale(), 65536.0);

  // Its weaker check: data damage is caught...
  fs::path p = dir_ / "v1.safetensors";
  std::string damaged = bytes;
  damaged[damaged.size() - 1] ^= 0x01;
  write_all(p, damaged);
  expect_load_error(p, "corrupted: the CRC-32 of the data buffer");
  expect_load_error(p, "format_version 1");
  // ...a header edit is not (version 1 does not cover the header), but the
  // state checks still refuse the probe's lr as I64, changing nothing.
  write_all(p, replace_once(bytes, R"("optimizer.lr":{"dtype":"F64")", R"("optimizer.lr":{"dtype":"I64")"));
  EXPECT_NO_THROW(load_tensors(p));
  nn::Linear other(2, 1);
  nn::SGD other_opt(other.parameters(), {.lr = 0.5, .momentum = 0.25});
  const std::vector<float> weights = other.parameters()[0].to_vector<float>();
  expect_error<SerializationError>([&] { load_training_state(p, other, &other_opt); },
                                   {p.string(), "'optimizer.lr'", "expected f64[]", "found i64[]"});
  EXPECT_EQ(other.parameters()[0].to_vector<float>(), weights);
  EXPECT_EQ(other_opt.lr(), 0.5);
  EXPECT_EQ(other_opt.options().momentum, 0.25);

  // Saving again writes the current version.
  save_training_state(p, model, &opt, scaler.state_dict());
  EXPECT_EQ(load_tensors(p).metadata.at("format_version"), "2");
}

// The former names still work for one release (deprecated: "checkpoint" is
// activation recomputation in Strata).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_F(Files, DeprecatedCheckpointNamesStillWork) {
  auto model = make_model();
  fs::path p = dir_ / "old_names.safetensors";
  save_checkpoint(p, *model, nullptr, {}, {{"epoch", "1"}});
  auto other = make_model();
  CheckpointExtras extras = load_checkpoint(p, *other);
  EXPECT_EQ(extras.metadata.at("epoch"), "1");
  EXPECT_EQ(other->parameters()[0].to_vector<float>(), model->parameters()[0].to_vector<float>());
}
#pragma GCC diagnostic pop

}  // namespace
