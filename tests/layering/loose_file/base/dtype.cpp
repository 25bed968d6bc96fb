// A file in its layer's folder, beside the planted loose.cpp.
#include "base/dtype.hpp"
