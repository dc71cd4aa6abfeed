/* offload/cpu_adam.c — the CPU AdamW entry points of the offload tiers:
 * AdamW with a bf16 copy of the updated parameters in the same pass, the
 * weight-decay range checks, and the per-segment driver that applies AdamW
 * range by range (shared by the cpu and nvme tiers). The arithmetic itself
 * is the one kernel of kernels/cpu/adamw.c.
 */
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "offload/offload_internal.h"

void sl_adamw_bf16copy(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1, float b2, float eps,
                       float wd, int64_t step, float grad_scale, uint16_t *p_bf16) {
  sl_cpu_adamw_bf16(NULL, p, m, v, g, n, lr, b1, b2, eps, wd, step, grad_scale, p_bf16);
}

int sl_adam_ranges_check(const sl_adam_range *ranges, int nranges, int64_t n) {
  if (!ranges) return SL_OK;
  if (nranges <= 0)
    return sl_fail(SL_EINPUT, "adam ranges: %d ranges given for %lld elements; expected >= 1", nranges, (long long)n);
  int64_t at = 0;
  for (int i = 0; i < nranges; i++) {
    if (ranges[i].offset != at || ranges[i].count < 0)
      return sl_fail(SL_EINPUT,
                     "adam ranges: range %d is [%lld, +%lld); expected it to start at %lld "
                     "(ranges must be ascending, contiguous and cover [0, %lld))",
                     i, (long long)ranges[i].offset, (long long)ranges[i].count, (long long)at, (long long)n);
    at += ranges[i].count;
  }
  if (at != n)
    return sl_fail(SL_EINPUT, "adam ranges: cover [0, %lld); expected [0, %lld)", (long long)at, (long long)n);
  return SL_OK;
}

void sl_offload_adam_segment(float *p, float *m, float *v, const float *g, int64_t base, int64_t count,
                             const sl_adam_range *ranges, int nranges, const sl_adam_hyper *h, float *params_out,
                             uint16_t *bf16_out) {
  const sl_ops *ops = sl_ops_cpu();
  int64_t done = 0;
  int r = 0;
  if (ranges) { /* first range holding element `base` (binary search) */
    int lo = 0, hi = nranges - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (ranges[mid].offset <= base) lo = mid;
      else hi = mid - 1;
    }
    r = lo;
  }
  while (done < count) {
    int64_t len = count - done;
    float wd = h->weight_decay;
    if (ranges) {
      while (r < nranges && ranges[r].offset + ranges[r].count <= base + done) r++; /* skips empty ranges too */
      int64_t end = ranges[r].offset + ranges[r].count;
      if (end - (base + done) < len) len = end - (base + done);
      wd = ranges[r].wd;
    }
    if (bf16_out)
      sl_cpu_adamw_bf16(NULL, p + done, m + done, v + done, g + done, len, h->lr, h->beta1, h->beta2, h->eps, wd,
                        h->step, h->grad_scale, bf16_out + done);
    else
      ops->adamw(NULL, p + done, m + done, v + done, g + done, len, h->lr, h->beta1, h->beta2, h->eps, wd, h->step,
                 h->grad_scale);
    done += len;
  }
  if (params_out && params_out != p) memcpy(params_out, p, (size_t)count * sizeof(float));
}
