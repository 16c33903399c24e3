/* The numeric limits and deadlines of SPD_LIMITS: one table serves the
 * option parser, the config file, --help and the dump of the settings. */
#include <errno.h>
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

/* The last-level cache of CPU 0 as sysfs says ("32768K"): what glibc's
 * sysconf says differs on some VMs (320 MiB on the development VM, whose
 * L3 is 32 MiB). Else the kernels' default. */
static long long l3_bytes(void) {
  long long kib = 0;
  FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
  if (f != NULL) {
    if (fscanf(f, "%lldK", &kib) != 1)
      kib = 0;
    fclose(f);
  }
  return kib > 0 ? kib << 10 : (long long)SPK_STREAM_BYTES;
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
  cfg->stream_bytes = l3_bytes();
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
