// device_record.cpp — kernel signatures and plugin status checks.
#include "device_record.hpp"

#include <strata/dtype.hpp>
#include <strata/error.hpp>

#include <cstring>
#include <string>

namespace strata::detail {

uint64_t signature_key(const DType* inputs, int n_inputs, const DType* outputs, int n_outputs) {
  uint64_t key = 1;
  for (int k = 0; k < n_inputs; ++k) key = (key << 4) | static_cast<uint64_t>(inputs[k]);
  key = (key << 4) | 0xF;
  for (int k = 0; k < n_outputs; ++k) key = (key << 4) | static_cast<uint64_t>(outputs[k]);
  return key;
}

uint64_t parse_signature(const char* text) {
  if (text == nullptr) return 0;
  std::string s(text);
  size_t arrow = s.find("->");
  if (arrow == std::string::npos) return 0;
  auto parse_list = [](const std::string& list, DType* out, int& n) {
    n = 0;
    if (list.empty()) return true;
    size_t start = 0;
    while (true) {
      size_t comma = list.find(',', start);
      std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (n == 8) return false;
      try {
        out[n++] = dtype_from_name(name);
      } catch (const Error&) {
        return false;
      }
      if (comma == std::string::npos) return true;
      start = comma + 1;
    }
  };
  DType in[8];
  DType out[8];
  int n_in = 0;
  int n_out = 0;
  if (!parse_list(s.substr(0, arrow), in, n_in) || !parse_list(s.substr(arrow + 2), out, n_out) || n_out == 0) {
    return 0;
  }
  if (n_in + n_out > 14) return 0;  // must fit in 64 bits
  return signature_key(in, n_in, out, n_out);
}

std::string signature_string(const DType* inputs, int n_inputs, const DType* outputs, int n_outputs) {
  std::string s;
  for (int k = 0; k < n_inputs; ++k) {
    if (k > 0) s += ",";
    s += dtype_name(inputs[k]);
  }
  s += "->";
  for (int k = 0; k < n_outputs; ++k) {
    if (k > 0) s += ",";
    s += dtype_name(outputs[k]);
  }
  return s;
}

void check_status(strata_status status, const strata_error& error, const DeviceRecord& device, const char* what) {
  if (status == STRATA_OK) return;
  std::string message = std::string(device.id) + ": " + what + " failed: " +
                        (error.message[0] != '\0' ? std::string(error.message) : "status " + std::to_string(status));
  if (status == STRATA_ERROR_OUT_OF_MEMORY) throw OutOfMemoryError(message);
  throw DeviceError(message);
}

void DeviceRecord::synchronize() {
  if (plugin.api->stream_synchronize == nullptr || props.has_streams == 0) return;
  strata_error err{sizeof(strata_error), {}};
  check_status(plugin.api->stream_synchronize(plugin.state, index, stream, &err), err, *this, "synchronize");
}

}  // namespace strata::detail
