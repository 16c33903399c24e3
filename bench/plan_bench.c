/* Plan time and memory per op against world size, as one daemon of a
 * group across nodes builds it: this node's part (spk_plan_part: the
 * steps that touch its ranks) and its cut (plan_cut.h), beside the whole
 * plan every daemon built before. 8 ranks per node, node 0's view; each
 * rank holds `--elems` float32 elements (the plan does not depend on the
 * bytes, only on the shapes). Whole plans are built up to --whole-max
 * ranks (an all-to-all of 4096 ranks is 16.7 M moves, about 4 GiB).
 * Prints numbers; asserts nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan_cut.h"
#include "planner.h"

#define PB_PER_NODE 8

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank r's arguments of op over world ranks of `elems` floats each (a
 * [world * 4, elems / 4] tensor split or gathered along dim 0). */
static void args_of(spk_op_kind op, int world, int64_t elems,
                    spk_op_args *a) {
  memset(a, 0, sizeof(*a));
  a->op = op;
  a->dtype = SPK_F32;
  int64_t rows = 4, cols = elems / rows > 0 ? elems / rows : 1;
  a->in = (spk_shape){2, {rows, cols}};
  a->out = a->in;
  switch (op) {
  case SPK_OP_ALL_TO_ALL: /* scatter dim 1, gather dim 0 */
    a->in.dim[1] = cols * world;
    a->out = (spk_shape){2, {rows * world, cols}};
    a->ndims = 2, a->dims[0] = 1, a->dims[1] = 0;
    break;
  case SPK_OP_ALL_GATHER:
    a->out.dim[0] = rows * world;
    a->ndims = 1;
    break;
  case SPK_OP_REDUCE_SCATTER:
    a->in.dim[0] = rows * world;
    a->ndims = 1;
    break;
  default: /* all_reduce */
    break;
  }
}

typedef struct {
  double secs;
  size_t steps;               /* moves + reduce steps + reduce sources */
  size_t bytes;               /* what the plan (and cut) hold */
} pb_cost;

static size_t plan_bytes(const spk_plan *p) {
  return p->nmoves * sizeof(spk_move) + p->nreduces * sizeof(spk_reduce) +
         p->nrsrcs * sizeof(spk_rsrc);
}

static size_t cut_bytes(const spk_cut *c) {
  size_t b = plan_bytes(&c->local[0]) + plan_bytes(&c->local[1]);
  for (int ph = 0; ph < 2; ph++)
    for (int n = 0; n < c->nnodes; n++)
      b += (c->send[ph][n].npieces + c->recv[ph][n].npieces) *
           sizeof(spk_piece);
  return b;
}

/* Build (node 0's part when part) and cut; 0 on success. */
static int plan_once(const spk_op_args *const *argp, int world,
                     const int *node_of, const uint8_t *mine, int part,
                     pb_cost *c) {
  spk_plan plan;
  spk_cut cut;
  spk_err err = {{0}};
  spk_plan_init(&plan, world);
  double t0 = now_s();
  int rc = part ? spk_plan_part(&plan, mine, &err) : SPK_OK;
  if (rc == SPK_OK)
    rc = spk_plan_build(argp, world, &plan, &err);
  if (rc == SPK_OK)
    rc = spk_plan_cut(&plan, node_of, world / PB_PER_NODE, 0, &cut, &err);
  c->secs = now_s() - t0;
  if (rc != SPK_OK) {
    fprintf(stderr, "plan of %d ranks: %s\n", world, err.msg);
    spk_plan_free(&plan);
    return -1;
  }
  c->steps = plan.nmoves + plan.nreduces + plan.nrsrcs;
  c->bytes = plan_bytes(&plan) + cut_bytes(&cut);
  spk_cut_free(&cut);
  spk_plan_free(&plan);
  return 0;
}

static void row(spk_op_kind op, int world, int64_t elems, int whole_max) {
  spk_op_args *args = calloc((size_t)world, sizeof(*args));
  const spk_op_args **argp = calloc((size_t)world, sizeof(*argp));
  int *node_of = calloc((size_t)world, sizeof(*node_of));
  uint8_t *mine = calloc((size_t)world, 1);
  if (!args || !argp || !node_of || !mine) {
    fprintf(stderr, "calloc for %d ranks failed\n", world);
    exit(1);
  }
  for (int r = 0; r < world; r++) {
    args_of(op, world, elems, &args[r]);
    argp[r] = &args[r];
    node_of[r] = r / PB_PER_NODE;
    mine[r] = node_of[r] == 0;
  }
  pb_cost part, whole = {0};
  int ok = plan_once(argp, world, node_of, mine, 1, &part) == 0;
  int has_whole = ok && world <= whole_max &&
                  plan_once(argp, world, node_of, mine, 0, &whole) == 0;
  if (ok && has_whole)
    printf("%-15s %6d %6d  %10.3f %10zu %10.1f  %10.3f %10zu %10.1f\n",
           spk_op_name(op), world, world / PB_PER_NODE, part.secs * 1e3,
           part.steps, (double)part.bytes / 1048576, whole.secs * 1e3,
           whole.steps, (double)whole.bytes / 1048576);
  else if (ok)
    printf("%-15s %6d %6d  %10.3f %10zu %10.1f  %10s %10s %10s\n",
           spk_op_name(op), world, world / PB_PER_NODE, part.secs * 1e3,
           part.steps, (double)part.bytes / 1048576, "-", "-", "-");
  free(args), free(argp), free(node_of), free(mine);
}

int main(int argc, char **argv) {
  int64_t elems = 1024;
  int whole_max = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--elems") == 0)
      elems = atoll(argv[i + 1]);
    else if (strcmp(argv[i], "--whole-max") == 0)
      whole_max = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: %s [--elems N] [--whole-max RANKS]\n", argv[0]);
      return 2;
    }
  }
  static const spk_op_kind ops[] = {SPK_OP_ALL_TO_ALL, SPK_OP_ALL_GATHER,
                                    SPK_OP_REDUCE_SCATTER, SPK_OP_ALL_REDUCE};
  static const int worlds[] = {64, 256, 1024, 4096};
  printf("# plan + cut on one node (8 ranks per node, node 0), %lld float32 "
         "per rank; whole plans up to %d ranks\n", (long long)elems,
         whole_max);
  printf("%-15s %6s %6s  %10s %10s %10s  %10s %10s %10s\n", "op", "world",
         "nodes", "part_ms", "part_steps", "part_MiB", "whole_ms",
         "whole_steps", "whole_MiB");
  for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
    for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++)
      row(ops[o], worlds[w], elems, whole_max);
  return 0;
}
