/* formats/tbevents.h — TensorBoard scalar event files, written without a
 * protobuf library: TFRecord framing (uint64 length, masked CRC32C of the
 * length, the data, masked CRC32C of the data) around Event protobufs
 * (tensorboard/compat/proto/event.proto, summary.proto). One file
 * DIR/events.out.tfevents.<unix time>.<hostname> per writer; its first event
 * is file_version "brain.Event:2", then one event per step holding the
 * step's scalars (Summary.Value tag + simple_value).
 *
 * A failed write (a full disk) is not fatal: the writer warns once and writes
 * nothing more; training goes on (the metrics JSONL is the record of a run). */
#ifndef SL_TBEVENTS_H
#define SL_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_tb sl_tb;

/* Creates a new events file in dir (never overwrites one: a name taken gets
 * a suffix .1, .2, ...). resume_step > 0: a SessionLog START event at that
 * step follows the file_version event, so TensorBoard drops the earlier
 * files' events from that step on (those of the steps the checkpoint did not
 * keep). On failure: a warning, *out = NULL, and SL_OK all the same (the run
 * goes on without the file). */
int sl_tb_open(const char *dir, int64_t resume_step, sl_tb **out);
/* One step's event: begin, any number of scalars, end (writes and flushes).
 * Calls on NULL or on a writer that failed do nothing. */
void sl_tb_begin(sl_tb *tb, int64_t step);
void sl_tb_scalar(sl_tb *tb, const char *tag, double value);
void sl_tb_end(sl_tb *tb);
/* The file's path ("" when NULL). */
const char *sl_tb_path(const sl_tb *tb);
void sl_tb_close(sl_tb **tb);

/* CRC32C (Castagnoli) of n bytes, and TFRecord's masked form of it. */
uint32_t sl_crc32c(const void *data, size_t n);
uint32_t sl_crc32c_masked(const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* SL_TBEVENTS_H */
