/* Placeholder until this planner lands: every call fails clearly. */
#include "planner_internal.h"

int spk_plan_zigzag_split(const spk_op_args *const *args, int world, spk_plan *plan,
                spk_err *err) {
  (void)args, (void)world, (void)plan;
  return spk_err_set(err, SPK_EINVAL, "zigzag_split is not available yet");
}

int spk_check_zigzag_split(const spk_op_args *a, int world, int rank, spk_err *err) {
  (void)a, (void)world, (void)rank;
  return spk_err_set(err, SPK_EINVAL, "zigzag_split is not available yet");
}

int spk_plan_zigzag_gather(const spk_op_args *const *args, int world, spk_plan *plan,
                spk_err *err) {
  (void)args, (void)world, (void)plan;
  return spk_err_set(err, SPK_EINVAL, "zigzag_gather is not available yet");
}

int spk_check_zigzag_gather(const spk_op_args *a, int world, int rank, spk_err *err) {
  (void)a, (void)world, (void)rank;
  return spk_err_set(err, SPK_EINVAL, "zigzag_gather is not available yet");
}
