/* engine/checkpoint.h — sharded training checkpoints.
 *
 * Layout of a checkpoint directory CKPT_DIR/step-000123/:
 *   manifest.json        global names, shapes, dtypes, shard layout of every
 *                        tensor, world size / ZeRO stage / shard group it was
 *                        written with, per-file checksums, the training
 *                        configuration, data position and RNG state
 *   rank-00000.bin ...   one file per writing rank: its slices of fp32
 *                        master weights, Adam m and v, zstd-compressed
 * Commit protocol: written under a temporary name, files and directory
 * fsynced, renamed; then CKPT_DIR/latest is replaced atomically.
 * See docs/checkpoint.md.
 */
#ifndef SL_CHECKPOINT_H
#define SL_CHECKPOINT_H

#include <stdint.h>

#include "formats/ckpt_io.h"
#include "formats/traincfg.h"
#include "models/model.h"
#include "shard/comm.h"
#include "shard/fsdp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a rank contributes to / receives from a checkpoint. The optimizer
 * state of unit u covers elements [view(u).offset, view(u).offset +
 * view(u).count) of the unit's flat buffer (see sl_fsdp_view): the whole
 * padded buffer at ZeRO 0, this rank's shard from ZeRO 1 on. Element i of
 * that range is element view.offset + i of the unit's flat buffer, whose
 * tensors are laid out by m->units[u].t[] (offset, numel, HF name, shape). */
typedef struct {
  sl_model *m; /* unit specs (names, shapes, offsets); a load sets its expert bias (below) */
  sl_fsdp *f;  /* views, shard group, slices */
  sl_comm *world;
  const sl_train_cfg *cfg;      /* recorded in the manifest */
  float **master, **mom, **var; /* (nunits) x (view count) fp32 */
  int64_t step;                 /* optimizer steps completed */
  int64_t next_sample;          /* global index of the next sample to consume */
  uint64_t rng_seed;            /* data-order / init seed */
  sl_comm *tp;                  /* the tensor-parallel group (NULL or one rank: none); at T > 1 the
                               units are gathered into whole tensors (engine/tensor_par.h) */
  /* (nunits) or NULL (all): the units this rank's stage owns under pipeline
   * parallelism; it writes only those, and loads only units whose arrays are
   * not NULL */
  const unsigned char *owns;
  /* tensor x pipeline parallelism (tp and owns set): 1 on the rank that
   * writes its stage's whole units (the first DP and TP rank of the stage) */
  int stage_writer;
  /* the expert-parallel axis (NULL or one rank: none): an EP-split unit's
   * ranges are this rank's part, hold_lo on in the unit (sl_unit_spec) */
  sl_comm *ep;
  /* a mixture of experts' expert bias (sl_model_moe_bias; NULL: none), the
   * same on every rank: saved in the manifest; on load filled from a
   * checkpoint that holds one (of the same size), else zeroed (a warning);
   * without one here, a checkpoint's becomes the model's
   * (sl_model_moe_bias_set: it routes, held fixed) */
  float *moe_bias;
  int64_t n_moe_bias;
  /* sl_ckpt_load: a copy of the loaded manifest's training settings (its
   * sl_train_cfg_canonical text; NULL: none recorded); the caller frees it */
  char *loaded_config;
} sl_ckpt_state;

/* Collective over world. Writes CKPT_DIR/step-<step>, commits it, points
 * `latest` at it, then deletes all but the newest keep_last complete
 * checkpoints (keep_last <= 0: keep all). On failure (e.g. ENOSPC) the
 * previous checkpoints are untouched and the message says why. */
int sl_ckpt_save(const char *ckpt_dir, const sl_ckpt_state *st, int keep_last);

/* Collective over world. Removes leftover temporary directories, finds the
 * newest complete, valid checkpoint (following `latest`, falling back to
 * older ones when the newest is corrupt, with a warning naming the file),
 * and fills st->master/mom/var for this rank's views (resharding from any
 * world size / ZeRO stage / shard group), st->step, st->next_sample. Returns
 * SL_OK with *found = 0 when the directory has no checkpoint. */
int sl_ckpt_load(const char *ckpt_dir, sl_ckpt_state *st, int *found);

#ifdef __cplusplus
}
#endif
#endif /* SL_CHECKPOINT_H */
