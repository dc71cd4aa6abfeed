/* engine/hosts.c — the ranks on their hosts (see hosts.h): one all-gather of hostnames
 * gives every rank its local rank (launcher-independent: mpirun, srun or
 * anything else), the threads are bound, and one all-gather of the bindings
 * lets rank 0 print which ranks share a node and a NUMA node. A tensor-
 * parallel group (--tp: T consecutive ranks) and a --shard-group (S
 * consecutive data-parallel ranks, T apart) should not cross nodes: their
 * collectives are the latency-bound ones; rank 0 warns when they do. */
#define _GNU_SOURCE
#include "engine/hosts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"
#include "kernels/registry.h"

enum { HOST = 64 };
typedef struct {
  char host[HOST];
  int32_t numa, ncpus, bound, pad;
  char cpus[48];
} rank_info;

/* "0-3,5" for the ranks r (of n) with pick[r] set, into buf. */
static void rank_list(const char *pick, int n, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int r = 0; r < n && len + 24 < cap; r++) {
    if (!pick[r]) continue;
    int e = r;
    while (e + 1 < n && pick[e + 1]) e++;
    len += (size_t)snprintf(buf + len, cap - len, "%s%d", len ? "," : "", r);
    if (e > r) len += (size_t)snprintf(buf + len, cap - len, "-%d", e);
    r = e;
  }
}

/* 1 when the ranks first, first + stride, ... (count of them) are not all on one host. */
static int spans(const rank_info *all, int first, int stride, int count) {
  int cross = 0;
  for (int q = 1; q < count; q++) cross |= strcmp(all[first + q * stride].host, all[first].host) != 0;
  return cross;
}

static void report(const rank_info *all, int n, const sl_hosts *m, int64_t S, int T) {
  if (n == 1) {
    sl_log0(SL_LOG_INFO, "mesh: 1 rank on %s: cpus %s (%d), NUMA %d (%s)", all[0].host, all[0].cpus, all[0].ncpus,
            all[0].numa, m->bind.why);
    return;
  }
  char *pick = calloc((size_t)n, 1), list[256];
  if (!pick) return;
  if (T > 1)
    sl_log0(SL_LOG_INFO, "mesh: %d ranks on %d node%s; tensor parallel %d x data parallel %d", n, m->nnodes,
            m->nnodes == 1 ? "" : "s", T, n / T);
  else
    sl_log0(SL_LOG_INFO, "mesh: %d rank%s on %d node%s; data parallel only (no tensor-parallel axis)", n,
            n == 1 ? "" : "s", m->nnodes, m->nnodes == 1 ? "" : "s");
  for (int r = 0; r < n; r++) {
    int first = 1;
    for (int q = 0; q < r; q++) first &= strcmp(all[q].host, all[r].host) != 0;
    if (!first) continue;
    char line[1024];
    size_t len = 0;
    for (int q = 0; q < n; q++) pick[q] = !strcmp(all[q].host, all[r].host);
    rank_list(pick, n, list, sizeof list);
    len += (size_t)snprintf(line + len, sizeof line - len, "node %s: ranks %s", all[r].host, list);
    for (int q = 0; q < n; q++) { /* each NUMA node of this host, once */
      if (strcmp(all[q].host, all[r].host)) continue;
      int seen = 0;
      for (int p = 0; p < q; p++) seen |= !strcmp(all[p].host, all[q].host) && all[p].numa == all[q].numa;
      if (seen || len + 64 > sizeof line) continue;
      for (int p = 0; p < n; p++) pick[p] = !strcmp(all[p].host, all[q].host) && all[p].numa == all[q].numa;
      rank_list(pick, n, list, sizeof list);
      if (all[q].numa >= 0)
        len += (size_t)snprintf(line + len, sizeof line - len, " | NUMA %d: ranks %s", all[q].numa, list);
      else len += (size_t)snprintf(line + len, sizeof line - len, " | NUMA ?: ranks %s", list);
    }
    sl_log0(SL_LOG_INFO, "mesh: %s", line);
  }
  for (int r = 0; r < n; r++) /* one line per rank up to 16 ranks; SL_LOG=debug for all */
    sl_log0(n <= 16 ? SL_LOG_INFO : SL_LOG_DEBUG, "mesh: rank %d on %s: cpus %s (%d), NUMA %d%s", r, all[r].host,
            all[r].cpus, all[r].ncpus, all[r].numa, all[r].bound ? ", bound" : "");
  sl_log0(SL_LOG_INFO, "mesh: threads of rank 0: %s", m->bind.why);
  for (int g = 0; T > 1 && g * T < n; g++) /* a TP group: 4 blocking all-reduces per layer */
    if (spans(all, g * T, 1, T))
      sl_log0(SL_LOG_WARN,
              "mesh: tensor-parallel group %d (ranks %d-%d) spans nodes: its all-reduces cross the "
              "network (use --tp of at most the %d ranks per node)",
              g, g * T, g * T + T - 1, m->local_size);
  int D = n / T; /* hybrid sharding: a shard group (of the DP ranks at TP index 0) should sit inside one node */
  if (S > 0 && S < D)
    for (int g = 0; g * S < D; g++)
      if (spans(all, (int)(g * S) * T, T, (int)S))
        sl_log0(SL_LOG_WARN,
                "mesh: shard group %d (ranks %d-%d) spans nodes: its all-gathers cross the network "
                "(use --shard-group %d, the ranks per node)",
                g, (int)(g * S) * T, (int)((g + 1) * S - 1) * T + T - 1, m->local_size / T);
  free(pick);
}

int sl_hosts_setup(sl_comm *world, const sl_ops *ops, int64_t shard_group, int tp, sl_hosts *m) {
  int n = sl_comm_size(world), me = sl_comm_rank(world), rc = SL_OK;
  memset(m, 0, sizeof *m);
  rank_info mine, *all = calloc((size_t)n, sizeof *all);
  if (!all) return sl_fail(SL_ENOMEM, "mesh: out of memory");
  memset(&mine, 0, sizeof mine);
  if (gethostname(mine.host, HOST - 1) != 0) snprintf(mine.host, HOST, "unknown");
  const char *fake = sl_env_str("SL_MESH_HOSTS"); /* tests: "a,a,b,b" pretends rank r runs on host r of the list */
  for (int r = 0; fake && r < me && (fake = strchr(fake, ',')); r++) fake++;
  if (fake && *fake) snprintf(mine.host, HOST, "%.*s", (int)strcspn(fake, ","), fake);
  if (sl_comm_allgather_sync(world, &mine, all, (int64_t)sizeof mine, SL_U8) != SL_COMM_OK) {
    rc = sl_fail(SL_ECOMM, "mesh: gathering hostnames: %s", sl_comm_last_error());
    goto done;
  }
  for (int r = 0; r < n; r++) {
    int first = 1;
    for (int q = 0; q < r; q++) first &= strcmp(all[q].host, all[r].host) != 0;
    m->nnodes += first;
    if (!strcmp(all[r].host, mine.host)) {
      if (r < me) m->local_rank++;
      m->local_size++;
    }
  }
  for (int r = 0, mine_first = -1; r < me; r++) { /* hosts are numbered in the order of their first rank */
    if (mine_first < 0 && !strcmp(all[r].host, mine.host)) mine_first = r;
    int first = 1;
    for (int q = 0; q < r; q++) first &= strcmp(all[q].host, all[r].host) != 0;
    if (first && mine_first < 0) m->node++;
  }
  /* the backend's device of this local rank (CUDA: SL_CUDA_DEVICE, else the local rank); -1 on the CPU */
  int gpu = ops->is_device() ? sl_backend_local_device(ops, m->local_rank) : -1;
  sl_bind_local(m->local_rank, m->local_size, gpu, &m->bind);
  mine.numa = m->bind.numa;
  mine.ncpus = m->bind.ncpus;
  mine.bound = m->bind.bound;
  memcpy(mine.cpus, m->bind.cpus, sizeof mine.cpus);
  if (sl_comm_allgather_sync(world, &mine, all, (int64_t)sizeof mine, SL_U8) != SL_COMM_OK) {
    rc = sl_fail(SL_ECOMM, "mesh: gathering the placement: %s", sl_comm_last_error());
    goto done;
  }
  if (me == 0) report(all, n, m, shard_group, tp >= 1 && n % tp == 0 ? tp : 1); /* a bad --tp is refused later */
done:
  free(all);
  return rc;
}
