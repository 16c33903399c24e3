/* spcoll_cpeer: the C side of the shared-group test. Joins group NAME as
 * RANK of WORLD next to PyTorch ranks and runs, in this order, the same ops
 * as tests/python/test_shared_group.py, checking every element against the
 * formulas both sides share:
 *   1. all_to_all, scatter dim 0, gather dim 1: x_r is [2w, 3] with
 *      x_r[i][b] = 1000 r + 3 i + b; out is [2, 3w] with
 *      out[a][3 j + b] = 1000 j + 3 (2 r + a) + b.
 *   2. all_gather along dim 0, rank r holding r + 1 rows of 4:
 *      y_r[i][b] = 1000 r + 4 i + b.
 *   3. all_reduce sum of z_r[i] = r + i over 5 elements.
 * Usage: spcoll_cpeer SOCKET NAME WORLD RANK. Exit 0 when all is right. */
#include <stdio.h>
#include <stdlib.h>

#include "spcoll.h"

static int fail(spc_client *c, const char *what, int rc) {
  fprintf(stderr, "cpeer: %s failed: %s (%s)\n", what, spc_last_error(c),
          spc_strerror(rc));
  return 1;
}

static int expect(const char *what, const float *got, const float *want,
                  int n, int rank) {
  for (int i = 0; i < n; i++)
    if (got[i] != want[i]) {
      fprintf(stderr, "cpeer rank %d: %s element %d is %g, want %g\n", rank,
              what, i, got[i], want[i]);
      return 1;
    }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s SOCKET NAME WORLD RANK\n", argv[0]);
    return 2;
  }
  int w = atoi(argv[3]), r = atoi(argv[4]), bad = 0, rc;
  spc_client *c;
  spc_group *g;
  spc_buffer *b;
  if ((rc = spc_connect(argv[1], "c", &c)) < 0)
    return fail(NULL, "connect", rc);
  if ((rc = spc_group_join(c, argv[2], w, r, &g)) < 0)
    return fail(c, "join", rc);
  if ((rc = spc_buffer_alloc(c, 1 << 16, &b)) < 0)
    return fail(c, "buffer_alloc", rc);
  spc_tensor in, out;
  float *want = calloc(4096, sizeof(float));

  /* 1. all_to_all */
  int64_t xs[2] = {2 * w, 3}, os[2] = {2, 3 * w};
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 2, xs);
  spc_tensor_init(&out, b, 16384, SPC_FLOAT32, 2, os);
  float *x = spc_tensor_data(&in), *y = spc_tensor_data(&out);
  for (int i = 0; i < 2 * w * 3; i++)
    x[i] = 1000.0f * r + i;
  if ((rc = spc_all_to_all(g, &in, &out, 0, 1, 0)) < 0)
    return fail(c, "all_to_all", rc);
  for (int a = 0; a < 2; a++)
    for (int j = 0; j < w; j++)
      for (int k = 0; k < 3; k++)
        want[a * 3 * w + 3 * j + k] = 1000.0f * j + 3 * (2 * r + a) + k;
  bad |= expect("all_to_all", y, want, 6 * w, r);

  /* 2. all_gather, unequal rows */
  int64_t sizes[64], ys[2] = {r + 1, 4}, gs[2] = {0, 4};
  for (int j = 0; j < w; j++)
    sizes[j] = j + 1, gs[0] += j + 1;
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 2, ys);
  spc_tensor_init(&out, b, 16384, SPC_FLOAT32, 2, gs);
  for (int i = 0; i < (r + 1) * 4; i++)
    x[i] = 1000.0f * r + i;
  if ((rc = spc_all_gather(g, &in, &out, 0, sizes)) < 0)
    return fail(c, "all_gather", rc);
  int n = 0;
  for (int j = 0; j < w; j++)
    for (int i = 0; i < (j + 1) * 4; i++)
      want[n++] = 1000.0f * j + i;
  bad |= expect("all_gather", y, want, n, r);

  /* 3. all_reduce */
  int64_t zs[1] = {5};
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, zs);
  spc_tensor_init(&out, b, 16384, SPC_FLOAT32, 1, zs);
  for (int i = 0; i < 5; i++)
    x[i] = (float)(r + i);
  if ((rc = spc_all_reduce(g, &in, &out, SPC_SUM)) < 0)
    return fail(c, "all_reduce", rc);
  for (int i = 0; i < 5; i++)
    want[i] = (float)(w * i + w * (w - 1) / 2);
  bad |= expect("all_reduce", y, want, 5, r);

  free(want);
  spc_group_leave(g);
  spc_disconnect(c);
  if (!bad)
    printf("cpeer rank %d: all_to_all, all_gather, all_reduce ok\n", r);
  return bad;
}
