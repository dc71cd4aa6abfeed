/* engine/trainer.c — the training loop.
 *
 * Per optimizer step (parity contract of the design brief):
 *   G = micro_batch x grad_accum x dp samples of T+1 tokens; rank r, micro
 *   k, row b of step s reads sample s*G + r*(A*B) + k*B + b.
 *   forward units 0..U-1, backward U-1..0 through the FSDP runtime, in the
 *   order of the step's schedule (engine/schedule.h); loss is
 *   the mean token cross-entropy over the G*T predicted tokens; gradients
 *   clipped to the global L2 norm; AdamW on this rank's optimizer view;
 *   LR: linear warmup, then --lr-schedule (engine/lr_sched.c).
 */
#define _GNU_SOURCE
#include "engine/trainer.h"
#include "engine/trainer_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"
#include "data/sampler.h"
#include "engine/agree.h"
#include "engine/builtin.h"
#include "engine/checkpoint.h"
#include "engine/eval.h"
#include "engine/guard.h"
#include "engine/hosts.h"
#include "engine/precheck.h"
#include "engine/report_pp.h"
#include "engine/rundir.h"
#include "engine/schedule.h"
#include "engine/signals.h"
#include "engine/tensor_par.h"
#include "formats/dataset.h"
#include "formats/hfconfig.h"
#include "formats/metrics.h"
#include "formats/safetensors.h"
#include "formats/savedir.h"
#include "kernels/registry.h"
#include "models/model.h"
#include "offload/offload.h"
#include "shard/fsdp.h"
#include "shard/mesh.h"

static sl_plotter g_plotter; /* sl_train_set_plotter */

/* ---- helpers -------------------------------------------------------------- */

/* The model's batch from tok/tgt/seg (moved to backend memory first). */
static void set_batch(trainer *t, float scale) {
  int64_t BT = t->cfg.micro_batch * t->cfg.seq_len, at = t->nsets > 1 ? t->m->act * BT : 0;
  size_t bt = (size_t)BT * 4;
  if (t->dev || t->nsets > 1) { /* into the selected activation set's own buffers */
    t->ops->upload(t->k, t->data.dtok + at, t->data.tok, bt);
    t->ops->upload(t->k, t->data.dtgt + at, t->data.tgt, bt);
    if (t->data.seg) t->ops->upload(t->k, t->data.dseg + at, t->data.seg, bt);
  }
  sl_model_set_batch(t->m, t->data.dtok + at, t->data.dtgt + at, scale);
  t->m->seg = t->data.dseg ? t->data.dseg + at : NULL;
}

/* The evaluation's loader: row b is sample samples[b] of smp (-1: a padding
 * row, every target ignored); masks and document starts as in training. */
static int eval_load(void *user, sl_sampler *smp, const int64_t *samples, int64_t *counted) {
  trainer *t = user;
  int64_t B = t->cfg.micro_batch, T = t->cfg.seq_len;
  *counted = 0;
  for (int64_t b = 0; b < B; b++) {
    int32_t *seg = t->data.seg ? t->data.seg + b * T : NULL;
    if (samples[b] >= 0) {
      int rc = sl_sampler_batch(smp, samples[b], 1, t->data.tok + b * T, t->data.tgt + b * T, seg);
      if (rc) return rc;
    } else {
      for (int64_t i = 0; i < T; i++) {
        t->data.tok[b * T + i] = 0;
        t->data.tgt[b * T + i] = -1;
        if (seg) seg[i] = 0;
      }
    }
    for (int64_t i = 0; i < T; i++) *counted += t->data.tgt[b * T + i] >= 0;
  }
  set_batch(t, 0.0f);
  return SL_OK;
}

static int run_eval(trainer *t, sl_sampler *smp, int64_t K, sl_eval_result *res) {
  sl_eval_env e = {t->m,
                   t->f,
                   t->par.tp.loss,
                   t->cfg.micro_batch,
                   t->cfg.seq_len,
                   t,
                   eval_load,
                   t->sched,
                   t->par.pplan ? t->par.dp_rank : 0,
                   t->par.pplan ? t->par.dp_size : 0,
                   t->par.pplan && t->par.pplan->rank != t->par.pplan->P - 1};
  return sl_eval_loss(&e, smp, K, res);
}

/* tied-weight access for the model */
static int acc_params(void *user, int u, const float **p) { return sl_fsdp_pinned_params(((trainer *)user)->f, u, p); }
static int acc_grads(void *user, int u, float **g) { return sl_fsdp_grad_buffer(((trainer *)user)->f, u, g); }

static int parse_dtype(const char *s, sl_dtype *out, const char *flag) {
  if (!strcmp(s, "fp32") || !strcmp(s, "f32")) *out = SL_F32;
  else if (!strcmp(s, "bf16")) *out = SL_BF16;
  else return sl_fail(SL_EINPUT, "--%s must be fp32 or bf16, found '%s'", flag, s);
  return SL_OK;
}

static double measure_peak(trainer *t) {
  int64_t n = 1024; /* large enough to reach the BLAS plateau (shardlm bench gemm) */
  size_t bytes = (size_t)(n * n) * 4;
  float *a = t->ops->alloc(t->k, bytes), *b = t->ops->alloc(t->k, bytes), *c = t->ops->alloc(t->k, bytes);
  float *h = sl_alloc(bytes, "peak");
  double best = 0;
  if (a && b && c && h) {
    for (int64_t i = 0; i < n * n; i++) h[i] = (float)(i % 7) * 0.01f;
    t->ops->upload(t->k, a, h, bytes);
    t->ops->upload(t->k, b, h, bytes);
    for (int rep = 0; rep < 4; rep++) {
      double t0 = sl_now_s();
      t->ops->linear_fwd(t->k, c, a, b, NULL, n, n, n);
      if (t->ops->sync(t->k)) break; /* a failed kernel: no figure (the default below) */
      double dt = sl_now_s() - t0;
      double fl = 2.0 * n * n * n / dt;
      if (fl > best && rep > 0) best = fl;
    }
  }
  if (a) t->ops->free(t->k, a);
  if (b) t->ops->free(t->k, b);
  if (c) t->ops->free(t->k, c);
  sl_free(h);
  return best > 0 ? best : 1e9;
}

/* ---- optimizer state: tiers none | cpu | nvme ------------------------------- */
static int parse_tier(const sl_train_cfg *c, sl_tier *out) {
  if (!strcmp(c->offload_optimizer, "none")) *out = SL_TIER_NONE;
  else if (!strcmp(c->offload_optimizer, "cpu")) *out = SL_TIER_CPU;
  else if (!strcmp(c->offload_optimizer, "nvme")) *out = SL_TIER_NVME;
  else return sl_fail(SL_EINPUT, "--offload-optimizer must be none, cpu or nvme, found '%s'", c->offload_optimizer);
  if (*out == SL_TIER_NVME && !c->nvme_path[0])
    return sl_fail(SL_EINPUT, "--offload-optimizer nvme needs --nvme-path DIR (a directory on a fast local disk)");
  if (strcmp(c->offload_params, "none") && strcmp(c->offload_params, "cpu")) {
    if (!strcmp(c->offload_params, "nvme"))
      return sl_fail(SL_EINPUT, "--offload-params nvme is not supported yet (parameters: none or cpu)");
    return sl_fail(SL_EINPUT, "--offload-params must be none, cpu or nvme, found '%s'", c->offload_params);
  }
  if (strcmp(c->offload_params, "none") && c->zero != 3)
    return sl_fail(SL_EINPUT, "--offload-params needs --zero 3 (found --zero %lld)", (long long)c->zero);
  return SL_OK;
}

/* Staging buffers sized for the largest view (host and backend). */
static int opt_staging(trainer *t) {
  if (t->state.hview || (t->state.tier == SL_TIER_NONE)) return SL_OK;
  for (int w = 0; w < t->m->nunits; w++) {
    sl_fsdp_view_t vw = sl_fsdp_view(t->f, w);
    if (vw.count > t->state.max_view) t->state.max_view = vw.count;
  }
  size_t bytes = (size_t)t->state.max_view * 4;
  t->state.hview = sl_alloc(bytes, "optimizer staging");
  if (!t->state.hview) return SL_ENOMEM;
  t->state.staging_bytes = (int64_t)bytes;
  if (t->dev) {
    t->state.dview = t->ops->alloc(t->k, bytes);
    t->state.hgrad = sl_alloc(bytes, "gradient staging");
    if (!t->state.dview || !t->state.hgrad) return SL_ENOMEM;
    t->state.staging_bytes += 2 * (int64_t)bytes;
  }
  sl_mem_add(SL_ARENA_WORKSPACE, t->state.staging_bytes);
  return SL_OK;
}

/* Unit u's optimizer state (offload/optstate.c): fp32 master from the host
 * values in flat, zero Adam moments; in backend memory (tier none: device
 * memory on CUDA, beside the parameters), pinned host memory (cpu) or a file
 * (nvme). */
static int opt_create(trainer *t, int u, sl_fsdp_view_t v, const float *flat) {
  int rc = opt_staging(t);
  if (rc) return rc;
  char name[96], pre[64] = "";
  if (t->state.tier == SL_TIER_NVME) sl_nvme_run_prefix(&t->cfg, pre, sizeof pre);
  snprintf(name, sizeof name, "%sr%d-u%d", pre, t->rank, u);
  sl_optstate_cfg oc = {.tier = t->state.tier,
                        .n = v.count,
                        .name = name,
                        .nvme_dir = t->cfg.nvme_path,
                        .budget_bytes = (t->cfg.offload_budget_mb << 20) / t->m->nunits,
                        .ops = t->state.tier == SL_TIER_NONE ? t->ops : NULL,
                        .k = t->k};
  if ((rc = sl_optstate_create(&oc, &t->state.opt[u]))) return rc;
  int64_t valid = flat && v.valid > 0 ? v.valid : 0; /* flat NULL (a dry run): zeros */
  return sl_optstate_init(t->state.opt[u], valid ? flat + v.offset : NULL, valid);
}

/* Host values -> backend memory for the runtime (staged on a device). */
static const float *to_backend(trainer *t, const float *host, int64_t n) {
  if (!t->dev) return host;
  t->ops->upload(t->k, t->state.dview, host, (size_t)n * 4);
  return t->state.dview;
}

/* Unit u's fp32 master values in backend memory. */
static const float *opt_master(trainer *t, int u, int *rc) {
  *rc = SL_OK;
  sl_optstate *st = t->state.opt[u];
  const float *r = sl_optstate_resident(st, SL_OPT_MASTER);
  if (r && sl_optstate_on_backend(st)) return r;
  int64_t n = sl_optstate_n(st);
  if (!r) { /* nvme: through the host staging */
    *rc = sl_optstate_read_master(st, 0, n, t->state.hview);
    r = t->state.hview;
  }
  return to_backend(t, r, n);
}

/* ---- setup / teardown ----------------------------------------------------- */
void sl_trainer_free(trainer *t) {
  if (t->m && t->state.opt) {
    for (int u = 0; u < t->m->nunits; u++) sl_optstate_destroy(t->state.opt[u]);
  }
  free(t->state.opt);
  sl_mem_sub(SL_ARENA_WORKSPACE, t->state.staging_bytes);
  sl_free(t->state.hview);
  sl_free(t->state.hgrad);
  if (t->state.dview) t->ops->free(t->k, t->state.dview);
  if ((t->dev || t->nsets > 1) && t->data.dtok) t->ops->free(t->k, t->data.dtok);
  if ((t->dev || t->nsets > 1) && t->data.dtgt) t->ops->free(t->k, t->data.dtgt);
  if ((t->dev || t->nsets > 1) && t->data.dseg) t->ops->free(t->k, t->data.dseg);
  sl_schedule_destroy(t->sched);
  free(t->scal);
  sl_pp_plan_free(t->par.pplan);
  sl_fsdp_destroy(t->f);
  sl_tpar_free(&t->par.tp);
  sl_par_mesh_destroy(t->par.pmesh);
  sl_model_destroy(t->m);
  sl_sampler_close(t->data.smp);
  if (t->k) t->ops->ctx_destroy(t->k);
  sl_free(t->data.tok);
  sl_free(t->data.tgt);
  sl_free(t->data.seg);
  sl_eval_data_close(t->data.ev);
  if (t->report.metrics) fclose(t->report.metrics); /* an error path: the run already failed */
  sl_rundir_release(&t->lock_fd);
}

/* --doc-attention-mask: models that declare it (sl_model_caps doc_mask); --eod-id inside documents is reported.
 * Also --compute-dtype bf16: models that declare it (sl_model_caps bf16),
 * and --residual-dtype bf16 (bf16 compute, sl_model_caps bf16_stream). */
static int doc_mask_check(trainer *t) {
  sl_train_cfg *c = &t->cfg;
  sl_model_caps caps;
  int rc = sl_model_caps_of(&t->mcfg, &caps);
  if (rc) return rc;
  if (sl_train_cfg_compute_bf16(c, t->dev) && !caps.bf16)
    return sl_fail(SL_EINPUT, "--compute-dtype bf16: not supported for %s yet (no bf16 reference checks it); use fp32",
                   t->mcfg.arch_name);
  if (!strcmp(c->residual_dtype, "bf16") && !sl_train_cfg_compute_bf16(c, t->dev))
    return sl_fail(SL_EINPUT, "--residual-dtype bf16 needs --compute-dtype bf16 (found %s)", c->compute_dtype);
  if (!strcmp(c->residual_dtype, "bf16") && !caps.bf16_stream)
    return sl_fail(SL_EINPUT,
                   "--residual-dtype bf16: %s keeps its residual stream in fp32 (residual_in_fp32); use auto or fp32",
                   t->mcfg.arch_name);
  if (!c->doc_attention_mask) return SL_OK;
  if (!caps.doc_mask)
    return sl_fail(SL_EINPUT,
                   "--doc-attention-mask: not supported for %s (it has no attention; its "
                   "recurrent state would carry across documents); train without it",
                   t->mcfg.arch_name);
  if (c->eod_id >= t->mcfg.vocab_size)
    return sl_fail(SL_EINPUT, "--eod-id %lld is outside the vocabulary [0, %lld)", (long long)c->eod_id,
                   (long long)t->mcfg.vocab_size);
  /* the documents are the .idx's (sl_sampler_batch); an end-of-document id inside them is only reported */
  int64_t eod = c->eod_id >= 0 ? c->eod_id : t->mcfg.vocab_size <= 512 ? SL_BYTE_EOD : -1;
  if (t->dry || t->rank != 0 || eod < 0 || eod >= t->mcfg.vocab_size) return SL_OK;
  sl_sampler *ev = c->eval_data[0] && t->data.ev ? sl_eval_data_sampler(t->data.ev) : NULL;
  for (int k = 0; k < 2; k++) {
    sl_sampler *smp = k ? ev : t->data.smp;
    const char *name = k ? c->eval_data : c->data[0] ? c->data : "the built-in corpus";
    int64_t n = 0;
    if (smp && (rc = sl_sampler_count_inside(smp, eod, &n))) return rc;
    if (n > 0)
      sl_log0(SL_LOG_WARN,
              "--eod-id %lld occurs %lld times inside documents of %s (not as a document's last token): "
              "--doc-attention-mask takes the documents of the .idx document index, so these do not end a "
              "document (docs/data.md)",
              (long long)eod, (long long)n, name);
  }
  return SL_OK;
}

/* Setup step 1: the run's settings (before any runtime starts); *ac: the activation checkpointing. */
static int setup_cfg(trainer *t, const sl_train_cfg *cfg, sl_comm *world, int optim, const sl_model_config *dry,
                     int *ac) {
  memset(t, 0, sizeof *t);
  t->optim = optim > 0;
  t->nodata = optim < 0;
  t->dry = dry;
  t->cfg = *cfg;
  t->world = world;
  t->rank = sl_comm_rank(world);
  t->wsize = sl_comm_size(world);
  t->lock_fd = -1;
  sl_train_cfg *c = &t->cfg;
  int rc;
  if ((rc = sl_guard_init(&t->guard, c->on_nonfinite, c->max_skips))) return rc;
  if (c->steps < 0 || c->micro_batch < 1 || c->seq_len < 1 || c->grad_accum < 1)
    return sl_fail(SL_EINPUT,
                   "--steps >= 0, --micro-batch, --seq-len and --grad-accum >= 1 are required "
                   "(found %lld, %lld, %lld, %lld)",
                   (long long)c->steps, (long long)c->micro_batch, (long long)c->seq_len, (long long)c->grad_accum);
  if (strcmp(c->data_order, "sequential") && strcmp(c->data_order, "shuffled"))
    return sl_fail(SL_EINPUT, "--data-order must be sequential or shuffled, found '%s'", c->data_order);
  if (!dry && !t->nodata && (rc = sl_precheck_paths(c))) return rc; /* a dry run or a session writes nothing */
  *ac = sl_actckpt_from_name(c->activation_checkpoint);
  if (*ac < 0)
    return sl_fail(SL_EINPUT, "--activation-checkpoint must be none, selective or full, found '%s'",
                   c->activation_checkpoint);
  return SL_OK;
}

/* Whether the run computes on a device: its backend's answer, or in a dry run (the counting backend) whether
 * --backend cuda names one. */
static int run_device(const trainer *t) { return t->dry ? !strcmp(t->cfg.backend, "cuda") : t->dev; }

/* Setup step 2: the backend, this rank's place on its node (*hosts), the compute context. */
static int setup_backend(trainer *t, sl_hosts *hosts) {
  sl_train_cfg *c = &t->cfg;
  int rc;
  sl_backend_prepare(); /* before any backend's runtime starts (CUDA: the GPU order engine/hosts.c binds by) */
  /* kernels/registry.c: "auto" = cuda when usable, else cpu; checked with sl_ops_check */
  t->ops = t->dry ? sl_backend_get("count") : sl_backend_pick(c->backend, 1, "--backend");
  if (!t->ops) return SL_EINPUT; /* the message is set */
  t->dev = t->ops->is_device();
  /* local rank from hostnames; binds this rank's threads before the compute pool starts (a dry run: one rank's) */
  memset(hosts, 0, sizeof *hosts);
  hosts->local_size = 1;
  if (!t->dry && (rc = sl_hosts_setup(t->world, t->ops, c->shard_group, (int)c->tp, hosts))) return rc;
  sl_backend_bind_local_rank(t->ops, hosts->local_rank); /* one device per local rank */
  int threads = (int)c->threads;
  if (threads <= 0)
    threads = hosts->bind.bound ? hosts->bind.ncpus : (int)sysconf(_SC_NPROCESSORS_ONLN) / hosts->local_size;
  if (threads < 1) threads = 1;
  t->k = t->ops->ctx_create(threads);
  if (!t->k) return sl_fail(SL_ENOMEM, "cannot create the compute context");
  /* the autos for this backend (a dry run: the device when --backend cuda names it) */
  int auto_dtype = !strcmp(c->compute_dtype, "auto");
  if ((rc = sl_train_cfg_resolve(c, run_device(t)))) return rc;
  int bf16 = sl_train_cfg_compute_bf16(c, t->dev), tf32 = sl_train_cfg_tf32(c);
  if ((rc = t->ops->ctx_set_compute(t->k, (bf16 ? SL_COMPUTE_BF16 : SL_COMPUTE_FP32) | (tf32 ? SL_COMPUTE_TF32 : 0))))
    return rc;
  if (bf16 && !t->dry) /* said once, by the run */
    sl_log0(SL_LOG_INFO,
            "compute bf16%s: GEMM operands, activations and their gradients rounded to bf16, fp32 "
            "accumulation; params %s, reduce %s%s (docs/bf16.md)",
            auto_dtype ? " (--compute-dtype auto on a device)" : "", c->param_dtype, c->reduce_dtype,
            tf32 ? "; TF32 for the GEMMs left in fp32" : "");
  else if (tf32 && !t->dry) sl_log0(SL_LOG_INFO, "compute fp32 with TF32 GEMMs (--tf32 true; docs/bf16.md)");
  return SL_OK;
}

/* The --moe-* routing options into the model config (docs/models.md), or
 * the refusal naming the flag. */
static int moe_options(const sl_train_cfg *c, sl_model_config *mc) {
  static const char *const names[] = {"aux", "bias", "none"};
  int bal = -1;
  for (int i = 0; i < 3; i++)
    if (!strcmp(c->moe_balance, names[i])) bal = i;
  if (bal < 0) return sl_fail(SL_EINPUT, "--moe-balance must be aux, bias or none, found '%s'", c->moe_balance);
  const char *set = c->moe_capacity_factor > 0 ? "--moe-capacity-factor"
                    : c->moe_z_loss_coef > 0   ? "--moe-z-loss-coef"
                    : bal                      ? "--moe-balance"
                    : c->moe_bias_rate_given   ? "--moe-bias-rate"
                                               : NULL;
  if (!mc->moe_experts && set)
    return sl_fail(SL_EINPUT, "%s: %s has no experts (a mixture-of-experts option; Mixtral, Qwen3-MoE)", set,
                   mc->arch_name);
  if (mc->moe_sigmoid && c->moe_z_loss_coef > 0)
    return sl_fail(SL_EINPUT,
                   "--moe-z-loss-coef: %s's router scores are sigmoids; the router z-loss is defined through the "
                   "softmax (not supported with a sigmoid router)",
                   mc->arch_name);
  if (c->moe_bias_rate_given && bal != SL_MOE_BALANCE_BIAS)
    return sl_fail(SL_EINPUT,
                   "--moe-bias-rate is the expert bias's update rate: it needs --moe-balance bias (found %s)",
                   c->moe_balance);
  mc->moe_capacity_factor = c->moe_capacity_factor;
  mc->moe_z_loss_coef = c->moe_z_loss_coef;
  mc->moe_balance = bal;
  mc->moe_bias_rate = c->moe_bias_rate;
  return SL_OK;
}

/* Setup step 3: the model config (--model's config.json, or the built-in tiny Llama) with the --moe-* options. */
static int setup_model_config(trainer *t) {
  const sl_train_cfg *c = &t->cfg;
  int rc;
  if (t->dry) {
    t->mcfg = *t->dry;
    return moe_options(c, &t->mcfg);
  }
  if (c->model[0]) {
    char p[SL_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/config.json", c->model);
    rc = sl_hfconfig_load(p, &t->mcfg);
  } else
    rc = sl_hfconfig_parse("built-in configs/tiny-llama/config.json", sl_builtin_model_config,
                           sl_builtin_model_config_len, &t->mcfg);
  if (!rc) rc = sl_precheck_init(c, &t->init_from); /* --init: weights, the seed, or a checkpoint to resume */
  return rc ? rc : moe_options(c, &t->mcfg);
}

/* Setup step 4: the data (--data, or the built-in corpus rank 0 writes), the held-out stream, the
 * checks that need the data and the model config. */
static int setup_data(trainer *t) {
  sl_train_cfg *c = &t->cfg;
  int rc = SL_OK;
  if (t->dry || t->nodata) return doc_mask_check(t); /* no data: the step's batch stays zero, or is the caller's */
  char prefix[SL_PATH_MAX + 64];
  snprintf(prefix, sizeof prefix, "%s", c->data);
  if (!c->data[0]) {
    char dir[SL_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/data", c->out_dir);
    snprintf(prefix, sizeof prefix, "%s/corpus", dir);
    if (t->rank == 0) {
      rc = sl_mkdirs(dir);
      if (!rc) rc = sl_prepare_text_mem("built-in corpus", sl_builtin_corpus, sl_builtin_corpus_len, prefix, NULL);
    }
    int all = rc;
    if (sl_comm_allreduce_sync(t->world, &all, 1, SL_I32) != SL_COMM_OK)
      return sl_fail(SL_ECOMM, "%s", sl_comm_last_error());
    if (rc) return rc;
    if (all) return sl_fail(SL_EIO, "rank 0 could not prepare the built-in corpus");
  }
  if ((rc = sl_sampler_open(prefix, c->seq_len, c->data_order, (uint64_t)c->seed, t->mcfg.vocab_size, &t->data.smp)))
    return rc;
  if ((rc = sl_eval_data_open(c, prefix, t->data.smp, t->mcfg.vocab_size, &t->data.ev))) return rc;
  if ((rc = doc_mask_check(t))) return rc;
  if ((rc = sl_check_agreement(t->world, c, &t->mcfg, sl_sampler_num_tokens(t->data.smp)))) return rc;
  return sl_precheck(c, &t->mcfg, t->world, t->ops, t->k, sl_sampler_num_tokens(t->data.smp));
}

/* Setup step 5: the mesh (shard/mesh.h: tp fastest, then dp_shard, dp_replicate, pp); this rank's pipeline stage. */
static int setup_mesh(trainer *t) {
  sl_train_cfg *c = &t->cfg;
  int rc;
  if ((rc = sl_tpar_check((int)c->tp, t->wsize))) return rc;
  if ((rc = sl_epar_check(c, &t->mcfg, run_device(t)))) return rc; /* the engine check refuses what train does */
  sl_mesh_dims dims = {.tp = (int)c->tp, .pp = (int)c->pp, .dp_shard = (int)c->shard_group, .ep = (int)c->ep};
  if ((rc = sl_par_mesh_create(t->world, &dims, &t->par.pmesh))) return rc;
  if ((rc = sl_tpar_init(&t->par.tp, t->par.pmesh, (int)c->tp, (int)c->pp, t->ops, t->k))) return rc;
  t->par.dp_rank = t->par.pmesh->group[SL_GROUP_DP].coord;
  t->par.dp_size = t->par.pmesh->group[SL_GROUP_DP].size;
  return sl_pp_plan_for_run(c, &t->mcfg, t->par.pmesh->axis[SL_AXIS_PP].coord, &t->par.pplan);
}

/* Setup step 6: the model (this rank's TP slice and pipeline stage) and FSDP over dp_shard x dp_replicate. */
static int setup_model(trainer *t, int ac) {
  sl_train_cfg *c = &t->cfg;
  int rc;
  const sl_par_mesh *pm = t->par.pmesh;
  const sl_model_layout lay = {pm->axis[SL_AXIS_TP].coord,
                               (int)c->tp,
                               c->sequence_parallel,
                               t->par.pplan ? t->par.pplan->local : NULL,
                               t->par.pplan ? t->par.pplan->nunits : 0,
                               pm->axis[SL_AXIS_EP].coord,
                               pm->axis[SL_AXIS_EP].size,
                               sl_train_cfg_compute_bf16(c, t->dev) && !sl_env_bool("SL_ACT_FP32"),
                               sl_train_cfg_residual_bf16(c, t->dev)};
  if ((rc = sl_model_create_layout(&t->mcfg, t->ops, t->k, c->micro_batch, c->seq_len, (sl_actckpt)ac, &lay, &t->m)))
    return rc;
  if ((rc = sl_epar_init(&t->par.ep, pm, t->ops, t->k))) return rc;
  t->m->access = (sl_unit_access){t, acc_params, acc_grads, sl_tpar_hooks(&t->par.tp), sl_epar_hooks(&t->par.ep)};
  sl_fsdp_cfg fc = {.zero = (int)c->zero,
                    .prefetch = (int)c->prefetch,
                    .prefetch_bytes = c->prefetch_mb << 20,
                    .reshard_after_forward = c->reshard_after_forward,
                    .sync_accum = !c->no_sync_accum,
                    .align = 16};
  if ((rc = parse_dtype(c->param_dtype, &fc.param_dtype, "param-dtype"))) return rc;
  if ((rc = parse_dtype(c->reduce_dtype, &fc.reduce_dtype, "reduce-dtype"))) return rc;
  int U = t->m->nunits;
  int64_t *numel = calloc((size_t)U, sizeof(int64_t));
  if (!numel) return sl_fail(SL_ENOMEM, "out of memory");
  int *roles = calloc((size_t)(2 * U), sizeof(int));
  if (!roles) {
    free(numel);
    return sl_fail(SL_ENOMEM, "out of memory");
  }
  for (int u = 0; u < U; u++) { /* 0: another stage's; a companion follows its owner */
    const sl_unit_spec *us = &t->m->units[u];
    numel[u] = !t->par.pplan || t->par.pplan->held[sl_model_unit_owner(t->m, u)] ? sl_model_unit_held(t->m, u) : 0;
    roles[u] = us->expert;
    roles[U + u] = -1;
  }
  for (int u = 0; u < U; u++)
    if (t->m->units[u].companion_of >= 0) roles[U + t->m->units[u].companion_of] = u;
  /* dense tensors over "shard" (ep x dp_shard); experts over dp_shard (the ranks holding the same
   * experts), their norm summed over ep; at EP = 1 one group */
  sl_fsdp_groups g2[2] = {{pm->group[SL_GROUP_SHARD].comm, pm->axis[SL_AXIS_DP_REPLICATE].comm, NULL}};
  g2[1] = pm->axis[SL_AXIS_EP].size > 1
              ? (sl_fsdp_groups){pm->axis[SL_AXIS_DP_SHARD].comm, pm->axis[SL_AXIS_DP_REPLICATE].comm,
                                 pm->axis[SL_AXIS_EP].comm}
              : g2[0];
  const sl_fsdp_unit_roles ur = {t->m->pinned, roles, roles + U};
  rc = sl_fsdp_create(g2, 2, &fc, t->ops, t->k, U, numel, &ur, &t->f);
  free(numel);
  free(roles);
  return rc;
}

/* Unit u's parameters (from weights, or from the seed) into flat and FSDP, and its optimizer state. */
static int load_unit(trainer *t, int u, sl_st_set *weights, float *flat) {
  sl_train_cfg *c = &t->cfg;
  int rc;
  if (t->dry) return t->optim ? opt_create(t, u, sl_fsdp_view(t->f, u), NULL) : SL_OK; /* no values, only sizes */
  memset(flat, 0, (size_t)t->m->units[u].numel * 4);
  if ((rc = sl_model_unit_load(t->m, u, weights, (uint64_t)c->seed, flat))) return rc;
  for (int i = 0; weights && i < t->m->units[u].ntensors; i++) { /* NaN/inf in the loaded weights */
    const sl_tensor_spec *ts = &t->m->units[u].t[i];
    for (int64_t j = 0; j < ts->numel; j++)
      if (!isfinite(flat[ts->offset + j]))
        return sl_fail(SL_EINPUT, "%s: tensor '%s' has a non-finite value (%s) at element %lld%s", c->model, ts->name,
                       isnan(flat[ts->offset + j]) ? "nan" : "inf", (long long)j,
                       c->tp > 1 ? " of this TP rank's slice" : "");
  }
  const float *mine = flat + t->m->units[u].hold_lo; /* this rank's experts of an EP-split unit */
  if ((rc = sl_fsdp_init_params(t->f, u, mine))) return rc;
  sl_fsdp_view_t v = sl_fsdp_view(t->f, u);
  if (t->optim && (rc = opt_create(t, u, v, mine))) return rc;
  return SL_OK;
}

/* A mixture of experts' expert bias from the weight files (e_score_correction_bias, as --save writes it). */
static int load_moe_bias(trainer *t, const sl_st_set *weights) {
  int found = 0, rc = sl_model_moe_bias_load(t->m, weights, &found);
  if (!rc && found && t->mcfg.moe_balance == SL_MOE_BALANCE_NONE && !t->mcfg.moe_sigmoid)
    sl_log0(SL_LOG_WARN, "%s: the expert bias (e_score_correction_bias) is not used (--moe-balance none)",
            t->cfg.model);
  else if (!rc && found)
    sl_log0(SL_LOG_INFO, "%s: the expert bias (e_score_correction_bias) read: it shifts the top-k selection, %s",
            t->cfg.model, t->mcfg.moe_balance == SL_MOE_BALANCE_BIAS ? "--moe-balance bias updates it" : "held fixed");
  return rc;
}

/* Setup step 7: parameters and optimizer state, one unit at a time; bound: engine/hosts.c bound this
 * rank's threads. */
static int setup_state(trainer *t, int bound) {
  sl_train_cfg *c = &t->cfg;
  int rc;
  sl_st_set *weights = NULL;
  /* the seed otherwise (--init random, the built-in model, a checkpoint's placeholder): said after the resume */
  if (!t->dry && t->init_from == SL_INIT_WEIGHTS && (rc = sl_st_open_dir(c->model, &weights))) return rc;
  if (!t->dry && t->init_from == SL_INIT_WEIGHTS && !weights)
    return sl_fail(SL_EINPUT, "--model %s: its weight files are gone", c->model);
  if (weights && (rc = sl_precheck_tensors(t->m, weights, &t->mcfg))) {
    sl_st_close_set(weights);
    return rc;
  }
  if ((rc = parse_tier(c, &t->state.tier))) return rc;
  if (t->dev && strcmp(c->offload_params, "none")) /* accepted and doing nothing would be a lie about memory */
    return sl_fail(SL_EINPUT,
                   "--offload-params %s on a device backend is not implemented: the parameter shards would "
                   "stay in device memory; drop the flag (or use --offload-optimizer cpu for the optimizer state)",
                   c->offload_params);
  if (t->state.tier != SL_TIER_NONE && !bound) { /* the CPU AdamW's threads and pages on this rank's NUMA node */
    int node = -1;
    if (sl_numa_bind_pool(&node) == SL_OK && node >= 0)
      sl_log(SL_LOG_DEBUG, "offload: compute threads bound to NUMA node %d", node);
  }
  int U = t->m->nunits;
  t->state.opt = calloc((size_t)U, sizeof(sl_optstate *));
  float *flat = t->dry ? NULL : sl_alloc((size_t)sl_model_max_unit_numel(t->m) * 4, "unit load buffer");
  if (!t->state.opt || (!flat && !t->dry)) rc = sl_fail(SL_ENOMEM, "out of memory");
  for (int u = 0; u < U && !rc; u++)
    if (!t->par.pplan || t->par.pplan->held[u]) rc = load_unit(t, u, weights, flat); /* else another stage's unit */
  if (!rc && weights) rc = load_moe_bias(t, weights);
  sl_free(flat);
  if (weights) sl_st_close_set(weights);
  return rc;
}

/* Setup step 8: the step's compute order; the model holds an activation set per micro-batch it keeps
 * in flight; the batch buffers. */
static int setup_schedule(trainer *t) {
  sl_train_cfg *c = &t->cfg;
  int rc;
  sl_schedule_cfg scfg = {.name = t->par.pplan ? "pp" : "single",
                          .pp_plan = t->par.pplan,
                          .pp = t->par.pmesh->axis[SL_AXIS_PP].comm,
                          .tp = t->par.pmesh->axis[SL_AXIS_TP].comm};
  if ((rc = sl_schedule_create(&scfg, &t->sched))) return rc;
  t->nsets = sl_schedule_nacts(t->sched, (int)c->grad_accum);
  if ((rc = sl_model_set_nacts(t->m, (int)t->nsets))) return rc;
  /* the loader's host batch; the model reads each set's own copy (backend memory, or one set on the CPU: the same) */
  int64_t BT = c->micro_batch * c->seq_len;
  size_t sets_bytes = (size_t)(BT * t->nsets) * 4;
  /* a dry run's batch is never written: calloc's untouched pages (sl_free frees either) */
  t->data.tok = t->dry ? calloc((size_t)BT, 4) : sl_alloc((size_t)BT * 4, "tokens");
  t->data.tgt = t->dry ? calloc((size_t)BT, 4) : sl_alloc((size_t)BT * 4, "targets");
  if (c->doc_attention_mask &&
      !(t->data.seg = t->dry ? calloc((size_t)BT, 4) : sl_alloc((size_t)BT * 4, "document starts")))
    return SL_ENOMEM;
  if (!t->data.tok || !t->data.tgt) return sl_fail(SL_ENOMEM, "out of memory");
  t->data.dtok = t->data.tok;
  t->data.dtgt = t->data.tgt;
  int own = t->dev || t->nsets > 1;
  if (own && (!(t->data.dtok = t->ops->alloc(t->k, sets_bytes)) || !(t->data.dtgt = t->ops->alloc(t->k, sets_bytes))))
    return SL_ENOMEM;
  t->data.dseg = t->data.seg;
  if (own && t->data.seg && !(t->data.dseg = t->ops->alloc(t->k, sets_bytes))) return SL_ENOMEM;
  t->data.G = c->micro_batch * c->grad_accum * t->par.dp_size;
  t->nscal = (int)c->grad_accum + t->m->nunits;
  if (!(t->scal = calloc((size_t)t->nscal, sizeof(double)))) return sl_fail(SL_ENOMEM, "out of memory");
  return t->ops->scalars_reserve(t->k, t->nscal);
}

static int setup_all(trainer *t, const sl_train_cfg *cfg, sl_comm *world, int optim, const sl_model_config *dry) {
  int ac = 0, rc;
  sl_hosts hosts;
  if ((rc = setup_cfg(t, cfg, world, optim, dry, &ac))) return rc;
  if ((rc = setup_backend(t, &hosts))) return rc;
  if ((rc = setup_model_config(t))) return rc;
  if ((rc = setup_data(t))) return rc;
  if ((rc = setup_mesh(t))) return rc;
  if ((rc = setup_model(t, ac))) return rc;
  if ((rc = setup_state(t, hosts.bind.bound))) return rc;
  return setup_schedule(t);
}

int sl_trainer_setup(trainer *t, const sl_train_cfg *cfg, sl_comm *world, int optim) {
  return setup_all(t, cfg, world, optim, NULL);
}

int sl_trainer_setup_forward(trainer *t, const sl_train_cfg *cfg, sl_comm *world) {
  return setup_all(t, cfg, world, -1, NULL);
}

int sl_trainer_setup_dry(trainer *t, const sl_train_cfg *cfg, sl_comm *world, const sl_model_config *mc) {
  return setup_all(t, cfg, world, 1, mc);
}

/* ---- one step ------------------------------------------------------------- */
/* The schedule's loader: micro-batch k of the step that starts at
 * t->data.next_sample (rank r, row b reads sample next_sample + r*A*B + k*B + b). */
static int step_load(void *user, int k) {
  trainer *t = user;
  sl_train_cfg *c = &t->cfg;
  sl_model_set_loss_slot(t->m, t->loss_slots ? k : -1);
  if (t->dry) { /* the zero batch: only sizes count */
    set_batch(t, 1.0f);
    return SL_OK;
  }
  int64_t first =
      t->data.next_sample + (int64_t)t->par.dp_rank * (c->grad_accum * c->micro_batch) + (int64_t)k * c->micro_batch;
  /* the loss is a mean over the step's counted targets: every rank counts them from the data */
  int rc = k == 0 ? sl_sampler_count(t->data.smp, t->data.next_sample, t->data.G, &t->data.count) : SL_OK;
  if (!rc) rc = sl_sampler_batch(t->data.smp, first, c->micro_batch, t->data.tok, t->data.tgt, t->data.seg);
  if (rc) return rc;
  set_batch(t, t->data.count > 0 ? (float)(1.0 / (double)t->data.count) : 0.0f); /* no target: zero gradient */
  return SL_OK;
}

static sl_step_ctx step_ctx(trainer *t, int nk) {
  return (sl_step_ctx){.m = t->m, .f = t->f, .nmicro = nk, .user = t, .load = step_load};
}

int sl_trainer_fwd_bwd(trainer *t, int nk, sl_fwd_hook hook, void *hook_user, double *loss_sum) {
  sl_step_ctx sc = step_ctx(t, nk);
  sc.after_fwd = hook;
  sc.hook_user = hook_user;
  sl_step_result r = {0};
  int rc = sl_schedule_run_step(t->sched, &sc, &r);
  *loss_sum = r.loss_sum;
  return rc;
}

static int sum_across(trainer *t, double mine, double *out) {
  sl_comm *over = t->par.tp.loss; /* a TP group's ranks hold the same loss */
  int n = sl_comm_size(over);
  double *all = calloc((size_t)n, sizeof(double));
  if (!all) return SL_ENOMEM;
  if (sl_comm_allgather_sync(over, &mine, all, 1, SL_F64) != SL_COMM_OK) {
    free(all);
    return sl_fail(SL_ECOMM, "loss all-gather: %s", sl_comm_last_error());
  }
  double s = 0;
  for (int r = 0; r < n; r++) s += all[r];
  free(all);
  *out = s;
  return SL_OK;
}

/* Weight-decay ranges of unit u's view, ascending and covering [0, count). */
static int view_ranges(trainer *t, int u, sl_fsdp_view_t v, sl_adam_range *r, int cap) {
  const sl_unit_spec *us = &t->m->units[u];
  int n = 0;
  int64_t at = 0;
  for (int i = 0; i < us->ntensors && n < cap - 1; i++) {
    const sl_tensor_spec *ts = &us->t[i];
    int64_t off = ts->offset - us->hold_lo; /* in the part this rank holds (EP-split experts) */
    int64_t lo = off > v.offset ? off : v.offset;
    int64_t hi = off + ts->numel;
    if (hi > v.offset + v.valid) hi = v.offset + v.valid;
    if (hi <= lo) continue;
    r[n++] = (sl_adam_range){lo - v.offset, hi - lo, ts->decay ? (float)t->cfg.weight_decay : 0.0f};
    at = hi - v.offset;
  }
  if (at < v.count) r[n++] = (sl_adam_range){at, v.count - at, 0.0f}; /* padding */
  return n;
}

static int optimizer_step(trainer *t, int64_t s, double lr, float coef) {
  sl_train_cfg *c = &t->cfg;
  sl_adam_hyper h = {(float)lr, (float)c->beta1, (float)c->beta2, (float)c->eps, 0.0f, s + 1, coef};
  int cap = 0; /* ranges of the largest unit: one per tensor, plus the padding */
  for (int u = 0; u < t->m->nunits; u++)
    if (t->m->units[u].ntensors > cap) cap = t->m->units[u].ntensors;
  cap += 1;
  sl_adam_range *r = malloc(sizeof *r * (size_t)cap);
  if (!r) return sl_fail(SL_ENOMEM, "out of memory for the optimizer's %d weight-decay ranges", cap);
  for (int u = 0; u < t->m->nunits; u++) {
    if (!t->state.opt[u]) continue; /* another pipeline stage's unit */
    sl_fsdp_view_t v = sl_fsdp_view(t->f, u);
    int nr = view_ranges(t, u, v, r, cap);
    sl_optstate *st = t->state.opt[u];
    /* tier none: the backend's AdamW beside the parameters; otherwise the CPU
     * AdamW, gradients brought to the host */
    int host = !sl_optstate_on_backend(st);
    const float *g = v.grads;
    if (host && t->dev) {
      t->ops->download(t->k, t->state.hgrad, v.grads, (size_t)v.count * 4);
      g = t->state.hgrad;
    }
    const float *updated = sl_optstate_resident(st, SL_OPT_MASTER); /* NULL: nvme, results in hview */
    int rc = sl_optstate_step(st, g, r, nr, &h, updated ? NULL : t->state.hview, NULL);
    if (!updated) updated = t->state.hview;
    if (host) updated = to_backend(t, updated, v.count);
    if (!rc) rc = sl_fsdp_set_view(t->f, u, updated);
    if (rc) {
      free(r);
      return rc;
    }
  }
  free(r);
  return sl_fsdp_finish_step(t->f);
}

/* A mixture of experts' tokens per expert per layer in this step's
 * forwards, summed over the ranks of one TP coordinate (the loss's: a rank
 * counts only the blocks it computes, and a TP group's ranks route the same
 * tokens, so the sum counts each token once). */
static int moe_load_step(trainer *t, step_out *o) {
  int64_t n = t->m->cfg.moe_experts * t->m->cfg.num_hidden_layers;
  if (!n) return SL_OK;
  double *sum = malloc(sizeof *sum * (size_t)n);
  if (!o->moe_load) o->moe_load = malloc(sizeof *o->moe_load * (size_t)n);
  if (!sum || !o->moe_load) {
    free(sum);
    return sl_fail(SL_ENOMEM, "out of memory");
  }
  sl_model_moe_load(t->m, o->moe_load);
  for (int64_t i = 0; i < n; i++) sum[i] = (double)o->moe_load[i];
  int rc = sl_comm_allreduce_sync(t->par.tp.loss, sum, n, SL_F64) == SL_COMM_OK
               ? SL_OK
               : sl_fail(SL_ECOMM, "expert load all-reduce: %s", sl_comm_last_error());
  for (int64_t i = 0; i < n; i++) o->moe_load[i] = (int64_t)sum[i];
  o->moe_n = n;
  free(sum);
  return rc;
}

/* The routing options' figures of the step (sl_model_moe_stats) summed as
 * the load is (--moe-balance bias's update follows the step's non-finite
 * check: train_step). */
static int moe_stats_step(trainer *t, step_out *o) {
  int64_t n = t->m->cfg.moe_experts ? t->m->cfg.num_hidden_layers + 4 : 0; /* sl_model_moe_stats's length */
  if (!n) return SL_OK;
  if (!o->moe_stats && !(o->moe_stats = malloc(sizeof *o->moe_stats * (size_t)n)))
    return sl_fail(SL_ENOMEM, "out of memory");
  sl_model_moe_stats(t->m, o->moe_stats);
  if (sl_comm_allreduce_sync(t->par.tp.loss, o->moe_stats, n, SL_F64) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "expert statistics all-reduce: %s", sl_comm_last_error());
  o->moe_sn = n;
  return SL_OK;
}

/* The step's one download: this rank's sums of squares queued after the
 * losses, every slot fetched at once; *loss_local := the micro-batches'
 * losses summed in order (what the schedule's loss_sum adds up). */
static int fetch_scalars(trainer *t, sl_step_ctx *sc, double *loss_local) {
  int K = (int)t->cfg.grad_accum;
  t->sched->vt->queue_sumsq(t->sched, sc, K);
  int rc = t->ops->scalars_fetch(t->k, t->scal, t->nscal);
  if (rc) return rc;
  double l = 0;
  for (int k = 0; k < K; k++) l += t->scal[k];
  *loss_local = l;
  sc->sumsq_slots = t->scal + K;
  return SL_OK;
}

static int train_step(trainer *t, int64_t s, step_out *o) {
  sl_train_cfg *c = &t->cfg;
  double loss_local = 0;
  int rc;
  sl_model_moe_load(t->m, NULL); /* the counters restart: this step's training forwards only */
  sl_model_moe_stats(t->m, NULL);
  t->loss_slots = 1; /* the losses into slots 0..grad_accum-1 */
  rc = sl_trainer_fwd_bwd(t, (int)c->grad_accum, NULL, NULL, &loss_local);
  t->loss_slots = 0;
  sl_model_set_loss_slot(t->m, -1);
  if (rc || (rc = moe_load_step(t, o)) || (rc = moe_stats_step(t, o))) return rc;
  sl_step_ctx sc = step_ctx(t, (int)c->grad_accum);
  if ((rc = fetch_scalars(t, &sc, &loss_local))) return rc;
  double loss_sum = 0;
  loss_local = sl_guard_fault(t->world, s, loss_local); /* tests only (SL_FAULT_NONFINITE) */
  if ((rc = sum_across(t, loss_local, &loss_sum))) return rc;
  o->loss = t->data.count > 0 ? loss_sum / (double)t->data.count : 0.0;
  o->tokens = t->data.count;
  int apply = 1; /* the schedule's norm for every layout; a non-finite step's update is dropped (engine/guard.h) */
  if ((rc = sl_schedule_check_step(t->sched, &sc, &t->guard, t->world, s, o->loss, &o->grad_norm, &apply))) return rc;
  float coef = 1.0f;
  if (c->clip > 0) {
    /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to 1 */
    float cf = (float)c->clip / ((float)o->grad_norm + 1e-6f);
    coef = cf < 1.0f ? cf : 1.0f;
  }
  o->lr = sl_lr_at(c, s);
  rc = apply ? optimizer_step(t, s, o->lr, coef) : sl_fsdp_finish_step(t->f);
  /* the expert bias is training state: a skipped step leaves it as it was */
  if (!rc && apply && t->mcfg.moe_balance == SL_MOE_BALANCE_BIAS) rc = sl_model_moe_bias_step(t->m, o->moe_load);
  t->data.next_sample += t->data.G;
  return rc;
}

int sl_trainer_step(trainer *t, int64_t s, step_out *o) { return train_step(t, s, o); }

/* ---- checkpoints ------------------------------------------------------------ */
static sl_ckpt_state ckpt_state(trainer *t, int64_t step) {
  sl_ckpt_state st = {.m = t->m,
                      .f = t->f,
                      .world = t->world,
                      .cfg = &t->cfg,
                      .master = t->state.ck[0],
                      .mom = t->state.ck[1],
                      .var = t->state.ck[2],
                      .step = step,
                      .next_sample = t->data.next_sample,
                      .rng_seed = (uint64_t)t->cfg.seed,
                      .tp = t->par.tp.comm,
                      .owns = t->par.pplan ? t->par.pplan->local : NULL,
                      .stage_writer =
                          t->par.pmesh->group[SL_GROUP_DP].coord == 0 && t->par.pmesh->axis[SL_AXIS_TP].coord == 0,
                      .ep = t->par.ep.comm};
  st.moe_bias = sl_model_moe_bias(t->m, &st.n_moe_bias);
  return st;
}

/* A checkpoint reads and fills host arrays: the state's own where the host
 * can address them (tiers cpu and none on the CPU backend), temporary host
 * copies otherwise (NVMe files, device memory: read on save, written back
 * after a load). */
static int ck_stage(trainer *t, int read) {
  for (int f = 0; f < 3; f++)
    if (!(t->state.ck[f] = calloc((size_t)t->m->nunits, sizeof(float *)))) return SL_ENOMEM;
  for (int u = 0; u < t->m->nunits; u++) {
    if (!t->state.opt[u]) continue; /* another pipeline stage's unit */
    sl_fsdp_view_t v = sl_fsdp_view(t->f, u);
    for (int f = 0; f < 3; f++) {
      if ((t->state.ck[f][u] = sl_optstate_host_field(t->state.opt[u], (sl_optfield)f))) continue;
      if (!(t->state.ck[f][u] = sl_alloc((size_t)v.count * 4, "checkpoint staging"))) return SL_ENOMEM;
      int rc = read ? sl_optstate_read(t->state.opt[u], (sl_optfield)f, 0, v.count, t->state.ck[f][u]) : SL_OK;
      if (rc) return rc;
    }
  }
  return SL_OK;
}

static int ck_unstage(trainer *t, int write) {
  int rc = SL_OK;
  for (int u = 0; u < t->m->nunits; u++) {
    if (!t->state.opt[u]) continue;
    sl_fsdp_view_t v = sl_fsdp_view(t->f, u);
    for (int f = 0; f < 3; f++) {
      if (!t->state.ck[f] || !t->state.ck[f][u] ||
          t->state.ck[f][u] == sl_optstate_host_field(t->state.opt[u], (sl_optfield)f))
        continue;
      if (write && !rc) rc = sl_optstate_write(t->state.opt[u], (sl_optfield)f, 0, v.count, t->state.ck[f][u]);
      sl_free(t->state.ck[f][u]);
    }
  }
  for (int f = 0; f < 3; f++) {
    free(t->state.ck[f]);
    t->state.ck[f] = NULL;
  }
  return rc;
}

/* Collective: SL_ENONFINITE when the (staged) optimizer state holds NaN/inf. */
static int check_state(trainer *t, int64_t step, const char *what) {
  int64_t *count = calloc((size_t)t->m->nunits, sizeof(int64_t));
  if (!count) return sl_fail(SL_ENOMEM, "out of memory");
  for (int u = 0; u < t->m->nunits; u++) count[u] = t->state.opt[u] ? sl_fsdp_view(t->f, u).count : 0;
  float **const fields[3] = {t->state.ck[0], t->state.ck[1], t->state.ck[2]};
  int rc = sl_guard_check_state(t->world, fields, 3, t->m->nunits, count, step, what);
  free(count);
  return rc;
}

static int save_ckpt(trainer *t, int64_t step) {
  int rc = ck_stage(t, 1);
  sl_ckpt_state st = ckpt_state(t, step);
  if (!rc) rc = check_state(t, step, "the checkpoint");
  if (!rc) rc = sl_ckpt_save(t->cfg.ckpt_dir, &st, (int)t->cfg.keep_last);
  int rc2 = ck_unstage(t, 0);
  return rc ? rc : rc2;
}

static int resume(trainer *t) {
  int rc = ck_stage(t, 0);
  sl_ckpt_state st = ckpt_state(t, 0);
  int found = 0;
  if (!rc) rc = sl_ckpt_load(t->cfg.ckpt_dir, &st, &found);
  if (rc || !found) {
    (void)ck_unstage(t, 0); /* frees only: no status to lose */
    if (!rc) sl_log0(SL_LOG_INFO, "no checkpoint in %s: starting from step 0", t->cfg.ckpt_dir);
    return rc;
  }
  rc = sl_lr_sched_resume(&t->cfg, st.loaded_config, t->cfg.ckpt_dir); /* the checkpoint's schedule continues */
  free(st.loaded_config);
  if (rc) {
    (void)ck_unstage(t, 0);
    return rc;
  }
  t->start_step = st.step;
  t->resumed = 1;
  t->data.next_sample = st.next_sample;
  t->cfg.seed = (int64_t)st.rng_seed; /* the data order continues as written */
  sl_sampler_set_seed(t->data.smp, st.rng_seed);
  rc = sl_model_moe_bias_step(t->m, NULL); /* the restored expert bias to the backend */
  if (!rc) rc = ck_unstage(t, 1);          /* into backend memory / the NVMe files */
  for (int u = 0; u < t->m->nunits && !rc; u++) {
    if (!t->state.opt[u]) continue; /* another pipeline stage's unit */
    const float *mv = opt_master(t, u, &rc);
    if (!rc) rc = sl_fsdp_set_view(t->f, u, mv);
  }
  if (!rc) rc = sl_fsdp_finish_step(t->f);
  sl_log0(SL_LOG_INFO, "resumed from %s at step %lld (next sample %lld)", t->cfg.ckpt_dir, (long long)st.step,
          (long long)st.next_sample);
  return rc;
}

/* ---- saving ----------------------------------------------------------------- */
/* Unit u's flat (at T > 1: every TP rank's, rank after rank, engine/tensor_par.h). */
static int fill_unit(void *ctx, int u, float *flat) {
  trainer *t = ctx;
  int rc = SL_OK;
  if (t->state.opt[u]) { /* held here */
    const float *mv = opt_master(t, u, &rc);
    if (!rc)
      rc = sl_fsdp_gather_view(t->f, u, mv, flat + t->m->tp_rank * t->m->units[u].numel + t->m->units[u].hold_lo);
  }
  if (!rc) rc = sl_epar_gather_unit(&t->par.ep, t->m, u, flat);
  if (!rc) rc = sl_tpar_gather_unit(&t->par.tp, t->m, u, flat);
  /* another stage's unit: its owner's first DP rank sends it to rank 0 */
  return t->par.pplan ? sl_pp_route_unit(t->par.pplan, t->par.pmesh, u, flat, t->m->units[u].numel * t->par.tp.T, rc)
                      : rc;
}

/* Rank 0 writes while every rank enters each unit's gathers in unit order:
 * a write that fails must not leave the others waiting in a gather rank 0
 * never enters, so rank 0 catches up on any unit its writer skipped and
 * drains the rest after a failure (fill_seq, below). */
typedef struct {
  trainer *t;
  int next; /* the next unit every rank expects to gather */
} save_seq;

static int fill_seq(void *ctx, int u, float *flat) {
  save_seq *q = ctx;
  int rc = SL_OK;
  while (!rc && q->next < u) rc = fill_unit(q->t, q->next++, flat);
  if (rc) return rc;
  q->next = u + 1;
  return fill_unit(q->t, u, flat);
}

static int save_model(trainer *t, const char *dir, int64_t step) {
  int rc = ck_stage(t, 1); /* never save non-finite weights */
  if (!rc) rc = check_state(t, step, "the --save directory");
  int rc2 = ck_unstage(t, 0);
  if (rc || (rc = rc2)) return rc;
  float *flat = sl_alloc((size_t)(sl_model_max_unit_numel(t->m) * t->par.tp.T) * 4, "save buffer");
  if (!flat) return SL_ENOMEM; /* before any gather: every rank sizes the same buffer */
  save_seq q = {.t = t, .next = 0};
  int comm_rc = SL_OK; /* a gather that failed: the others are gone, no draining */
  if (t->rank == 0) {
    int64_t nb;
    sl_st_dtype dt; /* --save-dtype auto: the --model directory's dtype */
    rc = sl_savedir_dtype(t->cfg.save_dtype, t->cfg.model, &dt);
    if (!rc) rc = sl_model_save(t->m, dir, fill_seq, &q, 0, sl_model_moe_bias(t->m, &nb), dt, t->cfg.model);
    if (rc == SL_ECOMM) comm_rc = rc;
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", sl_errmsg());
    while (!comm_rc && q.next < t->m->nunits) comm_rc = fill_unit(t, q.next++, flat); /* drain */
    if (rc && !comm_rc) sl_fail(rc, "%s", keep); /* the write's message, not the drain's */
  } else {
    for (int u = 0; u < t->m->nunits && !rc; u++) rc = fill_unit(t, u, flat);
    comm_rc = rc;
  }
  sl_free(flat);
  if (comm_rc) return rc ? rc : comm_rc;
  /* every rank learns rank 0's verdict and message, and exits with it */
  int32_t code = t->rank == 0 ? rc : 0;
  char msg[1024] = "";
  if (t->rank == 0 && rc) snprintf(msg, sizeof msg, "%s", sl_errmsg());
  if (sl_comm_allreduce_sync(t->world, &code, 1, SL_I32) != SL_COMM_OK ||
      (code && sl_comm_broadcast_sync(t->world, msg, (int64_t)sizeof msg, SL_U8, 0) != SL_COMM_OK))
    return rc ? rc : sl_fail(SL_ECOMM, "saving %s: %s", dir, sl_comm_last_error());
  if (t->rank == 0 || !code) return rc;
  msg[sizeof msg - 1] = 0;
  return sl_fail(code, "rank 0 could not save %s: %s", dir, msg);
}

/* Rank 0's status, shared: every rank returns its code (rank 0's message). */
static int rank0_agree(trainer *t, int rc) {
  int32_t code = t->rank == 0 ? rc : 0;
  if (sl_comm_allreduce_sync(t->world, &code, 1, SL_I32) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "%s", sl_comm_last_error());
  if (t->rank == 0 || !code) return rc;
  return sl_fail(code, "rank 0 could not set up the run's outputs (see its message)");
}

/* The run's outputs: the metrics path, OUT_DIR, the checkpoint directory's lock (rank 0), the pipeline
 * drawing into ppsvg (rank 0, --plot, --pp > 1; "" when none). */
static int run_outputs(trainer *t, char *ppsvg, size_t ppsvg_size) {
  sl_train_cfg *c = &t->cfg;
  int rc = SL_OK;
  if (c->metrics[0]) snprintf(t->report.metrics_path, sizeof t->report.metrics_path, "%s", c->metrics);
  else snprintf(t->report.metrics_path, sizeof t->report.metrics_path, "%s/metrics.jsonl", c->out_dir);
  if (t->rank == 0) {
    rc = sl_mkdirs(c->out_dir);
    if (!rc && c->ckpt_dir[0]) rc = sl_rundir_claim(c->ckpt_dir, c->resume, &t->lock_fd); /* lock, no foreign run */
    char mtext[SL_MODEL_CANON_MAX], hash[20] = "";
    if (!rc && !sl_model_canonical(&t->mcfg, 0, mtext, sizeof mtext))
      snprintf(hash, sizeof hash, "%016llx", (unsigned long long)sl_canon_hash(mtext));
    if (!rc) rc = sl_rundir_record(c, hash); /* run.json, runs/latest, CKPT_DIR/run-dir */
  }
  if ((rc = rank0_agree(t, rc))) return rc;
  if (t->rank == 0 && t->par.pplan && c->plot && sl_pp_report_svg(c, t->par.pplan, ppsvg, ppsvg_size)) {
    sl_log(SL_LOG_WARN, "could not draw the pipeline schedule: %s", sl_errmsg());
    ppsvg[0] = 0;
  }
  return SL_OK;
}

/* The peak FLOP rate and the run's opening line; returns the model's FLOPs per token. */
static double run_banner(trainer *t) {
  sl_train_cfg *c = &t->cfg;
  t->report.peak_flops = c->peak_tflops > 0 ? c->peak_tflops * 1e12 : measure_peak(t);
  double flops_tok = (double)t->m->vt->flops_per_token(t->m, c->seq_len);
  sl_model *full = NULL; /* the model's parameter count, not one TP rank's slice */
  int64_t nparams = sl_model_create_specs(&t->mcfg, &full) ? sl_model_num_params(t->m) : sl_model_num_params(full);
  sl_model_destroy(full);
  sl_log0(SL_LOG_INFO,
          "shardlm: %s %lld params (%d units) | %d rank%s (DP %d x TP %lld x PP %lld), ZeRO-%lld | batch %lld x %lld x "
          "%lld tokens | "
          "data %s (%lld tokens, %s) | peak %.1f GFLOP/s per rank",
          t->mcfg.arch_name, (long long)nparams, t->m->nunits, t->wsize, t->wsize > 1 ? "s" : "", t->par.dp_size,
          (long long)c->tp, (long long)c->pp, (long long)c->zero, (long long)t->data.G, (long long)c->seq_len, 1LL,
          c->data[0] ? c->data : "built-in corpus", (long long)sl_sampler_num_tokens(t->data.smp), c->data_order,
          t->report.peak_flops * 1e-9);
  return flops_tok;
}

/* Step s's progress: the terminal's line (tty), else a log line every --log-every steps. */
static void run_progress(const trainer *t, int64_t s, const step_out *o, double dt, double flops_tok, int tty) {
  const sl_train_cfg *c = &t->cfg;
  const trainer_report *r = &t->report;
  (void)dt;
  (void)flops_tok;
  char moe[96], el[32], eta[32], prog[160];
  sl_trainer_moe_note(t, o, moe, sizeof moe);
  /* smoothed over the last SL_PROG_WIN steps (engine/report.c sl_trainer_progress) */
  snprintf(prog, sizeof prog, "tokens/s %.0f mfu %.1f%% elapsed %s eta %s", r->tps_avg, 100.0 * r->mfu_avg,
           sl_fmt_dur(el, sizeof el, r->elapsed_s), sl_fmt_dur(eta, sizeof eta, r->eta_s));
  if (tty) {
    printf("\rstep %lld/%lld  loss %.4f  lr %.2e  |g| %.3f  %.0f tok/s  MFU %.1f%%  elapsed %s  ETA %s%s   ",
           (long long)(s + 1), (long long)c->steps, o->loss, o->lr, o->grad_norm, r->tps_avg, 100.0 * r->mfu_avg, el,
           eta, moe);
    if (o->ev.samples) printf("\n  eval loss %.4f  ppl %.2f\n", o->ev.loss, o->ev.ppl);
    fflush(stdout);
  } else if (o->ev.samples) {
    sl_log0(SL_LOG_INFO, "step %lld/%lld loss %.4f lr %.3e grad_norm %.4f %s eval_loss %.4f eval_ppl %.3f",
            (long long)(s + 1), (long long)c->steps, o->loss, o->lr, o->grad_norm, prog, o->ev.loss, o->ev.ppl);
  } else if ((c->log_every > 0 && (s + 1) % c->log_every == 0) || s == 0 || s + 1 == c->steps) {
    sl_log0(SL_LOG_INFO, "step %lld/%lld loss %.4f lr %.3e grad_norm %.4f %s%s", (long long)(s + 1),
            (long long)c->steps, o->loss, o->lr, o->grad_norm, prog, moe);
  }
}

/* After step s: held-out loss, the signal vote, the metrics line, the non-finite verdict, a checkpoint;
 * *stop_sig: the signal every rank stops on (0: none). */
static int run_after_step(trainer *t, int64_t s, step_out *o, double dt, double flops_tok, int *stop_sig) {
  sl_train_cfg *c = &t->cfg;
  int rc;
  o->ev.samples = 0; /* held-out loss, unless the step was non-finite and the run stops */
  if (!t->guard.stop && t->data.ev && sl_eval_due(c, s) &&
      (rc = run_eval(t, sl_eval_data_sampler(t->data.ev), sl_eval_data_samples(t->data.ev), &o->ev)))
    return rc;
  if ((rc = sl_signals_agree(t->world, stop_sig))) return rc; /* every rank stops after the same step */
  /* the step's line is on disk before a checkpoint commits the step */
  if ((rc = sl_trainer_write_metrics(t, s, o, dt, flops_tok))) return rc;
  if ((rc = sl_guard_verdict(&t->guard))) return rc; /* non-finite: stop before saving anything */
  if (c->ckpt_dir[0] && (*stop_sig || (c->ckpt_every > 0 && (s + 1) % c->ckpt_every == 0) || s + 1 == c->steps)) {
    if (t->report.metrics && (rc = sl_metrics_sync(t->report.metrics, t->report.metrics_path))) return rc;
    if ((rc = save_ckpt(t, s + 1))) return rc;
  }
  if (*stop_sig)
    sl_log0(SL_LOG_WARN, "%s: stopping after step %lld of %lld%s%s%s", sl_signal_name(*stop_sig), (long long)(s + 1),
            (long long)c->steps, c->ckpt_dir[0] ? "; checkpoint in " : " (no --ckpt-dir: nothing saved)", c->ckpt_dir,
            c->ckpt_dir[0] ? "; continue with --resume" : "");
  return SL_OK;
}

/* Rank 0, a run that trained: the closing lines and the plot. */
static void run_report(trainer *t, double wall, double first_loss, double last_loss, const char *ppsvg) {
  sl_train_cfg *c = &t->cfg;
  printf("trained %lld steps (%lld..%lld) in %.1f s: loss %.4f -> %.4f\n", (long long)(c->steps - t->start_step),
         (long long)t->start_step + 1, (long long)c->steps, wall, first_loss, last_loss);
  printf("run:     %s (settings in run.json%s)\n", c->out_dir, c->out_dir_auto ? "; runs/latest names the newest" : "");
  printf("metrics: %s\n", t->report.metrics_path);
  if (c->plot && g_plotter) {
    char svg[SL_PATH_MAX + 64];
    snprintf(svg, sizeof svg, "%s/metrics.svg", c->out_dir);
    if (g_plotter(t->report.metrics_path, svg) == SL_OK) printf("plot:    %s\n", svg);
    else sl_log(SL_LOG_WARN, "could not draw the plot: %s", sl_errmsg());
  }
  if (ppsvg[0]) printf("pipeline: %s (the schedule's timeline)\n", ppsvg);
  if (c->save[0]) printf("model:   %s (Hugging Face format)\n", c->save);
}

int sl_train_run(const sl_train_cfg *cfg, sl_comm *world) {
  if (cfg->pp_dry_run) return sl_pp_dry_run(cfg, sl_comm_rank(world)); /* engine/report_pp.c */
  trainer t;
  /* pipeline.svg, next to metrics.svg */
  char ppsvg[SL_PATH_MAX + 32] = "";
  step_out o = {0};     /* before any goto done: done frees o.moe_load */
  sl_signals_install(); /* a signal during setup stops the run after its first step */
  int rc = sl_trainer_setup(&t, cfg, world, 1);
  if (rc) goto done;
  sl_train_cfg *c = &t.cfg;
  if ((rc = run_outputs(&t, ppsvg, sizeof ppsvg))) goto done;
  double flops_tok = run_banner(&t);
  if (c->resume && c->ckpt_dir[0] && (rc = resume(&t))) goto done;
  if ((rc = sl_precheck_init_done(c, t.init_from, t.resumed))) goto done; /* the seed's line, after the resume */
  /* resumed: the metrics keep the steps the checkpoint holds, nothing past it */
  if (t.rank == 0) rc = sl_metrics_open(t.report.metrics_path, c->resume ? t.start_step : -1, &t.report.metrics);
  if ((rc = rank0_agree(&t, rc))) goto done;
  if (t.rank == 0 && c->tensorboard) sl_trainer_tb_open(&t);
  if (t.start_step >= c->steps && t.start_step > 0)
    sl_log0(SL_LOG_INFO,
            "nothing to train: the checkpoint in %s is at step %lld and --steps is %lld (raise --steps "
            "to train further)",
            c->ckpt_dir, (long long)t.start_step, (long long)c->steps);
  /* mpirun gives ranks a pty: trust SL_TTY (set by --nproc) over isatty there */
  int tty = t.rank == 0 && isatty(STDOUT_FILENO) &&
            (sl_env_set("SL_TTY") ? sl_env_bool("SL_TTY") : getenv("OMPI_COMM_WORLD_SIZE") == NULL);
  double t_start = sl_now_s(), first_loss = 0;
  sl_mem_reset_peaks();
  sl_fsdp_reset_comm_stats(t.f);
  t.ops->dev_stats(t.k, &t.report.prev_dev); /* the metrics' dev counters: the steps' own, not the set-up's */
  int stop_sig = 0;
  for (int64_t s = t.start_step; s < c->steps && !stop_sig; s++) {
    double t0 = sl_now_s();
    if ((rc = train_step(&t, s, &o))) goto done;
    double dt = sl_now_s() - t0;
    sl_mem_set(SL_ARENA_SCRATCH, (int64_t)t.ops->ctx_scratch_bytes(t.k));
    if (s == t.start_step) first_loss = o.loss;
    sl_trainer_progress(&t, s, dt, sl_now_s() - t_start, flops_tok);
    if ((rc = run_after_step(&t, s, &o, dt, flops_tok, &stop_sig))) goto done;
    run_progress(&t, s, &o, dt, flops_tok, tty);
  }
  if (tty) printf("\n");
  double wall = sl_now_s() - t_start;
  if ((rc = rank0_agree(&t, sl_metrics_close(&t.report.metrics, t.report.metrics_path)))) goto done;
  if (stop_sig) goto done; /* the run is not finished: no --save, no summary */
  if (c->save[0] && (rc = save_model(&t, c->save, c->steps > t.start_step ? c->steps : t.start_step))) goto done;
  if (c->summary) sl_trainer_summary(&t, wall);
  if (t.rank == 0 && c->steps > t.start_step) run_report(&t, wall, first_loss, o.loss, ppsvg);
done:
  sl_trainer_tb_close(&t);
  free(o.moe_load);
  free(o.moe_stats);
  sl_trainer_free(&t);
  return rc;
}

/* ---- the plot hook (tools/plot.c is above the engine) ---- */
void sl_train_set_plotter(sl_plotter fn) { g_plotter = fn; }

/* ---- shardlm eval ------------------------------------------------------------ */
int sl_train_eval(const sl_train_cfg *cfg, sl_comm *world, int64_t K, sl_eval_result *res) {
  trainer t;
  sl_train_cfg c2 = *cfg;
  snprintf(c2.data_order, sizeof c2.data_order, "sequential"); /* window j is sample j */
  /* forward only: every window runs through the stages in order (engine/schedule_pp.c pp_forward) whatever the
   * schedule, so the backward schedules' micro-batch refusals do not apply: gpipe, or interleaved's chunks kept */
  if (c2.pp > 1 && strcmp(c2.pp_schedule, "interleaved")) snprintf(c2.pp_schedule, sizeof c2.pp_schedule, "gpipe");
  else if (c2.pp > 1 && c2.grad_accum % c2.pp) c2.grad_accum = (c2.grad_accum / c2.pp + 1) * c2.pp;
  int rc = sl_trainer_setup(&t, &c2, world, 0); /* no optimizer state */
  if (!rc) { /* --max-samples is a cap: at most the data's whole windows, as a run's held-out loss takes */
    int64_t whole = (sl_sampler_num_tokens(t.data.smp) - 1) / c2.seq_len;
    if (whole < 1)
      rc = sl_fail(SL_EINPUT, "%s holds %lld tokens, fewer than one window of --seq-len %lld + 1", c2.data,
                   (long long)sl_sampler_num_tokens(t.data.smp), (long long)c2.seq_len);
    if (K > whole) K = whole;
  }
  if (!rc) rc = run_eval(&t, t.data.smp, K, res);
  sl_trainer_free(&t);
  return rc;
}
