/* The seeds' split rule: n over w ranks gives n/w + 1 to the first n % w
 * ranks and n/w to the rest (cal_split_sizes). */
#ifndef SPK_SPLIT_RULE_H
#define SPK_SPLIT_RULE_H

#include <stdint.h>

/* Size of piece `rank` of n split over `world` ranks. */
int64_t spk_split_size(int64_t n, int world, int rank);
/* Start of piece `rank`: the sum of the pieces before it. */
int64_t spk_split_offset(int64_t n, int world, int rank);
/* All pieces into sizes[0..world). */
void spk_split_sizes(int64_t n, int world, int64_t *sizes);

#endif
