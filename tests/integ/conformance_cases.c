/* The shared runner of the seed conformance suites: the case-file parser,
 * the per-rank engine (tensors, programs, exact comparison) and the loop
 * over a case file. See conformance_cases.h. */
#include "conformance_cases.h"

#include <check.h>

#include "check_run.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"

#define CONF_MSG_LEN 320
#define CONF_DTYPE_UNSET ((spc_dtype)-1)

/* ---- case files -------------------------------------------------------- */

static int parse_dtype(const char *s, spc_dtype *dt) {
  if (strcmp(s, "int64") == 0)
    *dt = SPC_INT64;
  else if (strcmp(s, "float32") == 0)
    *dt = SPC_FLOAT32;
  else if (strcmp(s, "bool") == 0) /* one byte per element, 0 or 1 */
    *dt = SPC_UINT8;
  else
    return -1;
  return 0;
}

static int parse_shape(const char *s, conf_tensor *t) {
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

/* "RANK.KEY" after the "t." or "r." prefix: the rank and the key. */
static int parse_rank_key(const char *s, int *rank, char *key) {
  char *end;
  long r = strtol(s, &end, 10);
  if (end == s || *end != '.' || r < 0 || r >= CONF_MAX_WORLD ||
      end[1] == '\0' || strlen(end + 1) >= CONF_KEY_LEN)
    return -1;
  *rank = (int)r;
  strcpy(key, end + 1);
  return 0;
}

/* "t.RANK.KEY=FILE SHAPE [DTYPE]" */
static int parse_tensor(conf_case *k, const char *key, char *val) {
  conf_tensor t = {.dtype = CONF_DTYPE_UNSET};
  char *save, *file = strtok_r(val, " ", &save);
  char *shape = strtok_r(NULL, " ", &save), *dt = strtok_r(NULL, " ", &save);
  if (parse_rank_key(key + 2, &t.rank, t.key) < 0 || shape == NULL ||
      strtok_r(NULL, " ", &save) != NULL || strlen(file) >= sizeof(t.file) ||
      parse_shape(shape, &t) < 0 || (dt && parse_dtype(dt, &t.dtype) < 0))
    return -1;
  if (strcmp(file, "-") != 0)
    strcpy(t.file, file);
  conf_tensor *grown = realloc(k->t, (size_t)(k->nt + 1) * sizeof(t));
  if (grown == NULL)
    return -1;
  k->t = grown;
  k->t[k->nt++] = t;
  return 0;
}

/* "r.RANK.NAME=VALUE" */
static int parse_result(conf_case *k, const char *key, const char *val) {
  conf_result r;
  char *end;
  r.value = strtoll(val, &end, 10);
  if (parse_rank_key(key + 2, &r.rank, r.key) < 0 || end == val || *end)
    return -1;
  conf_result *grown = realloc(k->res, (size_t)(k->nres + 1) * sizeof(r));
  if (grown == NULL)
    return -1;
  k->res = grown;
  k->res[k->nres++] = r;
  return 0;
}

static int parse_kv(conf_case *k, const char *key, char *val) {
  if (strncmp(key, "t.", 2) == 0)
    return parse_tensor(k, key, val);
  if (strncmp(key, "r.", 2) == 0)
    return parse_result(k, key, val);
  if (strcmp(key, "world") == 0)
    return (k->world = atoi(val)) >= 1 && k->world <= CONF_MAX_WORLD ? 0 : -1;
  if (strcmp(key, "dtype") == 0)
    return parse_dtype(val, &k->dtype);
  if (strcmp(key, "cp") == 0)
    return sscanf(val, "%d,%d", &k->ulysses, &k->ring) == 2 ? 0 : -1;
  if (strcmp(key, "expect") == 0) {
    k->expect_einval = strcmp(val, "einval") == 0;
    return k->expect_einval || strcmp(val, "ok") == 0 ? 0 : -1;
  }
  if (strcmp(key, "fwd") == 0 || strcmp(key, "bwd") == 0) {
    char **dst = key[0] == 'f' ? &k->fwd : &k->bwd;
    free(*dst);
    return (*dst = strdup(val)) != NULL ? 0 : -1;
  }
  if (strcmp(key, "op") == 0) {
    snprintf(k->op, sizeof(k->op), "%s", val);
    return 0;
  }
  return strncmp(key, "from.", 5) == 0 ? 0 : -1; /* from.*: for readers */
}

/* The end of a case: it has a forward, and its tensors a dtype. */
static int finish_case(conf_case *k) {
  for (int i = 0; i < k->nt; i++)
    if (k->t[i].dtype == CONF_DTYPE_UNSET)
      k->t[i].dtype = k->dtype;
  return k->fwd != NULL ? 0 : -1;
}

void conf_free_cases(conf_case *cases, int n) {
  for (int i = 0; i < n; i++) {
    free(cases[i].t);
    free(cases[i].res);
    free(cases[i].fwd);
    free(cases[i].bwd);
  }
  free(cases);
}

int conf_load_cases(const char *path, conf_case **cases_p) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr, "conformance: cannot open %s: %s (run "
            "scripts/conformance_import.py)\n", path, strerror(errno));
    return -1;
  }
  conf_case *cases = NULL, *k = NULL;
  int n = 0, lineno = 0, bad = 0;
  char *line = NULL;
  size_t cap = 0;
  while (!bad && getline(&line, &cap, f) >= 0) {
    lineno++;
    line[strcspn(line, "\n")] = '\0';
    if (line[0] == '#' || line[0] == '\0')
      continue;
    if (k == NULL && (strncmp(line, "case ", 5) == 0 ||
                      strncmp(line, "skip ", 5) == 0)) {
      conf_case *grown = realloc(cases, (size_t)(n + 1) * sizeof(*cases));
      if ((bad = grown == NULL))
        break;
      cases = grown;
      k = memset(&cases[n++], 0, sizeof(*k));
      k->world = 2;
      k->dtype = SPC_FLOAT32;
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
      bad = finish_case(k) != 0;
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
  free(line);
  fclose(f);
  if (bad || k != NULL) {
    fprintf(stderr, "conformance: %s:%d: cannot parse\n", path, lineno);
    conf_free_cases(cases, n);
    return -1;
  }
  *cases_p = cases;
  return n;
}

/* ---- per-rank state ---------------------------------------------------- */

/* What a rank reports to the parent, through memory shared across fork:
 * the first failure of each phase. */
typedef struct {
  char msg[2][CONF_MSG_LEN];    /* [0] fwd, [1] bwd */
} rank_report;

static rank_report *reports;    /* CONF_MAX_WORLD entries, MAP_SHARED */
static char case_dir[512];      /* folder of the current case's files */

typedef struct {
  const conf_case *k;
  const conf_op *ops;
  size_t nops;
  const char *socket;
} run_arg;

typedef struct {
  int rank;
  const conf_case *k;
  const run_arg *run;
  spc_client *c;
  spc_group *world, *ring, *uly;
  spc_buffer *buf;
  spc_tensor *t;                /* k->nt entries; this rank's are set */
  char *have;
  void **expect;                /* expected bytes of out / gradin */
  int64_t *got;                 /* k->nres results, as computed */
  char *got_set;
} rank_ctx;

size_t conf_numel(conf_t *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++)
    n *= (size_t)t->shape[i];
  return n;
}

int conf_shape_is(conf_t *t, int ndim, const int64_t *shape) {
  return t->ndim == ndim &&
         memcmp(t->shape, shape, (size_t)ndim * sizeof(*shape)) == 0;
}

static size_t nbytes(conf_t *t) {
  return conf_numel(t) * spc_dtype_size(t->dtype);
}

/* KEY is ROLE or ROLE.NAME */
static int role_is(const char *key, const char *role) {
  size_t n = strlen(role);
  return strncmp(key, role, n) == 0 && (key[n] == '\0' || key[n] == '.');
}

static void report(const rank_ctx *x, int phase, const char *fmt, ...) {
  char *m = reports[x->rank].msg[phase];
  if (m[0] != '\0')
    return; /* keep the first failure of the phase */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, CONF_MSG_LEN, fmt, ap);
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

static int mine(const rank_ctx *x, int i) {
  return x->k->t[i].rank == x->rank;
}

/* One buffer holds every tensor of the rank, 64-byte aligned; inputs come
 * from their files, the rest is poisoned so an unwritten element shows. */
static int setup_tensors(rank_ctx *x) {
  const conf_case *k = x->k;
  size_t n = (size_t)(k->nt > 0 ? k->nt : 1);
  size_t nr = (size_t)(k->nres > 0 ? k->nres : 1), total = 64;
  x->t = calloc(n, sizeof(*x->t));
  x->have = calloc(n, 1);
  x->expect = calloc(n, sizeof(*x->expect));
  x->got = calloc(nr, sizeof(*x->got));
  x->got_set = calloc(nr, 1);
  uint64_t *off = calloc(n, sizeof(*off));
  int rc = !x->t || !x->have || !x->expect || !x->got || !x->got_set || !off
               ? SPC_ENOMEM : SPC_OK;
  for (int i = 0; i < k->nt && rc == 0; i++) {
    if (!mine(x, i))
      continue;
    const conf_tensor *s = &k->t[i];
    size_t len = spc_dtype_size(s->dtype);
    for (int d = 0; d < s->ndim; d++)
      len *= (size_t)s->shape[d];
    off[i] = total;
    total += (len + 63) / 64 * 64;
  }
  if (rc == 0)
    rc = spc_buffer_alloc(x->c, total, &x->buf);
  for (int i = 0; i < k->nt && rc == 0; i++) {
    if (!mine(x, i))
      continue;
    x->have[i] = 1;
    rc = spc_tensor_init(&x->t[i], x->buf, off[i], k->t[i].dtype,
                         k->t[i].ndim, k->t[i].shape);
  }
  free(off);
  if (rc < 0) {
    report(x, 0, "runner: buffer setup: %s: %s", spc_strerror(rc),
           spc_last_error(x->c));
    return -1;
  }
  for (int i = 0; i < k->nt; i++) {
    if (!x->have[i])
      continue;
    const conf_tensor *s = &k->t[i];
    size_t len = nbytes(&x->t[i]);
    void *data = spc_tensor_data(&x->t[i]);
    if (role_is(s->key, "in") || role_is(s->key, "gradout")) {
      if (read_file(x, s->file, data, len) < 0)
        return -1;
      continue;
    }
    memset(data, 0xEE, len);
    if (s->file[0] == '\0')
      continue;
    x->expect[i] = malloc(len ? len : 1);
    if (x->expect[i] == NULL || read_file(x, s->file, x->expect[i], len))
      return -1;
  }
  return 0;
}

static void free_tensors(rank_ctx *x) {
  for (int i = 0; x->expect && i < x->k->nt; i++)
    free(x->expect[i]);
  free(x->expect);
  free(x->have);
  free(x->t);
  free(x->got);
  free(x->got_set);
  if (x->buf)
    spc_buffer_free(x->buf);
}

/* ---- programs ---------------------------------------------------------- */

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
  while (*s != '\0' && n < CONF_MAX_LIST) {
    char *end;
    out[n++] = strtoll(s, &end, 10);
    if (end == s)
      return -1;
    s = *end == ',' ? end + 1 : end;
  }
  *n_p = n;
  return *s == '\0' ? 0 : -1;
}

static int parse_int(const char *s, int64_t *v) {
  char *end;
  *v = strtoll(s, &end, 10);
  return end != s && *end == '\0' ? 0 : -1;
}

/* The integer argument named key, or NULL. */
static int64_t *int_arg(conf_args *a, const char *key) {
  return strcmp(key, "n") == 0       ? &a->n
         : strcmp(key, "fill") == 0  ? &a->fill
         : strcmp(key, "value") == 0 ? &a->value
         : strcmp(key, "seq") == 0   ? &a->seq
         : strcmp(key, "keep") == 0  ? &a->keep
         : strcmp(key, "times") == 0 ? &a->times
                                     : NULL;
}

static int parse_arg(conf_args *a, const char *kv, int rank) {
  char key[16];
  const char *eq = strchr(kv, '=');
  if (eq == NULL || eq - kv >= (int)sizeof(key))
    return -1;
  snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
  const char *v = pick(eq + 1, rank);
  int64_t i, *slot = int_arg(a, key);
  if (slot != NULL)
    return parse_int(v, slot);
  if (strcmp(key, "dim") == 0 || strcmp(key, "s") == 0 ||
      strcmp(key, "g") == 0) {
    if (parse_int(v, &i) < 0)
      return -1;
    *(key[0] == 'd' ? &a->dim : key[0] == 's' ? &a->s : &a->g) = (int)i;
    return 0;
  }
  if (strcmp(key, "scale") == 0) {
    a->scale = strcmp(v, "up") == 0     ? SPC_SCALE_UP
               : strcmp(v, "down") == 0 ? SPC_SCALE_DOWN
                                        : SPC_SCALE_NONE;
    return a->scale == SPC_SCALE_NONE && strcmp(v, "none") != 0 ? -1 : 0;
  }
  if (strcmp(key, "sizes") == 0 || strcmp(key, "seqs") == 0 ||
      strcmp(key, "ins") == 0)
    return parse_list(v, a->list, &a->nlist);
  if (strcmp(key, "outs") == 0)
    return parse_list(v, a->list2, &a->nlist2);
  return -1;
}

static int find_tensor(const rank_ctx *x, const char *key) {
  for (int i = 0; i < x->k->nt; i++)
    if (mine(x, i) && strcmp(x->k->t[i].key, key) == 0)
      return i;
  return -1;
}

static int find_result(const rank_ctx *x, const char *key) {
  for (int i = 0; i < x->k->nres; i++)
    if (x->k->res[i].rank == x->rank && strcmp(x->k->res[i].key, key) == 0)
      return i;
  return -1;
}

/* Run one step "OP GROUP SRC>DST key=value...". Returns the op's status,
 * or CONF_EBADSTEP for a step the runner cannot parse (reported here as
 * the runner's fault). */
static int run_step(rank_ctx *x, int phase, char *text) {
  char *save, *op = strtok_r(text, " ", &save);
  char *grp = strtok_r(NULL, " ", &save), *io = strtok_r(NULL, " ", &save);
  char *gt = io ? strchr(io, '>') : NULL;
  conf_args a = {.nlist = -1, .nlist2 = -1};
  conf_op_fn fn = NULL;
  for (size_t i = 0; op && i < x->run->nops; i++)
    if (strcmp(op, x->run->ops[i].name) == 0)
      fn = x->run->ops[i].fn;
  spc_group *g = !grp                        ? NULL
                 : strcmp(grp, "world") == 0 ? x->world
                 : strcmp(grp, "ring") == 0  ? x->ring
                 : strcmp(grp, "uly") == 0   ? x->uly
                                             : NULL;
  int src = -1, dst = -1, res = -1;
  int bad = fn == NULL || g == NULL || gt == NULL;
  if (!bad) { /* SRC and DST may be empty; DST "#NAME" is a result */
    *gt = '\0';
    if (io[0] != '\0')
      bad |= (src = find_tensor(x, io)) < 0;
    if (gt[1] == '#')
      bad |= (res = find_result(x, gt + 2)) < 0;
    else if (gt[1] != '\0')
      bad |= (dst = find_tensor(x, gt + 1)) < 0;
  }
  for (char *kv; !bad && (kv = strtok_r(NULL, " ", &save)) != NULL;)
    bad = parse_arg(&a, kv, x->rank) != 0;
  if (bad) {
    report(x, phase, "runner: cannot run step '%s'", op ? op : "");
    return CONF_EBADSTEP;
  }
  if (res >= 0)
    a.res = &x->got[res];
  int rc = fn(g, src >= 0 ? &x->t[src] : NULL, dst >= 0 ? &x->t[dst] : NULL,
              &a);
  if (rc == 0 && res >= 0)
    x->got_set[res] = 1;
  return rc;
}

/* Run a program; 0 when every step succeeded, else the first failing
 * step's status (reported unless it is the expected SPC_EINVAL). */
static int run_program(rank_ctx *x, int phase, const char *prog) {
  char *copy = strdup(prog), *save;
  if (copy == NULL) {
    report(x, phase, "runner: out of memory");
    return SPC_ENOMEM;
  }
  int rc = 0;
  for (char *s = strtok_r(copy, ";", &save); s && rc == 0;
       s = strtok_r(NULL, ";", &save)) {
    char *text = strdup(s);
    rc = text ? run_step(x, phase, text) : SPC_ENOMEM;
    free(text);
    if (rc == CONF_EBADSTEP)
      report(x, phase, "runner: step '%s' does not fit the case", s);
    else if (rc < 0 &&
             !(phase == 0 && x->k->expect_einval && rc == SPC_EINVAL))
      report(x, phase, "step '%s' failed: %s: %s", s, spc_strerror(rc),
             spc_last_error(x->c));
  }
  free(copy);
  return rc;
}

/* ---- comparison -------------------------------------------------------- */

static void fmt_elem(char *out, size_t len, spc_dtype dt, const void *p) {
  if (dt == SPC_INT64) {
    int64_t v;
    memcpy(&v, p, 8);
    /* Seed ints are (tag << 40) | (flat index << 8) | random byte: show
     * where the element came from; small values (labels, positions) are
     * shown as they are. */
    if (v > -(1 << 20) && v < (1 << 20))
      snprintf(out, len, "%" PRId64, v);
    else
      snprintf(out, len, "0x%" PRIx64 " (tag %" PRId64 " idx %" PRId64 ")",
               (uint64_t)v, v >> 40, (v >> 8) & 0xffffffff);
  } else if (dt == SPC_FLOAT32) {
    float f;
    memcpy(&f, p, 4);
    snprintf(out, len, "%.9g", f);
  } else {
    snprintf(out, len, "%u", *(const uint8_t *)p);
  }
}

/* Exact comparison of tensor i with its expectation; reports the first
 * differing element with its index. Returns 0 when equal. */
static int compare(const rank_ctx *x, int phase, int i) {
  conf_t *t = &x->t[i];
  size_t es = spc_dtype_size(t->dtype), n = conf_numel(t), bad = 0, first = 0;
  const char *got = spc_tensor_data(t), *exp = x->expect[i];
  for (size_t j = n; j-- > 0;)
    if (memcmp(got + j * es, exp + j * es, es) != 0)
      bad++, first = j;
  if (bad == 0)
    return 0;
  char idx[96] = "", e[64], g[64];
  size_t rem = first;
  for (int d = t->ndim - 1; d >= 0; d--) { /* flat index -> [i, j, ...] */
    char part[96];
    snprintf(part, sizeof(part), "%" PRId64 "%s%s",
             (int64_t)(rem % (size_t)t->shape[d]), d < t->ndim - 1 ? "," : "",
             idx);
    snprintf(idx, sizeof(idx), "%s", part);
    rem /= (size_t)t->shape[d];
  }
  fmt_elem(e, sizeof(e), t->dtype, exp + first * es);
  fmt_elem(g, sizeof(g), t->dtype, got + first * es);
  report(x, phase, "%s element %zu [%s]: expected %s, got %s (%zu of %zu "
         "differ)", x->k->t[i].key, first, idx, e, g, bad, n);
  return -1;
}

/* Compare every expected tensor of role; 0 when all are equal. */
static int compare_role(const rank_ctx *x, int phase, const char *role) {
  int failed = 0, seen = 0;
  for (int i = 0; i < x->k->nt; i++)
    if (x->expect[i] != NULL && role_is(x->k->t[i].key, role)) {
      seen++;
      failed |= compare(x, phase, i) != 0;
    }
  if (seen == 0)
    report(x, phase, "runner: no expected %s", role);
  return failed || seen == 0 ? -1 : 0;
}

static int check_results(const rank_ctx *x) {
  int failed = 0;
  for (int i = 0; i < x->k->nres; i++) {
    const conf_result *r = &x->k->res[i];
    if (r->rank != x->rank)
      continue;
    if (!x->got_set[i])
      report(x, 0, "runner: no step computed result %s", r->key);
    else if (x->got[i] != r->value)
      report(x, 0, "result %s: expected %" PRId64 ", got %" PRId64, r->key,
             r->value, x->got[i]);
    failed |= !x->got_set[i] || x->got[i] != r->value;
  }
  return failed ? -1 : 0;
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
  int failed = compare_role(x, 0, "out") != 0;
  failed |= check_results(x) != 0;
  if (k->bwd != NULL) {
    if (run_program(x, 1, k->bwd) != 0)
      return -1;
    failed |= compare_role(x, 1, "gradin") != 0;
  }
  return failed ? -1 : 0;
}

static int case_rank(int rank, int world, void *arg) {
  const run_arg *run = arg;
  rank_ctx x = {.rank = rank, .k = run->k, .run = run};
  x.c = spt_connect(run->socket);
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
  free_tensors(&x);
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

/* ---- a case file ------------------------------------------------------- */

static const char *data_root(void) {
  const char *d = getenv("SPC_TEST_DATA");
  return d && *d ? d : "tests/data";
}

/* Run one case; 0 when it passed, else prints its one failure line. */
static int run_case(const char *set_dir, const run_arg *run) {
  const conf_case *k = run->k;
  memset(reports, 0, CONF_MAX_WORLD * sizeof(*reports));
  snprintf(case_dir, sizeof(case_dir), "%s/%s", set_dir, k->name);
  int dead = spt_run_ranks(k->world, case_rank, (void *)run, 20);
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

int conf_run_file(const char *socket, const char *set, const char *file,
                  const char *label, const conf_op *ops, size_t nops) {
  char set_dir[400], path[500];
  snprintf(set_dir, sizeof(set_dir), "%s/conformance/%s", data_root(), set);
  snprintf(path, sizeof(path), "%s/%s", set_dir, file);
  conf_case *cases = NULL;
  int n = conf_load_cases(path, &cases);
  if (n <= 0) {
    if (n == 0)
      fprintf(stderr, "conformance: no cases in %s\n", path);
    conf_free_cases(cases, n > 0 ? n : 0);
    return -1;
  }
  reports = mmap(NULL, CONF_MAX_WORLD * sizeof(*reports),
                 PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (reports == MAP_FAILED) {
    perror("conformance: mmap");
    conf_free_cases(cases, n);
    return -1;
  }
  int passed = 0, failed = 0, skipped = 0;
  for (int i = 0; i < n; i++) {
    run_arg run = {&cases[i], ops, nops, socket};
    if (cases[i].skip[0] != '\0') {
      printf("SKIP %s: %s\n", cases[i].name, cases[i].skip);
      skipped++;
    } else if (run_case(set_dir, &run) == 0) {
      passed++;
    } else {
      failed++;
    }
  }
  printf("%s: %d passed, %d failed, %d skipped\n", label, passed, failed,
         skipped);
  fflush(stdout);
  munmap(reports, CONF_MAX_WORLD * sizeof(*reports));
  conf_free_cases(cases, n);
  return failed;
}

/* conf_main's arguments, for its Check test (which takes none). */
static struct {
  const char *file, *label;
  const conf_op *table;
  size_t ntable;
  spt_daemon daemon;
} conf_main_args;

static void conf_setup(void) {
  ck_assert_int_eq(spt_daemon_start(&conf_main_args.daemon, NULL), 0);
}

static void conf_teardown(void) {
  ck_assert_int_eq(spt_daemon_stop(&conf_main_args.daemon), 0);
}

START_TEST(conf_vectors) {
  int failed = conf_run_file(conf_main_args.daemon.socket, "ws2", conf_main_args.file,
                             conf_main_args.label, conf_main_args.table,
                             conf_main_args.ntable);
  ck_assert_msg(failed >= 0, "no %s cases (see stderr)", conf_main_args.label);
  ck_assert_msg(failed == 0, "%d %s case(s) failed", failed,
                conf_main_args.label);
}
END_TEST

int conf_main(const char *suite, const char *file, const char *label,
              const conf_op *table, size_t ntable, int timeout_s) {
  conf_main_args.file = file, conf_main_args.label = label;
  conf_main_args.table = table, conf_main_args.ntable = ntable;
  Suite *s = suite_create(suite);
  TCase *tc = tcase_create(suite);
  tcase_add_checked_fixture(tc, conf_setup, conf_teardown);
  tcase_set_timeout(tc, timeout_s);
  tcase_add_test(tc, conf_vectors);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
