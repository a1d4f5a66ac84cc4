// Precompiled for every target (see CMakeLists.txt). Only stable third-party headers belong here.
#pragma once
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>
