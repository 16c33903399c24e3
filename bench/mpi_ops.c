#include "mpi_ops.h"

#include <stdlib.h>
#include <string.h>

void mpi_point_of(bench_op op, const bench_shape *s, mpi_point *p) {
  memset(p, 0, sizeof(*p));
  p->n_in = s->in_bytes / 4;
  p->n_out = s->out_bytes / 4;
  if (op == BENCH_ULYSSES) {
    p->n_stage = p->n_in;
    memcpy(p->shape, s->in, sizeof(p->shape));
  }
  p->bytes = s->bytes;
}

const char *mpi_point_unfit(const mpi_point *p) {
  return p->n_in > (size_t)0x7fffffff || p->n_out > (size_t)0x7fffffff
             ? "count over MPI's int" : NULL;
}

size_t mpi_point_footprint(const mpi_point *p, int w) {
  /* Open MPI's reductions take a temporary the size of the buffer. */
  return (size_t)w * (p->n_in + p->n_out + 2 * p->n_stage + p->n_in) * 4;
}

int mpi_point_alloc(mpi_point *p, int rank) {
  p->in = malloc(p->n_in * 4);
  p->out = malloc(p->n_out * 4);
  p->pack = p->n_stage ? malloc(p->n_stage * 4) : NULL;
  p->unpack = p->n_stage ? malloc(p->n_stage * 4) : NULL;
  if (p->in == NULL || p->out == NULL ||
      (p->n_stage && (p->pack == NULL || p->unpack == NULL))) {
    fprintf(stderr, "%s rank %d: malloc of %zu + %zu + 2 x %zu floats "
            "failed\n", program_invocation_short_name, rank, p->n_in,
            p->n_out, p->n_stage);
    mpi_point_free(p);
    return -1;
  }
  for (size_t i = 0; i < p->n_in; i++)
    p->in[i] = (float)((i + (size_t)rank) & 63);
  memset(p->out, 0, p->n_out * 4);
  if (p->n_stage) {
    memset(p->pack, 0, p->n_stage * 4);
    memset(p->unpack, 0, p->n_stage * 4);
  }
  return 0;
}

void mpi_point_free(mpi_point *p) {
  free(p->in);
  free(p->out);
  free(p->pack);
  free(p->unpack);
  p->in = p->out = p->pack = p->unpack = NULL;
}

/* The seeds' aligned all-to-all for scatter dim 2, gather dim 1:
 * x [b, s/P, h, d] -> reshape [b*s/P, P, h/P, d] -> transpose(0, 1)
 * .contiguous() -> all_to_all_single -> view [P, b, s/P, h/P, d] ->
 * transpose(0, 1).contiguous() -> [b, s, h/P, d]. */
static void ulysses_seeds(const mpi_point *p, int w) {
  size_t b = (size_t)p->shape[0], sl = (size_t)p->shape[1];
  size_t hp = (size_t)p->shape[2] / (size_t)w, d = (size_t)p->shape[3];
  size_t row = hp * d, rows = b * sl; /* floats per (token, rank) piece */
  for (size_t j = 0; j < (size_t)w; j++)
    for (size_t t = 0; t < rows; t++)
      memcpy(p->pack + (j * rows + t) * row, p->in + (t * (size_t)w + j) * row,
             row * 4);
  MPI_CHECK(MPI_Alltoall(p->pack, (int)(rows * row), MPI_FLOAT, p->unpack,
                         (int)(rows * row), MPI_FLOAT, MPI_COMM_WORLD));
  for (size_t j = 0; j < (size_t)w; j++)
    for (size_t bi = 0; bi < b; bi++)
      memcpy(p->out + (bi * (size_t)w + j) * sl * row,
             p->unpack + (j * b + bi) * sl * row, sl * row * 4);
}

void mpi_point_run(bench_op op, const mpi_point *p, int w) {
  switch (op) {
  case BENCH_ALL_GATHER:
    MPI_CHECK(MPI_Allgather(p->in, (int)p->n_in, MPI_FLOAT, p->out,
                            (int)p->n_in, MPI_FLOAT, MPI_COMM_WORLD));
    break;
  case BENCH_ALL_REDUCE:
    MPI_CHECK(MPI_Allreduce(p->in, p->out, (int)p->n_in, MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD));
    break;
  case BENCH_REDUCE_SCATTER:
    MPI_CHECK(MPI_Reduce_scatter_block(p->in, p->out, (int)p->n_out,
                                       MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    break;
  case BENCH_ALL_TO_ALL:
    MPI_CHECK(MPI_Alltoall(p->in, (int)(p->n_in / (size_t)w), MPI_FLOAT,
                           p->out, (int)(p->n_in / (size_t)w), MPI_FLOAT,
                           MPI_COMM_WORLD));
    break;
  default:
    ulysses_seeds(p, w);
  }
}
