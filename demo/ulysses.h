/* The Ulysses attention step of the demo. */
#ifndef SPCOLL_DEMO_ULYSSES_H
#define SPCOLL_DEMO_ULYSSES_H

/* One rank's step: q, k, v [b, s/P, h, d] -> all_to_all -> [b, s, h/P, d]
 * -> attention over the whole sequence -> all_to_all back, checked against
 * a single-process computation. Rank 0 prints a line. 0 when it matched. */
int demo_ulysses_rank(const char *socket, int rank, int world);

#endif
