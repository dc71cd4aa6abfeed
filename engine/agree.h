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

/* The parsed model config as "model.NAME=VALUE" lines: model.arch, the
 * SL_MODEL_CANON_TAG line, then every config.json field the reader looked at
 * (sl_model_config.fields, recorded by formats/hfconfig.c's one accessor, so
 * a field a new family reads is here without a line written for it).
 * with_init: also the fields used only to initialise weights
 * (initializer_range, Mamba dt init), which do not matter once weights are
 * loaded from a checkpoint. Returns SL_EINTERNAL when cap is too small. */
#define SL_MODEL_CANON_TAG "model.text=fields-read\n" /* absent from older checkpoints' hand-listed texts */
#define SL_MODEL_CANON_MAX 8192                        /* a buffer that always holds the text */
int sl_model_canonical(const sl_model_config *c, int with_init, char *buf, size_t cap);

/* 64-bit FNV-1a of a text. */
uint64_t sl_canon_hash(const char *text);

/* First line where a and b differ: its key ("model.rope_theta") into key,
 * and each side's value (empty when the line is missing). 0: equal. */
int sl_canon_diff(const char *a, const char *b, char *key, size_t kcap, char *va, char *vb, size_t vcap);

/* A checkpoint's recorded model config (recorded: sl_model_canonical text
 * with_init 0; NULL for manifests older than the field) against mc, field by
 * field: SL_EINPUT naming the first field that differs. NULL passes with a
 * warning (only tensor shapes can be checked then); a text without
 * SL_MODEL_CANON_TAG (an older shardlm's hand list) is compared on the
 * fields it has, with a warning counting the others. dir names the
 * checkpoint in messages. */
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
