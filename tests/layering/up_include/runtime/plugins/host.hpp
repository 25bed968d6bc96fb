// Included from below by the planted record.cpp.
#pragma once
