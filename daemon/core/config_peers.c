/* Parsing of peer daemon addresses: "host:port" and lists of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int spd_parse_hostport(const char *flag, const char *s, spd_hostport *hp,
                       spk_err *err) {
  const char *colon = strrchr(s, ':');
  if (colon == NULL || colon == s)
    return spk_err_set(err, SPK_EINVAL, "%s: '%s' is not host:port", flag, s);
  size_t hlen = (size_t)(colon - s);
  if (hlen >= sizeof(hp->host))
    return spk_err_set(err, SPK_EINVAL, "%s: host of '%s' is longer than %zu "
                       "bytes", flag, s, sizeof(hp->host) - 1);
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (colon[1] == '\0' || *end != '\0' || port < 1 || port > 65535)
    return spk_err_set(err, SPK_EINVAL, "%s: port of '%s' is not in 1..65535",
                       flag, s);
  memcpy(hp->host, s, hlen);
  hp->host[hlen] = '\0';
  hp->port = (int)port;
  return SPK_OK;
}

int spd_parse_peers(spd_config *cfg, const char *s, spk_err *err) {
  char item[128];
  int n = 0;
  for (const char *p = s; *p != '\0';) {
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof(item))
      return spk_err_set(err, SPK_EINVAL, "--peers: entry %d of '%s' is empty "
                         "or too long", n, s);
    if (n == SPD_MAX_NODES)
      return spk_err_set(err, SPK_EINVAL, "--peers: more than %d nodes",
                         SPD_MAX_NODES);
    memcpy(item, p, len);
    item[len] = '\0';
    int rc = spd_parse_hostport("--peers", item, &cfg->peers[n], err);
    if (rc < 0)
      return rc;
    n++;
    p += len;
    if (*p == ',')
      p++;
  }
  if (n == 0)
    return spk_err_set(err, SPK_EINVAL, "--peers: empty list");
  cfg->npeers = n;
  return SPK_OK;
}
