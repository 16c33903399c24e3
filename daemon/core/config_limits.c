/* The numeric limits and deadlines of SPD_LIMITS: one table serves the
 * option parser, the config file, --help and the dump of the settings. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "config.h"
#include "plan.h"

const spd_limit_def spd_limit_defs[] = {
#define SPD_LIMIT_ROW(field, flag, def, lo, hi, help)                        \
  {#field, flag, help, lo, hi, offsetof(spd_config, field)},
    SPD_LIMITS(SPD_LIMIT_ROW)
#undef SPD_LIMIT_ROW
};
const int spd_nlimits = sizeof(spd_limit_defs) / sizeof(spd_limit_defs[0]);
_Static_assert(sizeof(spd_limit_defs) / sizeof(spd_limit_defs[0]) <=
                   SPD_MAX_LIMITS,
               "the option parser has room for SPD_MAX_LIMITS limits");

static long long *limit_field(spd_config *cfg, int i) {
  return (long long *)((char *)cfg + spd_limit_defs[i].offset);
}

int spd_limit_apply(spd_config *cfg, int i, const char *arg, spk_err *err) {
  const spd_limit_def *d = &spd_limit_defs[i];
  char *end;
  errno = 0;
  long long v = strtoll(arg, &end, 10);
  if (arg[0] == '\0' || *end != '\0' || errno != 0 || v < d->lo || v > d->hi)
    return spk_err_set(err, SPK_EINVAL, "--%s: '%s' is not an integer in "
                       "%lld..%lld", d->flag, arg, d->lo, d->hi);
  *limit_field(cfg, i) = v;
  return SPK_OK;
}

/* Descriptors the daemon keeps for itself (stats clients, descriptors in
 * flight, UCX, logs, the mover) beyond its clients' connections. */
#define FD_RESERVE 256

static long long fd_budget(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
    return 1 << 20;
  long long n = (long long)rl.rlim_cur - FD_RESERVE;
  return n < 16 ? 16 : n;
}

static long long map_budget(void) {
  long long n = 65530; /* the kernel's default when /proc says nothing */
  FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
  if (f != NULL) {
    if (fscanf(f, "%lld", &n) != 1)
      n = 65530;
    fclose(f);
  }
  /* Half: the daemon's libraries, threads and peers need mappings too. */
  return n / 2 > 64 ? n / 2 : 64;
}

/* One number from a sysfs file of CPU 0's cache `index` ("3",
 * "32768K"); -1 when there is none. */
static long long cache_attr(int index, const char *name) {
  char path[96];
  long long v = -1;
  snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/%s",
           index, name);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  if (fscanf(f, "%lld", &v) != 1)
    v = -1;
  fclose(f);
  return v;
}

/* The size of CPU 0's highest-level cache as sysfs says, at most
 * STREAM_CAP_BYTES: what glibc's sysconf says differs on some VMs (320 MiB
 * on a development VM whose L3 is 32 MiB), and a VM's sysfs may give the
 * host socket's whole L3, shared with every tenant (480 MiB on another:
 * there 2-rank ops touching 96-128 MiB took 25-40% longer in the cache
 * than streamed, and ops touching 48-64 MiB the same either way;
 * docs/performance.md, "Streaming past a VM's cache"). Else the kernels'
 * default. */
#define CACHE_INDEXES 16
#define STREAM_CAP_BYTES (64LL << 20)
static long long llc_bytes(void) {
  int best = 0;
  long long kib = 0;
  for (int i = 0; i < CACHE_INDEXES; i++) {
    long long level = cache_attr(i, "level"), size = cache_attr(i, "size");
    if (level > best && size > 0 && size < (1LL << 40)) /* sizes are KiB */
      best = (int)level, kib = size;
  }
  if (kib <= 0)
    return (long long)SPK_STREAM_BYTES;
  return (kib << 10) < STREAM_CAP_BYTES ? kib << 10 : STREAM_CAP_BYTES;
}

static long long ram_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  return pages > 0 && psize > 0 ? (long long)pages * psize : 1LL << 40;
}

void spd_limits_defaults(spd_config *cfg) {
#define SPD_LIMIT_DEFAULT(field, flag, def, lo, hi, help) cfg->field = def;
  SPD_LIMITS(SPD_LIMIT_DEFAULT)
#undef SPD_LIMIT_DEFAULT
  cfg->max_connections = fd_budget();
  cfg->max_buffers = map_budget();
  cfg->uid_max_buffers = cfg->max_buffers / 4;
  cfg->max_bytes = ram_bytes();
  cfg->uid_max_bytes = cfg->max_bytes;
  cfg->stream_bytes = llc_bytes();
}

void spd_limits_usage(FILE *out) {
  for (int i = 0; i < spd_nlimits; i++)
    fprintf(out, "  --%s N\n      %s\n", spd_limit_defs[i].flag,
            spd_limit_defs[i].help);
}

void spd_limits_dump(const spd_config *cfg, FILE *out) {
  for (int i = 0; i < spd_nlimits; i++)
    fprintf(out, "%s %lld\n", spd_limit_defs[i].field,
            *limit_field((spd_config *)cfg, i));
}
