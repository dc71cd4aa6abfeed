/* engine/trainer.h — the training loop: model units driven through the FSDP
 * runtime, AdamW on the local optimizer view, metrics, saving. */
#ifndef SL_TRAINER_H
#define SL_TRAINER_H

#include "engine/eval.h"
#include "formats/traincfg.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs cfg->steps optimizer steps on every rank of world. */
int sl_train_run(const sl_train_cfg *cfg, sl_comm *world);

/* One forward + backward of the first micro-batch (samples 0..B-1 in
 * sequential order) and writes an F32 safetensors file with "logits"
 * (B*T, V), "loss" (1) and "grad.<name>" for every parameter (gradient of
 * the mean token loss). For tests against PyTorch. */
int sl_train_dump(const sl_train_cfg *cfg, sl_comm *world, const char *out_path);

/* Held-out loss of cfg->model over windows 0..K-1 of cfg->data in
 * sequential order (`shardlm eval`), through the training layout (ZeRO
 * stage, offload) without optimizer state. Collective. */
int sl_train_eval(const sl_train_cfg *cfg, sl_comm *world, int64_t K, sl_eval_result *res);

/* A forward session (engine/fwd_session.c): cfg->model on cfg->backend in one process, one sequence of up
 * to T positions through the training forward (no optimizer state, no data, nothing written). logits: the V
 * logits at position len - 1 of seq[0..len), on the host. */
typedef struct sl_fwd_session sl_fwd_session;
int sl_fwd_session_open(const sl_train_cfg *cfg, sl_comm *world, int64_t T, sl_fwd_session **out);
int sl_fwd_session_logits(sl_fwd_session *s, const int32_t *seq, int64_t len, float *logits);
void sl_fwd_session_close(sl_fwd_session *s);

/* Draws metrics JSONL -> SVG at the end of a run with --plot (rank 0). The
 * drawing lives in tools/ (above the engine); the command line sets it. */
typedef int (*sl_plotter)(const char *metrics_jsonl, const char *svg_path);
void sl_train_set_plotter(sl_plotter fn);

/* The learning rate of step s (0-based) of the parity contract. */
double sl_lr_at(const sl_train_cfg *cfg, int64_t s);
/* The wsd decay phase's steps N (engine/lr_sched.c). */
int64_t sl_lr_decay_steps(const sl_train_cfg *cfg);
/* --resume: the schedule keys the checkpoint in dir was written with (its
 * sl_train_cfg_canonical text; NULL: none recorded) continue unless given;
 * a given one that differs is SL_EINPUT naming the flag unless
 * --lr-schedule-override. */
int sl_lr_sched_resume(sl_train_cfg *cfg, const char *written, const char *dir);

#ifdef __cplusplus
}
#endif
#endif /* SL_TRAINER_H */
