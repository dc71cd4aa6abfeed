/* offload/nvme_adam.c — the streamed AdamW step over an optimizer state that
 * lives in an NVMe store, with three tile buffers in host memory.
 *
 * Layout of the store: tile t covers elements [t*T, min((t+1)*T, n)) with
 * T = tile_elems; it sits at byte offset t*S, S = sl_offload_tile_bytes(T),
 * as three sections of P = roundup(T*4, 4096) bytes: [master | m | v].
 *
 * Schedule (buffer of tile i = bufs[i % 3]):
 *   read(0)
 *   for i in 0..ntiles-1:
 *     if i+1 < ntiles: wait write(i-2) [it used bufs[(i+1)%3]]; read(i+1)
 *     wait read(i); AdamW on tile i (range by range); write(i)
 *   wait everything
 * so while AdamW runs on tile i, tile i+1 is being read and tile i-1
 * written; host memory for the state is exactly the three buffers.
 */
#include "offload/offload.h"

#include <string.h>

#include "base/base.h"
#include "offload/offload_internal.h"

int64_t sl_offload_tile_bytes(int64_t tile_elems) {
  return 3 * sl_offload_round4k(tile_elems * (int64_t)sizeof(float));
}

int sl_offload_adam_nvme_step(sl_nvme *store, int64_t n, int64_t tile_elems, void *const bufs[3], const float *grads,
                              const sl_adam_range *ranges, int nranges, const sl_adam_hyper *h, float *params_out,
                              uint16_t *params_bf16_out) {
  if (!store || !bufs || !bufs[0] || !bufs[1] || !bufs[2] || !h || (n > 0 && !grads))
    return sl_fail(SL_EINPUT, "nvme adam step: NULL store, buffer, grads or hyper-parameters");
  if (tile_elems <= 0 || n < 0)
    return sl_fail(SL_EINPUT, "nvme adam step: n=%lld tile_elems=%lld; expected n >= 0, tile > 0", (long long)n,
                   (long long)tile_elems);
  if (h->step < 1) return sl_fail(SL_EINPUT, "nvme adam step: step %lld; expected >= 1", (long long)h->step);
  int rc = sl_adam_ranges_check(ranges, nranges, n);
  if (rc) return rc;
  const int64_t S = sl_offload_tile_bytes(tile_elems);
  const int64_t P = S / 3;
  const int64_t ntiles = (n + tile_elems - 1) / tile_elems;
  if (ntiles * S > sl_nvme_bytes(store))
    return sl_fail(SL_EINPUT,
                   "nvme adam step: store %s holds %lld bytes; %lld tiles of %lld "
                   "bytes need %lld",
                   sl_nvme_path(store), (long long)sl_nvme_bytes(store), (long long)ntiles, (long long)S,
                   (long long)(ntiles * S));
  for (int b = 0; b < 3; b++)
    if ((uintptr_t)bufs[b] % 4096) return sl_fail(SL_EINPUT, "nvme adam step: tile buffer %d is not 4096-aligned", b);
  if (ntiles == 0) return SL_OK;

  uint64_t rd[3] = {0, 0, 0}, wr[3] = {0, 0, 0}; /* tickets per buffer */
  rc = sl_nvme_read_async(store, 0, bufs[0], S, &rd[0]);
  for (int64_t i = 0; i < ntiles && rc == SL_OK; i++) {
    int cur = (int)(i % 3);
    if (i + 1 < ntiles) {
      int nxt = (int)((i + 1) % 3);
      if (wr[nxt]) { /* tile i-2 still being written from that buffer */
        rc = sl_nvme_wait(store, wr[nxt]);
        wr[nxt] = 0;
        if (rc) break;
      }
      rc = sl_nvme_read_async(store, (i + 1) * S, bufs[nxt], S, &rd[nxt]);
      if (rc) break;
    }
    rc = sl_nvme_wait(store, rd[cur]);
    rd[cur] = 0;
    if (rc) break;
    int64_t base = i * tile_elems;
    int64_t cnt = n - base < tile_elems ? n - base : tile_elems;
    char *b = (char *)bufs[cur];
    sl_offload_adam_segment((float *)b, (float *)(b + P), (float *)(b + 2 * P), grads + base, base, cnt, ranges,
                            nranges, h, params_out ? params_out + base : NULL,
                            params_bf16_out ? params_bf16_out + base : NULL);
    rc = sl_nvme_write_async(store, i * S, b, S, &wr[cur]);
  }
  /* drain whatever is still in flight (also on error: buffers must go idle) */
  for (int b = 0; b < 3; b++) {
    if (rd[b]) {
      int e = sl_nvme_wait(store, rd[b]);
      if (e && rc == SL_OK) rc = e;
    }
    if (wr[b]) {
      int e = sl_nvme_wait(store, wr[b]);
      if (e && rc == SL_OK) rc = e;
    }
  }
  if (rc) return sl_fail_ctx(rc, "nvme adam step (n=%lld, tile=%lld)", (long long)n, (long long)tile_elems);
  return SL_OK;
}
