/* engine/agree.h — canonical texts of what shapes a run (the parsed model
 * config, the training settings, the input files' sizes), their hash, the
 * first differing field of two texts, and the start-up check that every
 * rank holds the same text. A canonical text is "key=value\n" lines in a
 * fixed order. */
#ifndef SL_AGREE_H
#define SL_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include "formats/hfconfig.h"
#include "formats/traincfg.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every field of the parsed model config that changes the computation, as
 * "model.NAME=VALUE" lines. with_init: also the fields used only to
 * initialise weights (initializer_range, Mamba dt init), which do not matter
 * once weights are loaded from a checkpoint. Returns SL_EINTERNAL when cap
 * is too small. */
int sl_model_canonical(const sl_model_config *c, int with_init, char *buf, size_t cap);

/* 64-bit FNV-1a of a text. */
uint64_t sl_canon_hash(const char *text);

/* First line where a and b differ: its key ("model.rope_theta") into key,
 * and each side's value (empty when the line is missing). 0: equal. */
int sl_canon_diff(const char *a, const char *b, char *key, size_t kcap, char *va, char *vb, size_t vcap);

/* A checkpoint's recorded model config (recorded: sl_model_canonical text
 * with_init 0; NULL for manifests older than the field) against mc, field by
 * field: SL_EINPUT naming the first field that changes the computation. NULL
 * passes with a warning (only tensor shapes can be checked then). dir names
 * the checkpoint in messages. */
int sl_check_ckpt_model(const char *dir, const char *recorded, const sl_model_config *mc);

/* Start-up agreement: hashes the model config, the vocabulary size, the
 * training settings, the files of cfg->model (config.json, *.safetensors,
 * *.index.json, tokenizer*) with their sizes and
 * the dataset files with their sizes, and compares across world. Any
 * difference: SL_EINPUT on every rank, naming the field and the ranks. */
int sl_check_agreement(sl_comm *world, const sl_train_cfg *cfg, const sl_model_config *mcfg, int64_t data_tokens);

#ifdef __cplusplus
}
#endif
#endif /* SL_AGREE_H */
