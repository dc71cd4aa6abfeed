/* formats/savedir.h — replacing a whole output directory atomically (an HF
 * model directory written by --save or convert --to-hf): the new content is
 * written under a temporary sibling name, fsynced, and swapped in; a failure
 * (a full disk) leaves the old directory as it was. */
#ifndef SL_SAVEDIR_H
#define SL_SAVEDIR_H

#include <stddef.h>

#include "formats/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the temporary sibling PARENT/.NAME.tmp-<pid>-<n> of dir (PARENT is
 * created when missing; such siblings of processes that are gone are
 * removed first) and writes its path to tmp. SL_EINPUT when dir exists
 * and is not a directory. */
int sl_savedir_begin(const char *dir, char *tmp, size_t cap);
/* Files of an existing dir that the new content does not hold (a tokenizer,
 * a README; not weight files) are carried over; everything in tmp is fsynced;
 * tmp replaces dir (renameat2 RENAME_EXCHANGE, or two renames), the parent is
 * fsynced and the old content removed. On failure tmp is removed and dir is
 * untouched. */
int sl_savedir_commit(const char *dir, const char *tmp);
/* Removes tmp after a failed write. */
void sl_savedir_abort(const char *tmp);

/* The dtype a saved model is written in (docs/formats.md "Saved model
 * directories"): "fp32" | "bf16" | "fp16", or "auto": the source model
 * directory's dtype (model_dir NULL or "": fp32; a config.json file: its
 * torch_dtype, else fp32). The source dtype is that of
 * its weight tensors (F32 / BF16 / F16; mixed: the one holding the most
 * elements, ties to the wider), else config.json's torch_dtype (or dtype):
 * bfloat16 / float16 / float32, else fp32. SL_EINPUT naming what is wrong. */
int sl_savedir_dtype(const char *save_dtype, const char *model_dir, sl_st_dtype *out);
/* config.json's torch_dtype for d: "float32" | "bfloat16" | "float16". */
const char *sl_savedir_torch_dtype(sl_st_dtype d);
/* Copies the tokenizer files (tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, tokenizer.model, vocab.json, merges.txt,
 * added_tokens.json) and generation_config.json that src_dir holds into tmp
 * (a directory from sl_savedir_begin, before the commit). src_dir NULL, ""
 * or not a directory: nothing. */
int sl_savedir_copy_aux(const char *src_dir, const char *tmp);

#ifdef __cplusplus
}
#endif
#endif /* SL_SAVEDIR_H */
