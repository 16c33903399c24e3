/* Placeholder until this planner lands: every call fails clearly. */
#include "planner_internal.h"

int spk_plan_all_to_all(const spk_op_args *const *args, int world, spk_plan *plan,
                spk_err *err) {
  (void)args, (void)world, (void)plan;
  return spk_err_set(err, SPK_EINVAL, "all_to_all is not available yet");
}

int spk_check_all_to_all(const spk_op_args *a, int world, int rank, spk_err *err) {
  (void)a, (void)world, (void)rank;
  return spk_err_set(err, SPK_EINVAL, "all_to_all is not available yet");
}
