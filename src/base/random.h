/* Internal: the raw 64-bit output of the SplitMix64 generator (model.h:
 * tfm_rng), for the sampler and BigBird's random blocks. */
#ifndef TFM_SRC_RANDOM_H
#define TFM_SRC_RANDOM_H

#include "transformer/model.h"

/* Advances rng and returns its next 64-bit output (Steele, Lea and Flood
 * 2014; Vigna's splitmix64.c constants). */
uint64_t tfm__rng_next(tfm_rng *rng);

#endif
