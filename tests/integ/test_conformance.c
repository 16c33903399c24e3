/* Conformance against the seed libraries: golden vectors made by running
 * the seeds' own code (imported by scripts/conformance_import.py into
 * $SPC_TEST_DATA/conformance/ws2, see cases.txt there for the format) are
 * replayed through a private spcolld. For each case every rank joins a
 * group named after it, loads its input, runs the forward "program" (one
 * or more of our ops), compares the output bytes exactly, then runs the
 * backward on the recorded gradout and compares gradin.
 *
 * One line per failing case, then "conformance: N passed, N failed, N
 * skipped"; skipped cases are not passes. The suite fails if any case
 * fails. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"

#define MAX_WORLD 8
#define MAX_LIST 64
#define MSG_LEN 320

enum { R_IN, R_OUT, R_GRADOUT, R_GRADIN, R_MID, R_MIDB, NROLES };
static const char *const role_names[NROLES] = {"in", "out", "gradout",
                                               "gradin", "mid", "midb"};

typedef struct {
  int present;
  char file[96];                /* "" for a scratch tensor */
  int ndim;
  int64_t shape[SPC_MAX_DIMS];
} tensor_spec;

typedef struct {
  char name[128];
  char op[96];
  int world;
  int ulysses, ring;            /* 0, 0 unless a *_with_cp case */
  spc_dtype dtype;
  int expect_einval;            /* the forward must fail with SPC_EINVAL */
  tensor_spec t[MAX_WORLD][NROLES];
  char fwd[512], bwd[512];      /* programs: steps separated by ';' */
  char skip[128];               /* reason, or "" */
} conf_case;

/* What a rank reports to the parent, through memory shared across fork:
 * the first failure of each phase. */
typedef struct {
  char msg[2][MSG_LEN];         /* [0] fwd, [1] bwd */
} rank_report;

static spt_daemon daemon_;
static rank_report *reports;    /* MAX_WORLD entries, MAP_SHARED */
static char case_dir[512];      /* folder of the current case's files */

/* ---- cases.txt --------------------------------------------------------- */

static int parse_shape(const char *s, tensor_spec *t) {
  t->ndim = 0;
  if (*s == '\0')
    return -1;
  while (*s != '\0' && t->ndim < SPC_MAX_DIMS) {
    char *end;
    t->shape[t->ndim++] = strtoll(s, &end, 10);
    if (end == s || (*end != ',' && *end != '\0'))
      return -1;
    s = *end == ',' ? end + 1 : end;
  }
  return *s == '\0' ? 0 : -1;
}

/* "t.RANK.ROLE=FILE SHAPE" */
static int parse_tensor(conf_case *k, const char *key, const char *val) {
  int rank;
  char role[16];
  if (sscanf(key, "t.%d.%15s", &rank, role) != 2 || rank < 0 ||
      rank >= MAX_WORLD)
    return -1;
  for (int r = 0; r < NROLES; r++) {
    if (strcmp(role, role_names[r]) != 0)
      continue;
    tensor_spec *t = &k->t[rank][r];
    const char *sp = strchr(val, ' ');
    if (sp == NULL || (size_t)(sp - val) >= sizeof(t->file))
      return -1;
    snprintf(t->file, sizeof(t->file), "%.*s", (int)(sp - val), val);
    if (strcmp(t->file, "-") == 0)
      t->file[0] = '\0';
    t->present = 1;
    return parse_shape(sp + 1, t);
  }
  return -1;
}

static int parse_kv(conf_case *k, const char *key, const char *val) {
  if (strncmp(key, "t.", 2) == 0)
    return parse_tensor(k, key, val);
  if (strcmp(key, "world") == 0)
    return (k->world = atoi(val)) >= 1 && k->world <= MAX_WORLD ? 0 : -1;
  if (strcmp(key, "dtype") == 0) {
    k->dtype = strcmp(val, "int64") == 0 ? SPC_INT64 : SPC_FLOAT32;
    return strcmp(val, "int64") == 0 || strcmp(val, "float32") == 0 ? 0 : -1;
  }
  if (strcmp(key, "cp") == 0)
    return sscanf(val, "%d,%d", &k->ulysses, &k->ring) == 2 ? 0 : -1;
  if (strcmp(key, "expect") == 0) {
    k->expect_einval = strcmp(val, "einval") == 0;
    return k->expect_einval || strcmp(val, "ok") == 0 ? 0 : -1;
  }
  if (strcmp(key, "fwd") == 0 || strcmp(key, "bwd") == 0) {
    char *dst = key[0] == 'f' ? k->fwd : k->bwd;
    return snprintf(dst, sizeof(k->fwd), "%s", val) < (int)sizeof(k->fwd)
               ? 0 : -1;
  }
  if (strcmp(key, "op") == 0) {
    snprintf(k->op, sizeof(k->op), "%s", val);
    return 0;
  }
  return strncmp(key, "from.", 5) == 0 ? 0 : -1; /* from.*: for readers */
}

/* Read every case of path into *cases_p (malloc'ed). Returns the count, or
 * -1 after printing the bad line. */
static int load_cases(const char *path, conf_case **cases_p) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr, "conformance: cannot open %s: %s (run "
            "scripts/conformance_import.py)\n", path, strerror(errno));
    return -1;
  }
  conf_case *cases = NULL, *k = NULL;
  int n = 0, lineno = 0, bad = 0;
  char line[1024];
  while (!bad && fgets(line, sizeof(line), f) != NULL) {
    lineno++;
    line[strcspn(line, "\n")] = '\0';
    if (line[0] == '#' || line[0] == '\0')
      continue;
    if (k == NULL && (strncmp(line, "case ", 5) == 0 ||
                      strncmp(line, "skip ", 5) == 0)) {
      conf_case *grown = realloc(cases, (size_t)(n + 1) * sizeof(*cases));
      bad = grown == NULL;
      if (bad)
        break;
      cases = grown;
      k = memset(&cases[n++], 0, sizeof(*k));
      k->world = 2;
      int skip = line[0] == 's';
      char *name = line + 5, *rest = strchr(name, ' ');
      if (skip && rest != NULL)
        *rest++ = '\0';
      snprintf(k->name, sizeof(k->name), "%s", name);
      if (skip) {
        snprintf(k->skip, sizeof(k->skip), "%s", rest ? rest : "skipped");
        k = NULL;
      }
    } else if (k != NULL && strcmp(line, "end") == 0) {
      bad = k->fwd[0] == '\0';
      k = NULL;
    } else {
      char *eq = strchr(line, '=');
      bad = k == NULL || eq == NULL;
      if (!bad) {
        *eq = '\0';
        bad = parse_kv(k, line, eq + 1) != 0;
      }
    }
  }
  fclose(f);
  if (bad || k != NULL) {
    fprintf(stderr, "conformance: %s:%d: cannot parse\n", path, lineno);
    free(cases);
    return -1;
  }
  *cases_p = cases;
  return n;
}

/* ---- per-rank state ---------------------------------------------------- */

typedef struct {
  int rank;
  const conf_case *k;
  spc_client *c;
  spc_group *world, *ring, *uly;
  spc_buffer *buf;
  spc_tensor t[NROLES];
  int have[NROLES];
  void *expect[NROLES];         /* expected out / gradin bytes */
} rank_ctx;

static size_t numel(const tensor_spec *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++)
    n *= (size_t)t->shape[i];
  return n;
}

static void report(const rank_ctx *x, int phase, const char *fmt, ...) {
  char *m = reports[x->rank].msg[phase];
  if (m[0] != '\0')
    return; /* keep the first failure of the phase */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, MSG_LEN, fmt, ap);
  va_end(ap);
}

/* Read exactly `len` bytes of the case's file into dst. */
static int read_file(const rank_ctx *x, const char *file, void *dst,
                     size_t len) {
  char path[700];
  snprintf(path, sizeof(path), "%s/%s", case_dir, file);
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    report(x, 0, "runner: cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  size_t got = fread(dst, 1, len, f);
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (got != len || extra) {
    report(x, 0, "runner: %s is not %zu bytes", path, len);
    return -1;
  }
  return 0;
}

/* One buffer holds every tensor of the rank, 64-byte aligned; inputs come
 * from their files, results are poisoned so an unwritten element shows. */
static int setup_tensors(rank_ctx *x) {
  const tensor_spec *ts = x->k->t[x->rank];
  size_t es = spc_dtype_size(x->k->dtype), off[NROLES], total = 64;
  for (int r = 0; r < NROLES; r++) {
    off[r] = total;
    if (ts[r].present)
      total += (numel(&ts[r]) * es + 63) / 64 * 64;
  }
  int rc = spc_buffer_alloc(x->c, total, &x->buf);
  for (int r = 0; r < NROLES && rc == 0; r++) {
    if (!ts[r].present)
      continue;
    x->have[r] = 1;
    rc = spc_tensor_init(&x->t[r], x->buf, off[r], x->k->dtype, ts[r].ndim,
                         ts[r].shape);
  }
  if (rc < 0) {
    report(x, 0, "runner: buffer setup: %s", spc_last_error(x->c));
    return -1;
  }
  for (int r = 0; r < NROLES; r++) {
    if (!x->have[r])
      continue;
    size_t len = numel(&ts[r]) * es;
    void *data = spc_tensor_data(&x->t[r]);
    if (r == R_IN || r == R_GRADOUT) {
      if (read_file(x, ts[r].file, data, len) < 0)
        return -1;
      continue;
    }
    memset(data, 0xEE, len);
    if (ts[r].file[0] == '\0')
      continue;
    x->expect[r] = malloc(len ? len : 1);
    if (x->expect[r] == NULL || read_file(x, ts[r].file, x->expect[r], len))
      return -1;
  }
  return 0;
}

/* ---- programs ---------------------------------------------------------- */

typedef struct {
  int dim, s, g;
  int64_t n;
  spc_grad_scale scale;
  int64_t list[MAX_LIST], list2[MAX_LIST]; /* sizes|seqs|ins, outs */
  int nlist, nlist2;            /* -1: "-" (NULL) */
} step_args;

/* A value "a/b/...": rank r's alternative (or the only one). Returns a
 * pointer into a static copy. */
static const char *pick(const char *val, int rank) {
  static char one[256];
  const char *p = val;
  for (int i = 0; i < rank && strchr(p, '/') != NULL; i++)
    p = strchr(p, '/') + 1;
  snprintf(one, sizeof(one), "%.*s", (int)strcspn(p, "/"), p);
  return one;
}

static int parse_list(const char *s, int64_t *out, int *n_p) {
  int n = 0;
  if (strcmp(s, "-") == 0) {
    *n_p = -1;
    return 0;
  }
  while (*s != '\0' && n < MAX_LIST) {
    char *end;
    out[n++] = strtoll(s, &end, 10);
    if (end == s)
      return -1;
    s = *end == ',' ? end + 1 : end;
  }
  *n_p = n;
  return *s == '\0' ? 0 : -1;
}

static int parse_arg(step_args *a, const char *kv, int rank) {
  char key[16];
  const char *eq = strchr(kv, '=');
  if (eq == NULL || eq - kv >= (int)sizeof(key))
    return -1;
  snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
  const char *v = pick(eq + 1, rank);
  if (strcmp(key, "dim") == 0) a->dim = atoi(v);
  else if (strcmp(key, "s") == 0) a->s = atoi(v);
  else if (strcmp(key, "g") == 0) a->g = atoi(v);
  else if (strcmp(key, "n") == 0) a->n = strtoll(v, NULL, 10);
  else if (strcmp(key, "scale") == 0) {
    a->scale = strcmp(v, "up") == 0     ? SPC_SCALE_UP
               : strcmp(v, "down") == 0 ? SPC_SCALE_DOWN
                                        : SPC_SCALE_NONE;
    return a->scale == SPC_SCALE_NONE && strcmp(v, "none") != 0 ? -1 : 0;
  }
  else if (strcmp(key, "sizes") == 0 || strcmp(key, "seqs") == 0 ||
           strcmp(key, "ins") == 0)
    return parse_list(v, a->list, &a->nlist);
  else if (strcmp(key, "outs") == 0)
    return parse_list(v, a->list2, &a->nlist2);
  else
    return -1;
  return 0;
}

#define LIST(a) ((a)->nlist < 0 ? NULL : (a)->list)
typedef const spc_tensor ct;
typedef int (*op_fn)(spc_group *g, ct *src, ct *dst, const step_args *a);

/* The seeds' functions in our API, one entry per op of cases.txt. */
static int op_copy(spc_group *g, ct *s, ct *d, const step_args *a) {
  (void)g, (void)a; /* identity forward (Megatron copy_to): local */
  size_t n = spc_dtype_size(s->dtype);
  for (int i = 0; i < s->ndim; i++)
    n *= (size_t)s->shape[i];
  memcpy(spc_tensor_data(d), spc_tensor_data(s), n);
  return SPC_OK;
}
static int op_all_reduce(spc_group *g, ct *s, ct *d, const step_args *a) {
  (void)a; /* into a separate output: Megatron's in-place form is a bug */
  return spc_all_reduce(g, s, d, SPC_SUM);
}
static int op_split(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_split(g, s, d, a->dim, LIST(a));
}
static int op_split_bwd(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_split_backward(g, s, d, a->dim, LIST(a), a->scale);
}
static int op_all_gather(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_all_gather(g, s, d, a->dim, LIST(a));
}
static int op_ag_bwd_own(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_all_gather_backward_own(g, s, d, a->dim, LIST(a), a->scale);
}
static int op_ag_bwd_sum(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_all_gather_backward_sum(g, s, d, a->dim, LIST(a));
}
static int op_reduce_scatter(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_reduce_scatter(g, s, d, a->dim, LIST(a));
}
static int op_a2a(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_all_to_all(g, s, d, a->s, a->g, a->n);
}
static int op_a2a_bwd(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_all_to_all_backward(g, s, d, a->s, a->g, a->n);
}
static int op_a2av(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_all_to_all_v(g, s, d, a->list, a->list2);
}
static int op_sp2hp(spc_group *g, ct *s, ct *d, const step_args *a) {
  (void)a;
  return spc_sp2hp(g, s, d);
}
static int op_hp2sp(spc_group *g, ct *s, ct *d, const step_args *a) {
  (void)a;
  return spc_hp2sp(g, s, d);
}
static int op_zz_split(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_zigzag_split(g, s, d, a->dim);
}
static int op_zz_split_bwd(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_zigzag_split_backward(g, s, d, a->dim);
}
static int op_zz_gather(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_zigzag_gather(g, s, d, a->dim);
}
static int op_zz_gather_bwd(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_zigzag_gather_backward(g, s, d, a->dim);
}
static int op_pk_split(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_packed_split(g, s, d, a->dim, a->list, a->nlist);
}
static int op_pk_split_bwd(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_packed_split_backward(g, s, d, a->dim, a->list, a->nlist);
}
static int op_pk_gather(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_packed_gather(g, s, d, a->dim, a->list, a->nlist);
}
static int op_pk_gather_bwd(spc_group *g, ct *s, ct *d, const step_args *a) {
  return spc_packed_gather_backward(g, s, d, a->dim, a->list, a->nlist);
}

/* Op names of cases.txt: op_NAME above. */
#define OP(name) {#name, op_##name}
static const struct {
  const char *name;
  op_fn fn;
} op_table[] = {
    OP(copy), OP(all_reduce), OP(reduce_scatter),
    OP(split), OP(split_bwd), OP(all_gather), OP(ag_bwd_own), OP(ag_bwd_sum),
    OP(a2a), OP(a2a_bwd), OP(a2av), OP(sp2hp), OP(hp2sp),
    OP(zz_split), OP(zz_split_bwd), OP(zz_gather), OP(zz_gather_bwd),
    OP(pk_split), OP(pk_split_bwd), OP(pk_gather), OP(pk_gather_bwd),
};
#undef OP

static int role_of(const char *name) {
  for (int r = 0; r < NROLES; r++)
    if (strcmp(name, role_names[r]) == 0)
      return r;
  return -1;
}

/* Run one step "OP GROUP SRC>DST key=value...". Returns the op's status, or
 * 1 for a step the runner cannot parse (reported as the runner's fault). */
static int run_step(rank_ctx *x, int phase, char *text) {
  char *save, *op = strtok_r(text, " ", &save);
  char *grp = strtok_r(NULL, " ", &save), *io = strtok_r(NULL, " ", &save);
  char *gt = io ? strchr(io, '>') : NULL;
  step_args a = {.nlist = -1, .nlist2 = -1};
  op_fn fn = NULL;
  for (size_t i = 0; op && i < sizeof(op_table) / sizeof(op_table[0]); i++)
    if (strcmp(op, op_table[i].name) == 0)
      fn = op_table[i].fn;
  spc_group *g = !grp                     ? NULL
                 : strcmp(grp, "world") == 0 ? x->world
                 : strcmp(grp, "ring") == 0  ? x->ring
                 : strcmp(grp, "uly") == 0   ? x->uly
                                             : NULL;
  int src = -1, dst = -1;
  if (gt != NULL) {
    *gt = '\0';
    src = role_of(io), dst = role_of(gt + 1);
  }
  int bad = fn == NULL || g == NULL || src < 0 || dst < 0 || !x->have[src] ||
            !x->have[dst];
  for (char *kv; !bad && (kv = strtok_r(NULL, " ", &save)) != NULL;)
    bad = parse_arg(&a, kv, x->rank) != 0;
  if (bad) {
    report(x, phase, "runner: cannot run step '%s'", op ? op : "");
    return 1;
  }
  return fn(g, &x->t[src], &x->t[dst], &a);
}

/* Run a program; 0 when every step succeeded, else the first failing
 * step's status (reported unless it is the expected SPC_EINVAL). */
static int run_program(rank_ctx *x, int phase, const char *prog) {
  char copy[512];
  snprintf(copy, sizeof(copy), "%s", prog);
  char *save;
  for (char *s = strtok_r(copy, ";", &save); s; s = strtok_r(NULL, ";", &save)) {
    char text[512];
    snprintf(text, sizeof(text), "%s", s);
    int rc = run_step(x, phase, text);
    if (rc == 0)
      continue;
    if (rc < 0 && !(phase == 0 && x->k->expect_einval && rc == SPC_EINVAL))
      report(x, phase, "step '%s' failed: %s: %s", s, spc_strerror(rc),
             spc_last_error(x->c));
    return rc;
  }
  return 0;
}

/* ---- comparison -------------------------------------------------------- */

static void fmt_elem(char *out, size_t len, spc_dtype dt, const void *p) {
  if (dt == SPC_INT64) {
    /* Seed ints are (tag << 40) | (flat index << 8) | random byte: show
     * where the element came from. */
    int64_t v;
    memcpy(&v, p, 8);
    snprintf(out, len, "0x%" PRIx64 " (tag %" PRId64 " idx %" PRId64 ")",
             (uint64_t)v, v >> 40, (v >> 8) & 0xffffffff);
  } else {
    float f;
    memcpy(&f, p, 4);
    snprintf(out, len, "%.9g", f);
  }
}

/* Exact comparison of role r with its expectation; reports the first
 * differing element with its index. Returns 0 when equal. */
static int compare(const rank_ctx *x, int phase, int r) {
  const tensor_spec *ts = &x->k->t[x->rank][r];
  if (x->expect[r] == NULL) {
    report(x, phase, "runner: no expected %s", role_names[r]);
    return -1;
  }
  size_t es = spc_dtype_size(x->k->dtype), n = numel(ts), bad = 0, first = 0;
  const char *got = spc_tensor_data(&x->t[r]), *exp = x->expect[r];
  for (size_t i = n; i-- > 0;)
    if (memcmp(got + i * es, exp + i * es, es) != 0)
      bad++, first = i;
  if (bad == 0)
    return 0;
  char idx[96] = "", e[64], g[64];
  size_t rem = first;
  for (int d = ts->ndim - 1; d >= 0; d--) { /* flat index -> [i, j, ...] */
    char part[96];
    snprintf(part, sizeof(part), "%" PRId64 "%s%s",
             (int64_t)(rem % (size_t)ts->shape[d]), d < ts->ndim - 1 ? "," : "",
             idx);
    snprintf(idx, sizeof(idx), "%s", part);
    rem /= (size_t)ts->shape[d];
  }
  fmt_elem(e, sizeof(e), x->k->dtype, exp + first * es);
  fmt_elem(g, sizeof(g), x->k->dtype, got + first * es);
  report(x, phase, "%s element %zu [%s]: expected %s, got %s (%zu of %zu "
         "differ)", role_names[r], first, idx, e, g, bad, n);
  return -1;
}

/* ---- one case on one rank ---------------------------------------------- */

static int case_body(rank_ctx *x) {
  const conf_case *k = x->k;
  if (setup_tensors(x) < 0)
    return -1;
  int rc = run_program(x, 0, k->fwd);
  if (k->expect_einval) {
    if (rc == 0)
      report(x, 0, "expected SPC_EINVAL (seed raised), the op succeeded");
    return rc == SPC_EINVAL ? 0 : -1;
  }
  if (rc != 0)
    return -1; /* the ranks may disagree on what ran: stop here */
  int failed = compare(x, 0, R_OUT) != 0;
  if (k->bwd[0] != '\0') {
    if (run_program(x, 1, k->bwd) != 0)
      return -1;
    failed |= compare(x, 1, R_GRADIN) != 0;
  }
  return failed ? -1 : 0;
}

static int case_rank(int rank, int world, void *arg) {
  rank_ctx x = {.rank = rank, .k = arg};
  x.c = spt_connect(daemon_.socket);
  if (x.c == NULL || spc_group_join(x.c, x.k->name, world, rank,
                                    &x.world) < 0) {
    report(&x, 0, "runner: connect/join: %s",
           x.c ? spc_last_error(x.c) : spc_last_error(NULL));
    spc_disconnect(x.c);
    return 0;
  }
  /* Hybrid CP: ring groups are consecutive ranks, Ulysses groups stride R
   * (global rank = u * R + r). Every rank makes both, in the same order. */
  if (x.k->ring > 0 &&
      (spc_group_split(x.world, rank / x.k->ring, rank, &x.ring) < 0 ||
       spc_group_split(x.world, rank % x.k->ring, rank, &x.uly) < 0))
    report(&x, 0, "group split: %s", spc_last_error(x.c));
  else
    (void)case_body(&x); /* its failures are in reports[] */
  /* Leaving on failure makes the other ranks' pending ops fail
   * (SPC_EPEERLOST) instead of hanging. */
  for (int r = 0; r < NROLES; r++)
    free(x.expect[r]);
  spc_buffer_free(x.buf);
  if (x.uly)
    spc_group_leave(x.uly);
  if (x.ring)
    spc_group_leave(x.ring);
  spc_group_leave(x.world);
  spc_disconnect(x.c);
  /* Failures are in reports[]: exit 0 so that the harness's "rank
   * failed" line only shows a rank that crashed or hung. */
  return 0;
}

/* ---- the suite --------------------------------------------------------- */

static const char *data_root(void) {
  const char *d = getenv("SPC_TEST_DATA");
  return d && *d ? d : "tests/data";
}

/* Run case k; 0 when it passed, else prints its one failure line. */
static int run_case(const char *set_dir, const conf_case *k) {
  memset(reports, 0, MAX_WORLD * sizeof(*reports));
  snprintf(case_dir, sizeof(case_dir), "%s/%s", set_dir, k->name);
  int dead = spt_run_ranks(k->world, case_rank, (void *)k, 20);
  const char *first = NULL;
  int frank = 0, fphase = 0;
  char also[256] = "";
  for (int r = 0; r < k->world; r++)
    for (int ph = 0; ph < 2; ph++) {
      const char *m = reports[r].msg[ph];
      if (m[0] == '\0')
        continue;
      if (first == NULL) {
        first = m, frank = r, fphase = ph;
      } else {
        size_t l = strlen(also);
        snprintf(also + l, sizeof(also) - l, "%s rank %d %s",
                 also[0] ? ";" : " [also:", r, ph ? "bwd" : "fwd");
      }
    }
  if (first == NULL && dead == 0)
    return 0;
  if (also[0] != '\0')
    strncat(also, "]", sizeof(also) - strlen(also) - 1);
  if (first == NULL)
    printf("FAIL %s (%s): %d rank(s) died or hung without a report\n",
           k->name, k->op, dead);
  else
    printf("FAIL %s (%s) rank %d %s: %s%s\n", k->name, k->op, frank,
           fphase ? "bwd" : "fwd", first, also);
  fflush(stdout);
  return 1;
}

static void setup(void) {
  ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
}

static void teardown(void) {
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
}

START_TEST(seed_vectors_ws2) {
  char set_dir[400], path[450];
  snprintf(set_dir, sizeof(set_dir), "%s/conformance/ws2", data_root());
  snprintf(path, sizeof(path), "%s/cases.txt", set_dir);
  conf_case *cases = NULL;
  int n = load_cases(path, &cases);
  ck_assert_msg(n > 0, "no conformance cases in %s", path);
  reports = mmap(NULL, MAX_WORLD * sizeof(*reports), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(reports, MAP_FAILED);
  int passed = 0, failed = 0, skipped = 0;
  for (int i = 0; i < n; i++) {
    if (cases[i].skip[0] != '\0') {
      printf("SKIP %s: %s\n", cases[i].name, cases[i].skip);
      skipped++;
    } else if (run_case(set_dir, &cases[i]) == 0)
      passed++;
    else
      failed++;
  }
  printf("conformance: %d passed, %d failed, %d skipped\n", passed, failed,
         skipped);
  fflush(stdout);
  munmap(reports, MAX_WORLD * sizeof(*reports));
  free(cases);
  ck_assert_msg(failed == 0, "%d conformance case(s) failed", failed);
}
END_TEST

int main(void) {
  Suite *s = suite_create("conformance");
  TCase *tc = tcase_create("conformance");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 900);
  tcase_add_test(tc, seed_vectors_ws2);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
