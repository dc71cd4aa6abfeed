/* formats/safetensors.h — the safetensors format: a validating reader (one
 * file, or a Hugging Face model directory with an optional sharded index),
 * fp32 conversion on read (F32/F16/BF16), and a streaming, atomic writer
 * (single file or transformers-style shards + model.safetensors.index.json).
 * Layout and rules: docs/formats.md. Every error is SL_EINPUT (bad file) or
 * SL_EIO/SL_ENOMEM, with a message naming the file and the tensor at fault.
 */
#ifndef SL_SAFETENSORS_H
#define SL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_ST_MAX_DIMS 8

/* Every dtype the safetensors spec names. Only F32, F16 and BF16 can be
 * loaded (converted to fp32); the others are accepted in a file's header
 * (so such a file still validates) but refused by name when read. */
typedef enum {
  SL_ST_F32 = 0,
  SL_ST_F16,
  SL_ST_BF16,
  SL_ST_F64,
  SL_ST_I64,
  SL_ST_U64,
  SL_ST_I32,
  SL_ST_U32,
  SL_ST_I16,
  SL_ST_U16,
  SL_ST_I8,
  SL_ST_U8,
  SL_ST_BOOL,
  SL_ST_F8_E4M3,
  SL_ST_F8_E5M2,
  SL_ST_F8_E8M0,
  SL_ST_C64,
  SL_ST_F6_E2M3,
  SL_ST_F6_E3M2,
  SL_ST_F4,
  SL_ST_DTYPE_COUNT
} sl_st_dtype;

const char *sl_st_dtype_name(sl_st_dtype d); /* "F32", ... */

/* One tensor of a parsed file. Pointers stay valid until the file/set closes. */
typedef struct {
  const char *name;
  sl_st_dtype dtype;
  int ndim;                      /* 0..SL_ST_MAX_DIMS (0 = scalar) */
  int64_t shape[SL_ST_MAX_DIMS]; /* (ndim) */
  int64_t numel;                 /* product of shape */
  uint64_t begin, end;           /* byte offsets in the data section */
  const uint8_t *data;           /* (end - begin) bytes; unaligned */
  const char *file;              /* path of the file holding it */
} sl_st_tensor;

/* ---- one file ------------------------------------------------------------ */
typedef struct sl_st_file sl_st_file;

/* Parses and validates a whole safetensors image held in memory (buf, len =
 * the file's bytes). buf is not copied and must outlive *out. path_for_msgs
 * is only used in messages. This is the fuzzing entry point. */
int sl_st_parse(const char *path_for_msgs, const uint8_t *buf, size_t len, sl_st_file **out);
/* mmaps and parses path. */
int sl_st_open_file(const char *path, sl_st_file **out);
void sl_st_close_file(sl_st_file *f);
int64_t sl_st_file_count(const sl_st_file *f);
/* Tensors in header order (i in [0, count)). */
const sl_st_tensor *sl_st_file_tensor(const sl_st_file *f, int64_t i);
/* NULL when absent (no message set). */
const sl_st_tensor *sl_st_file_find(const sl_st_file *f, const char *name);

/* Converts a tensor's elements [elem_off, elem_off + n) to fp32. Refuses
 * dtypes other than F32/F16/BF16 by name. */
int sl_st_tensor_to_f32(const sl_st_tensor *t, int64_t elem_off, int64_t n, float *dst);

/* ---- a model directory --------------------------------------------------- */
typedef struct sl_st_set sl_st_set;

/* Opens DIR/model.safetensors, or else DIR/model.safetensors.index.json and
 * every shard its weight_map names (each must exist, parse, and contain the
 * tensors mapped to it). When DIR holds neither file this returns SL_OK with
 * *out = NULL: "no weight files", the caller initialises from a seed. */
int sl_st_open_dir(const char *dir, sl_st_set **out);
/* 1 when DIR holds the weight files sl_st_open_dir reads (model.safetensors
 * or model.safetensors.index.json), without opening them; 0 otherwise, with
 * other (cap bytes; may be NULL) set to the name of a weight-looking file it
 * does not read (another *.safetensors, pytorch_model*.bin, *.pt, *.pth, *.gguf), or "". */
int sl_st_dir_has_weights(const char *dir, char *other, size_t cap);
void sl_st_close_set(sl_st_set *s);
int64_t sl_st_set_count(const sl_st_set *s);
/* Tensors sorted by name (i in [0, count)). */
const sl_st_tensor *sl_st_set_tensor(const sl_st_set *s, int64_t i);
/* NULL when absent (no message set). */
const sl_st_tensor *sl_st_find(const sl_st_set *s, const char *name);
const char *sl_st_set_dir(const sl_st_set *s);

/* Finds `name`, checks its shape equals shape[0..ndim) (message names file,
 * tensor, expected and found shapes), converts to fp32 into dst (numel). */
int sl_st_read_f32(const sl_st_set *s, const char *name, int ndim, const int64_t *shape, float *dst);
/* Same checks, but reads only elements [elem_off, elem_off + n) of the
 * row-major tensor (for loading one rank's shard). */
int sl_st_read_f32_slice(const sl_st_set *s, const char *name, int ndim, const int64_t *shape, int64_t elem_off,
                         int64_t n, float *dst);
/* Same checks, but reads the slice [off, off + len) along dimension dim of
 * the row-major tensor, one contiguous run per index of the dims before it
 * (a tensor-parallel rank's slice; dst holds the slice row-major). */
int sl_st_read_f32_box(const sl_st_set *s, const char *name, int ndim, const int64_t *shape, int dim, int64_t off,
                       int64_t len, float *dst);
/* The same reads on slab `slab` of a fused tensor whose shape is (slabs, shape[0..ndim)) (Granite 4.0-H's
 * experts: (E, rows, cols)): the slab is the tensor read, whole when dim < 0, else its box [off, off + len)
 * along dim (the shape message names the fused shape). */
int sl_st_read_f32_slab(const sl_st_set *s, const char *name, int64_t slabs, int64_t slab, int ndim,
                        const int64_t *shape, int dim, int64_t off, int64_t len, float *dst);

/* ---- writer ---------------------------------------------------------------- */
typedef struct {
  const char *name;
  int ndim;                      /* 0..SL_ST_MAX_DIMS */
  int64_t shape[SL_ST_MAX_DIMS]; /* (ndim) */
  sl_st_dtype dtype;             /* SL_ST_F32, SL_ST_BF16 or SL_ST_F16 */
} sl_st_wtensor;

/* Fills the fp32 values of tensor `index` (numel floats, row-major) into dst.
 * Returns SL_OK or a status (with message) that aborts the write. */
typedef int (*sl_st_fill_fn)(void *ctx, int64_t index, const sl_st_wtensor *t, float *dst);

/* Writes one safetensors file with tensors ts[0..n) in that order; data is
 * requested one tensor at a time. Written to a temporary name, fsynced, then
 * renamed over path. */
int sl_st_write_file(const char *path, const sl_st_wtensor *ts, int64_t n, sl_st_fill_fn fill, void *ctx);
/* Writes DIR/model.safetensors, or when the total data exceeds
 * max_shard_bytes (<= 0: never shard), DIR/model-0000i-of-0000N.safetensors
 * plus DIR/model.safetensors.index.json. Removes weight files of the other
 * layout left in DIR by an earlier write, after the new ones are in place. */
int sl_st_write_dir(const char *dir, const sl_st_wtensor *ts, int64_t n, sl_st_fill_fn fill, void *ctx,
                    int64_t max_shard_bytes);

/* fp16 / bf16 <-> fp32 (fp32 -> bf16 / fp16 round to nearest even; NaN
 * stays NaN; fp16: past 65504 is inf, below 2^-14 subnormal). */
float sl_f16_to_f32(uint16_t h);
float sl_bf16_to_f32(uint16_t b);
uint16_t sl_f32_to_bf16(float f);
uint16_t sl_f32_to_f16(float f);

#ifdef __cplusplus
}
#endif
#endif /* SL_SAFETENSORS_H */
