/* engine/builtin.h — files compiled into the binary so that the main job
 * needs no arguments: the default model config and the built-in corpus.
 * Generated at build time from configs/ (see engine/CMakeLists.txt). */
#ifndef SL_BUILTIN_H
#define SL_BUILTIN_H

#include <stddef.h>

extern const char sl_builtin_model_config[]; /* configs/tiny-llama/config.json */
extern const size_t sl_builtin_model_config_len;
extern const char sl_builtin_corpus[]; /* configs/corpus.txt */
extern const size_t sl_builtin_corpus_len;

#endif
