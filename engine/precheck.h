/* engine/precheck.h — start-up checks before the big allocations: the
 * predicted peak memory per rank against the available memory, --seq-len
 * against max_position_embeddings, a dataset shorter than one sample. */
#ifndef SL_PRECHECK_H
#define SL_PRECHECK_H

#include <stddef.h>
#include <stdint.h>

#include "formats/hfconfig.h"
#include "formats/safetensors.h"
#include "formats/traincfg.h"
#include "kernels/kernels.h"
#include "models/model.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Host memory this process may still use: MemAvailable, or the cgroup
 * limit less its usage when that is smaller; -1 when unknown. why: which. */
int64_t sl_host_mem_available(char *why, size_t cap);

/* Runs the checks on every rank; all ranks return the same verdict
 * (SL_EINPUT with the figure, the limit and a `shardlm plan` command). A
 * device backend (ops->is_device) is checked against ops->mem_info's free
 * bytes, the host against the host-side optimizer state. */
/* The refusals that need neither ranks nor memory (sizes and their
 * products, a unit over 2^31 - 1 elements, --seq-len against
 * max_position_embeddings), for a run of world ranks: part of sl_precheck,
 * and what --pp-dry-run applies too. */
int sl_precheck_static(const sl_train_cfg *c, const sl_model_config *mc, int world);
int sl_precheck(const sl_train_cfg *c, const sl_model_config *mc, sl_comm *world, const sl_ops *ops, sl_kctx *k,
                int64_t data_tokens);

/* One output path for flag (named in the message): the directory (parent:
 * the file's directory) exists and is writable, or (!must_exist) can be
 * created below its nearest existing, writable ancestor. SL_EINPUT if not. */
int sl_precheck_out(const char *flag, const char *path, int parent, int must_exist);

/* The output paths (--out-dir, --metrics, --ckpt-dir, --save, --nvme-path)
 * can be written: SL_EINPUT naming the flag otherwise. Creates the
 * directory of --metrics. Local: call before any collective. */
int sl_precheck_paths(const sl_train_cfg *c);

/* "optstate-XXXXXXXX-": the prefix of this run's optimizer-state files in
 * --nvme-path (a hash of the working directory, --out-dir and --ckpt-dir).
 * sl_precheck removes files with it that a crash left behind. */
void sl_nvme_run_prefix(const sl_train_cfg *c, char *buf, size_t cap);

/* Where the run's parameters come from (--init, docs/cli.md), *from: the
 * weights of --model, the seed (--init random, or the built-in model), or
 * the seed as a placeholder for the checkpoint --resume found in --ckpt-dir
 * (--model has no weights; the resume replaces every value). --init hf
 * with a --model that has no weight files and nothing to resume: SL_EINPUT
 * naming the directory and --init random. Local; after sl_train_cfg_resolve. */
enum { SL_INIT_WEIGHTS, SL_INIT_SEED, SL_INIT_CKPT };
int sl_precheck_init(const sl_train_cfg *c, int *from);
/* After the resume decision (resumed: a checkpoint was loaded): rank 0's
 * info line when the parameters came from the seed; SL_EINPUT when they
 * were the placeholder of a checkpoint that was not loaded. */
int sl_precheck_init_done(const sl_train_cfg *c, int from, int resumed);

/* Tensors in the weight files the model does not use: a warning naming
 * them; one of a layer past num_hidden_layers is an error (wrong config). */
int sl_precheck_tensors(const sl_model *m, const sl_st_set *w, const sl_model_config *mc);

#ifdef __cplusplus
}
#endif
#endif /* SL_PRECHECK_H */
