#include "kiln/core/parallel.h"

#include <omp.h>

#include "kiln/core/error.h"

extern "C" void openblas_set_num_threads(int);

namespace kiln {

void set_num_threads(int n) {
  KILN_CHECK(n > 0, ValueError, "set_num_threads: expected a positive count, got ", n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace kiln
