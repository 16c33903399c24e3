#include "stats.h"

#include <stdio.h>
#include <stdlib.h>

#include "group.h"

char *spd_stats_text(spd_ctx *ctx) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  if (out == NULL)
    return NULL;
  fprintf(out, "# counters\n");
#define SPD_COUNTER_PRINT(name) \
  fprintf(out, #name " %llu\n", (unsigned long long)ctx->stats.name);
  SPD_COUNTERS(SPD_COUNTER_PRINT)
#undef SPD_COUNTER_PRINT
  int clients = 0, groups = 0;
  spd_session *s;
  TAILQ_FOREACH(s, &ctx->sessions, link)
    clients++;
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link)
    groups++;
  fprintf(out, "clients %d\ngroups %d\nrunning_ops %d\n", clients, groups,
          ctx->running_ops);
  if (fclose(out) != 0) {
    free(text);
    return NULL;
  }
  return text;
}
