// Kiln: a C++20 tensor library. Include this one header for the whole public API.
#pragma once

#include "kiln/autograd/autograd.h"
#include "kiln/core/allocator.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "kiln/core/random.h"
#include "kiln/core/scalar.h"
#include "kiln/core/tensor.h"
#include "kiln/io/safetensors.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/op.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"
