// digits_data.hpp — the UCI handwritten digits (data/digits.csv.gz) as
// tensors, split into a training and a test set.
#pragma once

#include <strata/strata.hpp>

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace digits {

struct Split {
  strata::Tensor x;  // [n, 64] f32, pixel values scaled to [0, 1]
  strata::Tensor y;  // [n] i64, class 0..9
};

struct Dataset {
  Split train;
  Split test;
};

/// Reads the gzip CSV. Throws std::runtime_error naming the file and line.
inline std::vector<std::vector<int>> read_rows(const std::filesystem::path& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path.string());
  std::vector<std::vector<int>> rows;
  std::string line;
  char buf[4096];
  while (gzgets(f, buf, sizeof(buf)) != nullptr) {
    line = buf;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.empty()) continue;
    std::vector<int> row;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) row.push_back(std::stoi(cell));
    if (row.size() != 65 || row[64] < 0 || row[64] > 9) {
      gzclose(f);
      throw std::runtime_error(path.string() + ": line " + std::to_string(rows.size() + 1) +
                               ": expected 64 pixels and a label 0..9");
    }
    rows.push_back(std::move(row));
  }
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (err != Z_OK && err != Z_STREAM_END) throw std::runtime_error(path.string() + ": " + msg);
  if (rows.empty()) throw std::runtime_error(path.string() + ": no rows");
  return rows;
}

/// A seeded shuffle, then `test_fraction` of the rows as the test set.
inline Dataset load(const std::filesystem::path& path, strata::Device device, double test_fraction = 0.2,
                    uint64_t seed = 0) {
  std::vector<std::vector<int>> rows = read_rows(path);
  std::vector<size_t> order(rows.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  size_t n_test = static_cast<size_t>(static_cast<double>(rows.size()) * test_fraction);
  auto make = [&](size_t begin, size_t end) {
    std::vector<float> x;
    std::vector<int64_t> y;
    for (size_t i = begin; i < end; ++i) {
      const auto& r = rows[order[i]];
      for (int p = 0; p < 64; ++p) x.push_back(static_cast<float>(r[static_cast<size_t>(p)]) / 16.0f);
      y.push_back(r[64]);
    }
    int64_t n = static_cast<int64_t>(end - begin);
    return Split{strata::from_data(x, {n, 64}, {.device = device}),
                 strata::from_data(y, {n}, {.dtype = strata::DType::i64, .device = device})};
  };
  return {make(n_test, rows.size()), make(0, n_test)};
}

/// The data file: `flag` if given, else $STRATA_DATA_DIR, else the source tree's.
inline std::filesystem::path data_file(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* dir = std::getenv("STRATA_DATA_DIR")) return std::filesystem::path(dir) / "digits.csv.gz";
  return std::filesystem::path(STRATA_SOURCE_DATA_DIR) / "digits.csv.gz";
}

}  // namespace digits
