/* data/sampler.h — which tokens sample j of training is made of.
 *
 * A sampler owns the datasets of --data (one prefix, or a Megatron blend
 * "W1 PREFIX1 W2 PREFIX2 ..."), their optional loss masks (PREFIX.lmask) and
 * the data order. Sample j (global, 0-based) is T+1 consecutive tokens of one
 * dataset's stream:
 *   1. the blend picks dataset d and its local sample index c (the greedy
 *      error-minimising interleave of Megatron's build_blending_indices:
 *      d = argmax_k  w_k * max(j, 1) - n_k(j)   (lowest k on ties), where
 *      n_k(j) counts the samples of dataset k among 0..j-1 and w_k are the
 *      weights normalised to sum 1; c = n_d(j)). One dataset: d = 0, c = j.
 *   2. dataset d reads window c: sequential order starts at c*T (wrapping);
 *      shuffled permutes the floor(tokens/T) windows per epoch with a seeded
 *      Fisher-Yates (dataset d's seed: seed XOR d * 0x9E3779B97F4A7C15, so
 *      dataset 0 keeps the single-dataset order).
 * Everything is a function of (j, seed): the checkpoint's next_sample is the
 * whole data position. The blend state advances O(datasets) per sample and
 * is replayed from 0 only when asked for a sample before its position (once
 * after a resume). docs/formats.md, docs/cli.md.
 */
#ifndef SL_SAMPLER_H
#define SL_SAMPLER_H

#include <stdint.h>

#include "formats/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_sampler sl_sampler;

/* spec: --data (a prefix or a blend). T: tokens per sample (reads T+1).
 * order: "sequential" | "shuffled". vocab: every token must be below it.
 * Opens each PREFIX.bin/.idx and PREFIX.lmask when present. */
int sl_sampler_open(const char *spec, int64_t T, const char *order, uint64_t seed, int64_t vocab, sl_sampler **out);
void sl_sampler_close(sl_sampler *s);
void sl_sampler_set_seed(sl_sampler *s, uint64_t seed); /* a resumed run's data seed */
int sl_sampler_ndatasets(const sl_sampler *s);
int64_t sl_sampler_num_tokens(const sl_sampler *s); /* sum over the datasets */
int sl_sampler_has_masks(const sl_sampler *s);      /* some dataset has a .lmask */
/* Sample j: row (T+1) tokens; keep (T) or NULL: keep[t] = 1 when target t
 * (token row[t+1]) counts in the loss. *dataset (or NULL): which dataset. */
int sl_sampler_read(sl_sampler *s, int64_t j, int32_t *row, uint8_t *keep, int *dataset);
/* Targets that count in samples first..first+n-1 (n*T without masks). */
int sl_sampler_count(sl_sampler *s, int64_t first, int64_t n, int64_t *count);

/* The micro-batch of samples first..first+B-1: tok, tgt (B*T) inputs and
 * targets, tgt = -1 where the loss mask drops the target. seg (B*T) or
 * NULL: for each token, the position in its sample where its document
 * starts. The documents are those of the dataset's .idx document index
 * (sl_dataset_doc_starts); a sample's first token starts one.
 */
int sl_sampler_batch(sl_sampler *s, int64_t first, int64_t B, int32_t *tok, int32_t *tgt, int32_t *seg);
/* Occurrences of token id inside the documents of every dataset (not as a
 * document's last token; whole datasets, whatever --split). O(tokens). */
int sl_sampler_count_inside(sl_sampler *s, int64_t id, int64_t *count);

/* Restricts a one-dataset sampler to tokens [lo, hi) of its dataset's
 * stream (--split): windows, wrapping and the loss mask follow the range. */
int sl_sampler_restrict(sl_sampler *s, int64_t lo, int64_t hi);
/* Dataset d of the sampler (0 <= d < ndatasets). */
sl_dataset *sl_sampler_dataset(sl_sampler *s, int d);
/* Parses a --data blend: 1 token = one prefix (weight 1); else pairs
 * "weight prefix", weights finite and > 0, normalised to sum 1. Fills up to
 * cap entries (prefix pointers into buf, a writable copy of spec). */
int sl_blend_parse(char *buf, int cap, double *weights, char **prefixes, int *n);

#ifdef __cplusplus
}
#endif
#endif /* SL_SAMPLER_H */
