/* models/generate.h — single-process CPU inference for `shardlm generate`:
 * the model's parameters loaded through the model loader (unit specs +
 * sl_model_unit_load), then decoding one token at a time with a per-layer
 * K/V cache (Llama, Mistral: RoPE at each absolute position, GQA, Mistral's
 * sliding window) or the recurrent conv + SSM state (Mamba), and sampling
 * (greedy at temperature 0, else temperature + top-p with a seeded RNG).
 */
#ifndef SL_GENERATE_H
#define SL_GENERATE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_gen sl_gen;

/* Loads an HF directory (config.json + *.safetensors; weights required). */
int sl_gen_load(const char *model_dir, sl_gen **out);
/* Loads its config.json only (vocabulary, context, end ids): for sl_generate with o->forward. */
int sl_gen_load_config(const char *model_dir, sl_gen **out);
void sl_gen_free(sl_gen *g);
int64_t sl_gen_vocab(const sl_gen *g);
int64_t sl_gen_context(const sl_gen *g); /* max positions (0: no limit, Mamba) */
int32_t sl_gen_eos(const sl_gen *g);     /* config eos_token_id, -1 when unset */
/* every eos_token_id of the config (a list in Llama 3.x Instruct) into out[0..cap); returns how many */
int sl_gen_eos_list(const sl_gen *g, int32_t *out, int cap);

typedef struct {
  double temperature; /* 0: greedy (argmax, lowest id on ties) */
  double top_p;       /* nucleus mass in (0, 1]; 1: off */
  uint64_t seed;
  int64_t max_new;     /* tokens to generate at most */
  const int32_t *stop; /* ids that end generation (kept in the output) */
  int nstop;
  /* called with each new token as it is produced (may be NULL) */
  void (*emit)(void *user, int32_t id);
  void *user;
  /* NULL: the cache's own step (sl_gen_load's weights). Else the logits (vocab) of the token after
   * seq[0..len) from another forward (`generate --decode forward`: the engine's training forward of the
   * window on any backend, engine/trainer.h sl_fwd_session); SL_OK or a status that ends generation. */
  int (*forward)(void *user, const int32_t *seq, int64_t len, float *logits);
  void *forward_user;
} sl_gen_opts;

/* Feeds the prompt (n >= 1 ids, each < vocab; n <= context) and generates up
 * to o->max_new tokens (fewer at a stop id or at the context limit) into out
 * (capacity max_new); *nout: tokens written. Resets the caches first. */
int sl_generate(sl_gen *g, const int32_t *prompt, int64_t n, const sl_gen_opts *o, int32_t *out, int64_t *nout);

#ifdef __cplusplus
}
#endif
#endif /* SL_GENERATE_H */
