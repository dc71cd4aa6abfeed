/* formats/lmask.h — the loss-mask file PREFIX.lmask beside a Megatron dataset
 * (docs/formats.md): 8 bytes "SLLMASK1", uint64 LE N (the dataset's token
 * count), then N bytes in {0, 1}, one per token in .bin order; 1 = the
 * prediction of that token (as a target) counts in the loss. A missing file
 * means every token counts. The reader validates the whole file on open.
 */
#ifndef SL_LMASK_H
#define SL_LMASK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_LMASK_MAGIC "SLLMASK1"
#define SL_LMASK_HDR 16

typedef struct sl_lmask sl_lmask;

/* Opens PREFIX.lmask when it exists (*out = NULL when it does not): checks
 * the magic, that N equals ntokens, the file size and that every byte is 0
 * or 1. Errors (SL_EINPUT) name the file. */
int sl_lmask_open(const char *prefix, int64_t ntokens, sl_lmask **out);
void sl_lmask_close(sl_lmask *m);
/* Byte of token pos (0 <= pos < N). */
int sl_lmask_get(const sl_lmask *m, int64_t pos);
/* Number of 1 bytes (tokens that count). */
int64_t sl_lmask_count(const sl_lmask *m);

#ifdef __cplusplus
}
#endif
#endif /* SL_LMASK_H */
