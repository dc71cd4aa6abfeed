/* engine/report.c — what a training run tells its user: the per-step
 * metrics line (JSONL, strict JSON: non-finite values as null) and the
 * per-rank summary at the end (peak bytes per arena, bytes per collective
 * kind, time blocked on communication). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "engine/trainer_internal.h"
#include "formats/metrics.h"
#include "formats/tbevents.h"

/* The collective kinds tensor parallelism uses, in the order printed. */
static const sl_coll_kind TP_KINDS[3] = {SL_COLL_ALLGATHER, SL_COLL_REDUCE_SCATTER, SL_COLL_ALLREDUCE};

/* A rank's all-to-all bytes in the summary's row v: the shard and replica groups' (the ep axis's added to the shard's). */
static int64_t a2a_bytes(const int64_t *v) {
  return v[SL_ARENA_COUNT + SL_COLL_ALLTOALL] + v[SL_ARENA_COUNT + SL_COLL_NKINDS + SL_COLL_ALLTOALL];
}

void sl_trainer_summary(trainer *t, double wall) {
  enum { NV0 = SL_ARENA_COUNT + 2 * SL_COLL_NKINDS + 2, CAP = NV0 + 5 };
  /* the TP axis's bytes per kind at T > 1, the a2a ns, the device-side waits */
  int tp = t->cfg.tp > 1, NV = NV0 + (tp ? 3 : 0) + 2;
  int64_t mine[CAP], *all = calloc((size_t)t->wsize, sizeof mine);
  if (!all) return;
  sl_mem_stats ms;
  sl_mem_get(&ms);
  sl_comm_stats sh, rp;
  sl_fsdp_comm_stats(t->f, &sh, &rp);
  sl_epar_add_stats(&t->par.ep, &sh);
  int i = 0;
  for (int a = 0; a < SL_ARENA_COUNT; a++) mine[i++] = ms.peak[a];
  for (int kk = 0; kk < SL_COLL_NKINDS; kk++) mine[i++] = (int64_t)sh.bytes[kk];
  for (int kk = 0; kk < SL_COLL_NKINDS; kk++) mine[i++] = (int64_t)rp.bytes[kk];
  mine[i++] = (int64_t)sl_fsdp_wait_ns(t->f);
  mine[i++] = ms.total_peak;
  sl_comm_stats ts;
  if (tp) sl_tpar_stats(&t->par.tp, &ts);
  for (int kk = 0; tp && kk < 3; kk++) mine[i++] = (int64_t)ts.bytes[TP_KINDS[kk]];
  mine[i++] = (int64_t)sh.alltoall_ns;
  mine[i++] = (int64_t)(sh.stream_waits + rp.stream_waits + (tp ? ts.stream_waits : 0));
  if (sl_comm_allgather_sync(t->world, mine, all, NV, SL_I64) == SL_COMM_OK && t->rank == 0) {
    printf("\nper-rank summary (%d rank%s, ZeRO-%lld, %.1f s):\n", t->wsize, t->wsize > 1 ? "s" : "",
           (long long)t->cfg.zero, wall);
    printf("  rank |   params    grads    optim   gather     acts workspace |    total | "
           "all-gather reduce-scat  all-reduce | blocked on comm\n");
    int64_t a2a_any = 0; /* the all-to-all (expert parallelism) gets its own line, only when some rank sent any */
    int64_t dwaits = 0;  /* the device-side waits line (NCCL), only when some rank made any */
    for (int r = 0; r < t->wsize; r++) a2a_any |= a2a_bytes(all + (size_t)r * NV);
    for (int r = 0; r < t->wsize; r++) dwaits |= all[(size_t)r * NV + NV - 1];
    for (int r = 0; r < t->wsize; r++) {
      int64_t *v = all + (size_t)r * NV, *w = v + NV0 - 2; /* wait_ns, then the total */
      double mb = 1.0 / (1 << 20);
      int64_t ag = v[SL_ARENA_COUNT + SL_COLL_ALLGATHER] + v[SL_ARENA_COUNT + SL_COLL_NKINDS + SL_COLL_ALLGATHER];
      int64_t rs =
          v[SL_ARENA_COUNT + SL_COLL_REDUCE_SCATTER] + v[SL_ARENA_COUNT + SL_COLL_NKINDS + SL_COLL_REDUCE_SCATTER];
      int64_t ar = v[SL_ARENA_COUNT + SL_COLL_ALLREDUCE] + v[SL_ARENA_COUNT + SL_COLL_NKINDS + SL_COLL_ALLREDUCE];
      printf("  %4d | %7.2fM %7.2fM %7.2fM %7.2fM %7.2fM %8.2fM | %7.2fM | %9.2fM %10.2fM %10.2fM | %.2f s (%.1f%%)\n",
             r, v[SL_ARENA_PARAMS] * mb, v[SL_ARENA_GRADS] * mb, v[SL_ARENA_OPTIM] * mb, v[SL_ARENA_GATHER] * mb,
             v[SL_ARENA_ACTS] * mb, v[SL_ARENA_WORKSPACE] * mb, w[1] * mb, ag * mb, rs * mb, ar * mb, w[0] * 1e-9,
             100.0 * w[0] * 1e-9 / (wall > 0 ? wall : 1));
      if (a2a_any)
        printf("       all-to-all %.2fM, %.2f s inside its calls (%.1f%%)\n", a2a_bytes(v) * mb, v[NV - 2] * 1e-9,
               100.0 * v[NV - 2] * 1e-9 / (wall > 0 ? wall : 1));
      if (dwaits)
        printf("       device-side waits %lld (comm -> compute ordered on the device, not in blocked on comm)\n",
               (long long)v[NV - 1]);
      if (tp)
        printf("       tp axis (T = %lld): all-gather %.2fM reduce-scatter %.2fM all-reduce %.2fM\n",
               (long long)t->cfg.tp, v[NV0] * mb, v[NV0 + 1] * mb, v[NV0 + 2] * mb);
    }
    printf("  (peak bytes per arena in MiB; bytes each rank sent per collective kind, in MiB)\n");
  }
  free(all);
}

/* The worst layer's max / mean tokens per expert (1: balanced). */
static double moe_imbalance(const int64_t *load, int64_t n, int64_t E) {
  double worst = 0;
  for (int64_t l = 0; l < n / E; l++) {
    int64_t mx = 0, sum = 0;
    for (int64_t e = 0; e < E; e++) {
      sum += load[l * E + e];
      mx = load[l * E + e] > mx ? load[l * E + e] : mx;
    }
    double r = sum ? (double)mx * (double)E / (double)sum : 0;
    worst = r > worst ? r : worst;
  }
  return worst;
}

void sl_trainer_moe_note(const trainer *t, const step_out *o, char *buf, size_t cap) {
  const sl_model_config *mc = &t->mcfg;
  int64_t L = o->moe_sn - 4;
  size_t n = 0;
  buf[0] = 0;
  if (o->moe_sn <= 0) return;
  if (mc->moe_capacity_factor > 0) {
    double d = 0;
    for (int64_t l = 0; l < L; l++) d += o->moe_stats[l];
    n += (size_t)snprintf(buf + n, cap - n, " moe_dropped %.0f", d);
  }
  if (mc->moe_z_loss_coef > 0 && n < cap && o->moe_stats[L + 3] > 0)
    snprintf(buf + n, cap - n, " moe_z_loss %.4f", o->moe_stats[L + 2] / o->moe_stats[L + 3]);
}

/* The routing options' metrics: dropped slots per layer, the aux and z losses (their means, without coefficients). */
static void moe_metrics(const trainer *t, const step_out *o, FILE *f) {
  int64_t L = o->moe_sn - 4;
  if (o->moe_sn <= 0) return;
  const double *st = o->moe_stats;
  if (t->mcfg.moe_capacity_factor > 0) {
    fprintf(f, ", \"moe_dropped\": [");
    for (int64_t l = 0; l < L; l++) fprintf(f, "%s%.0f", l ? ", " : "", st[l]);
    fprintf(f, "]");
  }
  if (st[L + 1] > 0) fprintf(f, ", \"moe_aux_loss\": %.9g", st[L] / st[L + 1]);
  if (t->mcfg.moe_z_loss_coef > 0 && st[L + 3] > 0) fprintf(f, ", \"moe_z_loss\": %.9g", st[L + 2] / st[L + 3]);
}

void sl_trainer_progress(trainer *t, int64_t s, double dt, double wall, double flops_tok) {
  trainer_report *r = &t->report;
  enum { W = SL_PROG_WIN };
  if (r->prog_done == 0) r->prog_end[0] = 0;
  r->prog_dt[r->prog_done % W] = dt;
  r->prog_done++;
  r->prog_end[r->prog_done % (W + 1)] = wall;
  int64_t n = r->prog_done < W ? r->prog_done : W;
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += r->prog_dt[i];
  double per_step = (wall - r->prog_end[(r->prog_done - n) % (W + 1)]) / (double)n;
  r->elapsed_s = wall;
  r->tps_avg = sum > 0 ? (double)n * (double)t->data.G * (double)t->cfg.seq_len / sum : 0;
  r->mfu_avg = r->peak_flops > 0 ? flops_tok * r->tps_avg / (r->peak_flops * t->wsize) : 0;
  r->eta_s = per_step * (double)(t->cfg.steps - s - 1);
}

const char *sl_fmt_dur(char *buf, size_t cap, double s) {
  if (!(s >= 0)) s = 0;
  long long x = (long long)(s + 0.5);
  if (s < 60) snprintf(buf, cap, "%.1fs", s);
  else if (x < 3600) snprintf(buf, cap, "%lldm%02llds", x / 60, x % 60);
  else snprintf(buf, cap, "%lldh%02lldm", x / 3600, x / 60 % 60);
  return buf;
}

/* The metrics line's charted figures as TensorBoard scalars (the same values; float32 there). */
static void tb_step(trainer *t, int64_t s, const step_out *o, double tps, double mfu, double dt,
                    const sl_mem_stats *ms) {
  sl_tb *tb = t->report.tb;
  if (!tb) return;
  char tag[64];
  sl_tb_begin(tb, s + 1);
  sl_tb_scalar(tb, "train/loss", o->loss);
  sl_tb_scalar(tb, "train/lr", o->lr);
  sl_tb_scalar(tb, "train/grad_norm", o->grad_norm);
  sl_tb_scalar(tb, "train/tokens_per_s", tps);
  sl_tb_scalar(tb, "train/mfu", mfu);
  sl_tb_scalar(tb, "train/step_time_s", dt);
  sl_tb_scalar(tb, "train/skipped_steps", (double)t->guard.total);
  sl_tb_scalar(tb, "memory/peak_bytes", (double)ms->total_peak);
  for (int a = 0; a < SL_ARENA_COUNT; a++) {
    snprintf(tag, sizeof tag, "memory/%s", sl_arena_name(a));
    sl_tb_scalar(tb, tag, (double)ms->peak[a]);
  }
  if (o->moe_n) sl_tb_scalar(tb, "moe/max_over_mean", moe_imbalance(o->moe_load, o->moe_n, t->m->cfg.moe_experts));
  if (o->ev.samples) {
    sl_tb_scalar(tb, "eval/loss", o->ev.loss);
    sl_tb_scalar(tb, "eval/ppl", o->ev.ppl);
  }
  sl_tb_end(tb);
}

void sl_trainer_tb_open(trainer *t) {
  struct stat sb; /* the metrics' directory, unless they go to a device (/dev/stdout): OUT_DIR then */
  char dir[SL_PATH_MAX + 64];
  snprintf(dir, sizeof dir, "%s", t->report.metrics_path);
  char *slash = strrchr(dir, '/');
  if (stat(t->report.metrics_path, &sb) != 0 || !S_ISREG(sb.st_mode)) snprintf(dir, sizeof dir, "%s", t->cfg.out_dir);
  else if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = 0;
  else *slash = 0;
  sl_tb_open(dir, t->cfg.resume ? t->start_step + 1 : 0, &t->report.tb);
}

void sl_trainer_tb_close(trainer *t) { sl_tb_close(&t->report.tb); }

int sl_trainer_write_metrics(trainer *t, int64_t s, const step_out *o, double dt, double flops_tok) {
  int64_t *stages = NULL; /* --pp > 1: every stage's figures (a collective over the PP communicator) */
  int rc = t->par.pplan ? sl_trainer_pp_gather(t, &stages) : SL_OK;
  if (rc || t->rank != 0 || !t->report.metrics) {
    free(stages);
    return rc;
  }
  sl_mem_stats ms;
  sl_mem_get(&ms);
  sl_comm_stats sh, rp;
  sl_fsdp_comm_stats(t->f, &sh, &rp);
  sl_epar_add_stats(&t->par.ep, &sh);
  double tps = (double)t->data.G * (double)t->cfg.seq_len / dt;
  double mfu = flops_tok * tps / (t->report.peak_flops * t->wsize);
  uint64_t bytes = 0;
  for (int kk = 0; kk < SL_COLL_NKINDS; kk++) /* sent bytes: recv is the inbound figure */
    if (kk != SL_COLL_RECV) bytes += sh.bytes[kk] + rp.bytes[kk];
  uint64_t wait = sl_fsdp_wait_ns(t->f), dbytes = bytes - t->report.prev_bytes, dwait = wait - t->report.prev_wait;
  t->report.prev_bytes = bytes;
  t->report.prev_wait = wait;
  char jl[32], jr[32], jg[32]; /* non-finite values are written as null */
  fprintf(t->report.metrics,
          "{\"step\": %lld, \"loss\": %s, \"lr\": %s, \"grad_norm\": %s, \"tokens_per_s\": %.2f, "
          "\"mfu\": %.6f, \"peak_bytes\": %lld, \"step_time_s\": %.6f, \"comm_wait_s\": %.6f, "
          "\"comm_bytes\": %llu, \"skipped_steps\": %lld, \"loss_tokens\": %lld, \"arena_peak\": {",
          (long long)(s + 1), sl_guard_json(jl, o->loss), sl_guard_json(jr, o->lr), sl_guard_json(jg, o->grad_norm),
          tps, mfu, (long long)ms.total_peak, dt, dwait * 1e-9, (unsigned long long)dbytes, (long long)t->guard.total,
          (long long)o->tokens);
  for (int a = 0; a < SL_ARENA_COUNT; a++)
    fprintf(t->report.metrics, "%s\"%s\": %lld", a ? ", " : "", sl_arena_name(a), (long long)ms.peak[a]);
  fprintf(t->report.metrics, "}");
  if (t->cfg.tp > 1) { /* bytes this rank sent on the TP axis during the step, per kind */
    sl_comm_stats ts;
    sl_tpar_stats(&t->par.tp, &ts);
    fprintf(t->report.metrics, ", \"tp_bytes\": {");
    for (int kk = 0; kk < 3; kk++) {
      sl_coll_kind c = TP_KINDS[kk];
      fprintf(t->report.metrics, "%s\"%s\": %llu", kk ? ", " : "", sl_coll_name(c),
              (unsigned long long)(ts.bytes[c] - t->report.prev_tp[c]));
      t->report.prev_tp[c] = ts.bytes[c];
    }
    fprintf(t->report.metrics, "}");
  }
  if (stages) sl_trainer_pp_write(t, t->report.metrics, stages);
  free(stages);
  if (o->moe_n) { /* tokens per expert, a row per layer (their max / mean is the load imbalance) */
    int64_t E = t->m->cfg.moe_experts;
    fprintf(t->report.metrics, ", \"moe_load\": [");
    for (int64_t i = 0; i < o->moe_n; i++)
      fprintf(t->report.metrics, "%s%lld%s",
              i % E ? ", "
              : i   ? "], ["
                    : "[",
              (long long)o->moe_load[i], i == o->moe_n - 1 ? "]" : "");
    fprintf(t->report.metrics, "], \"moe_max_over_mean\": %.4f", moe_imbalance(o->moe_load, o->moe_n, E));
  }
  moe_metrics(t, o, t->report.metrics);
  if (t->cfg.ep > 1) { /* this rank's wall time inside the all-to-all calls (issue + wait) during the step */
    fprintf(t->report.metrics, ", \"alltoall_s\": %.6f", (double)(sh.alltoall_ns - t->report.prev_a2a) * 1e-9);
    t->report.prev_a2a = sh.alltoall_ns;
  }
  sl_dev_stats d, *p = &t->report.prev_dev; /* the backend's host-side costs since the last line */
  t->ops->dev_stats(t->k, &d);
  fprintf(t->report.metrics,
          ", \"dev\": {\"allocs\": %lld, \"frees\": %lld, \"syncs\": %lld, \"downloads\": %lld, \"uploads\": %lld}",
          (long long)(d.allocs - p->allocs), (long long)(d.frees - p->frees), (long long)(d.syncs - p->syncs),
          (long long)(d.downloads - p->downloads), (long long)(d.uploads - p->uploads));
  *p = d;
  if (o->ev.samples)
    fprintf(t->report.metrics, ", \"eval_loss\": %s, \"eval_ppl\": %s", sl_guard_json(jl, o->ev.loss),
            sl_guard_json(jr, o->ev.ppl));
  fprintf(t->report.metrics, ", \"elapsed_s\": %.3f, \"eta_s\": %.3f, \"tokens_per_s_avg\": %.2f, \"mfu_avg\": %.6f}\n",
          t->report.elapsed_s, t->report.eta_s, t->report.tps_avg, t->report.mfu_avg);
  tb_step(t, s, o, tps, mfu, dt, &ms);
  return sl_metrics_flush(t->report.metrics, t->report.metrics_path);
}
