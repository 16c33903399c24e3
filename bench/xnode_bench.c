/* Cross-node spcoll: 3 daemons peering over UCX (loopback tcp unless
 * UCX_TLS says otherwise), 2 ranks each (--nodes, --ranks-per-node),
 * all_to_all and all_gather from 2 KiB to --max-bytes per rank; printed
 * next to ucx_perftest tag_bw of the same sizes, read from the CSV
 * scripts/bench_ucx.sh wrote in the same run (make bench-multinode), with
 * what node 0 sent per op as its stats count it (UCX messages and bytes):
 * what scripts/scale_model.py predicts at the same scale (docs/scale.md).
 * With --spcolld-noauth (spcolld built without the control messages'
 * MACs and the tags' salt, mk/multinode.mk), every point runs again on a
 * second set of daemons of that build, alternating: what authentication
 * costs, in the same run. Prints numbers; asserts nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "harness.h"

#define XB_MAXW 128

static int xb_nnodes = 3, xb_world = 2; /* ranks per node until main multiplies */

typedef struct {
  int op;                     /* 0: all_to_all, 1: all_gather */
  size_t bytes;               /* per rank input */
  int iters;
  double secs[XB_MAXW];       /* each rank's timed loop */
} xb_point;

static spt_nodes xb_nodes, xb_plain; /* authenticated; without the MACs */
static spt_nodes *xb_cur = &xb_nodes;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int xb_op(spc_group *g, const xb_point *p, const spc_tensor *in,
                 const spc_tensor *out) {
  return p->op == 0 ? spc_all_to_all(g, in, out, 0, 1, 0)
                    : spc_all_gather(g, in, out, 0, NULL);
}

/* One rank: a warm-up op, then the timed loop. */
static int xb_rank(int rank, int world, void *arg) {
  xb_point *p = arg;
  spc_client *c = spt_connect(xb_cur->d[rank % xb_nnodes].socket);
  spc_group *g;
  spc_buffer *b;
  char name[64];
  snprintf(name, sizeof(name), "xb-%d-%zu", p->op, p->bytes);
  int64_t n = (int64_t)(p->bytes / 4) / world * world;
  if (c == NULL || spc_group_join(c, name, world, rank, &g) < 0 ||
      spc_buffer_alloc(c, (size_t)n * 4 * (1 + world), &b) < 0)
    return 1;
  /* all_to_all: [w, n/w] scattered along 0, gathered along 1: [1, n].
   * all_gather: [n] in, [n * world] out. */
  int64_t is[2] = {world, n / world}, os[2] = {1, n};
  int64_t gi[1] = {n}, go[1] = {n * world};
  spc_tensor in, out;
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, p->op ? 1 : 2, p->op ? gi : is);
  spc_tensor_init(&out, b, (size_t)n * 4, SPC_FLOAT32, p->op ? 1 : 2,
                  p->op ? go : os);
  memset(spc_buffer_data(b), rank, (size_t)n * 4);
  if (xb_op(g, p, &in, &out) < 0) {
    fprintf(stderr, "rank %d: %s\n", rank, spc_last_error(c));
    return 1;
  }
  double t0 = now_s();
  for (int i = 0; i < p->iters; i++)
    if (xb_op(g, p, &in, &out) < 0) {
      fprintf(stderr, "rank %d: op %d: %s\n", rank, i + 1, spc_last_error(c));
      return 1;
    }
  p->secs[rank] = now_s() - t0;
  spc_buffer_free(b);
  spc_group_leave(g);
  spc_disconnect(c);
  return 0;
}

/* ucx_perftest tag_bw GB/s by size, from bench_ucx.sh's CSV. */
static double ucx_bw(const char *csv, size_t bytes) {
  FILE *f = csv ? fopen(csv, "r") : NULL;
  char line[512];
  double bw = 0;
  while (f && fgets(line, sizeof(line), f)) {
    char op[32];
    unsigned long long sz;
    double t, alg;
    if (sscanf(line, "%*[^,],%31[^,],%*d,%llu,%*d,%*[^,],%lf,%lf", op, &sz,
               &t, &alg) == 4 && strcmp(op, "tag_bw") == 0 && sz == bytes)
      bw = alg;
  }
  if (f)
    fclose(f);
  return bw;
}

/* The point on the node set N: its time per op in seconds (the slowest
 * rank's), 0 when it failed. */
static double xb_time(xb_point *p, spt_nodes *N) {
  xb_cur = N;
  memset(p->secs, 0, sizeof(p->secs));
  if (spt_run_ranks(xb_world, xb_rank, p, 600) != 0)
    return 0;
  double t = 0;
  for (int r = 0; r < xb_world; r++)
    t = p->secs[r] > t ? p->secs[r] : t;
  return t / p->iters;
}

static int xb_start(spt_nodes *N, const char *spcolld) {
  if (spcolld != NULL)
    setenv("SPCOLLD", spcolld, 1);
  if (spt_nodes_start(N, xb_nnodes, NULL) == 0)
    return 0;
  fprintf(stderr, "xnode-bench: the daemons (%s) did not start\n",
          getenv("SPCOLLD") ? getenv("SPCOLLD") : "build/bin/spcolld");
  return -1;
}

int main(int argc, char **argv) {
  size_t max = 16u << 20;
  const char *csv = NULL, *spcolld = NULL, *noauth = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--max-bytes") == 0)
      max = strtoull(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--ucx-csv") == 0)
      csv = argv[i + 1];
    else if (strcmp(argv[i], "--spcolld") == 0)
      spcolld = argv[i + 1];
    else if (strcmp(argv[i], "--spcolld-noauth") == 0)
      noauth = argv[i + 1];
    else if (strcmp(argv[i], "--nodes") == 0)
      xb_nnodes = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--ranks-per-node") == 0)
      xb_world = atoi(argv[i + 1]);
  }
  if (xb_nnodes < 2 || xb_nnodes > SPT_MAX_NODES || xb_world < 1 ||
      xb_nnodes * xb_world > XB_MAXW) {
    fprintf(stderr, "xnode-bench: --nodes 2..%d, --ranks-per-node so that "
            "the world is at most %d\n", SPT_MAX_NODES, XB_MAXW);
    return 2;
  }
  xb_world *= xb_nnodes; /* from here on: the world */
  if (xb_start(&xb_nodes, spcolld) < 0 ||
      (noauth != NULL && xb_start(&xb_plain, noauth) < 0))
    return 1;
  xb_point *p = mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  printf("# cross-node: %d nodes (UCX_TLS=%s), %d ranks (rank r on node r %% "
         "%d); node GB/s = bytes each node sends to others / time\n",
         xb_nnodes, getenv("UCX_TLS"), xb_world, xb_nnodes);
  if (noauth != NULL)
    printf("# noauth_us: the same op on daemons without the MACs and the "
           "tag salt (%s); auth_cost = time_us / noauth_us - 1\n", noauth);
  printf("%-10s %12s %10s %9s %9s %10s %12s %7s %8s %12s %10s %9s\n", "op",
         "bytes/rank", "time_us", "algbw", "busbw", "node_GB/s", "ucx_tag_bw",
         "ratio", "msgs/op", "bytes/op", "noauth_us", "auth_cost");
  double w = xb_world, share = 1.0 - 1.0 / xb_nnodes; /* remote fraction */
  for (int op = 0; op < 2; op++)
    /* bench_ucx.sh's ladder (8 B x4, then max), from 2 KiB */
    for (size_t bytes = 2048;; bytes = bytes * 4 > max ? max : bytes * 4) {
      memset(p, 0, sizeof(*p));
      p->op = op, p->bytes = bytes;
      long long m0 = spt_daemon_stat(&xb_nodes.d[0], "peer_streams_sent");
      long long b0 = spt_daemon_stat(&xb_nodes.d[0], "mover_ucx_bytes");
      p->iters = bytes <= (1u << 20) ? 50 : bytes <= (16u << 20) ? 10 : 3;
      double t = xb_time(p, &xb_nodes);
      long long m1 = spt_daemon_stat(&xb_nodes.d[0], "peer_streams_sent");
      long long b1 = spt_daemon_stat(&xb_nodes.d[0], "mover_ucx_bytes");
      double tp = noauth != NULL && t > 0 ? xb_time(p, &xb_plain) : 0;
      if (t == 0 || (noauth != NULL && tp == 0)) {
        fprintf(stderr, "xnode-bench: %s %zu failed\n",
                op ? "all_gather" : "all_to_all", bytes);
        break;
      }
      /* nccl-tests: algbw of all_to_all counts the input, all_gather the
       * output; busbw = algbw (n-1)/n for both. */
      double alg = (op ? bytes * w : bytes) / t / 1e9;
      /* Bytes a node sends: all_to_all, its ranks' blocks for remote
       * ranks; all_gather, its ranks' inputs once to every other node. */
      double node_out = op ? (w / xb_nnodes) * bytes * (xb_nnodes - 1)
                           : (w / xb_nnodes) * bytes * share;
      double ubw = ucx_bw(csv, bytes);
      /* What node 0 sent per op (the warm-up op included). */
      double ops = p->iters + 1;
      printf("%-10s %12zu %10.1f %9.3f %9.3f %10.3f %12.3f %7.2f %8.1f "
             "%12.0f", op ? "all_gather" : "all_to_all", bytes, t * 1e6,
             alg, alg * (w - 1) / w, node_out / t / 1e9, ubw,
             ubw > 0 ? node_out / t / 1e9 / ubw : 0.0,
             (double)(m1 - m0) / ops, (double)(b1 - b0) / ops);
      if (tp > 0)
        printf(" %10.1f %+8.1f%%", tp * 1e6, (t / tp - 1) * 100);
      putchar('\n');
      fflush(stdout);
      if (bytes >= max)
        break;
    }
  int bad = spt_nodes_stop(&xb_nodes);
  if (noauth != NULL)
    bad |= spt_nodes_stop(&xb_plain);
  return bad == 0 ? 0 : 1;
}
