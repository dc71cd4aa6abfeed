/* data/lineread.h — a line reader over plain, gzip (.gz) and zstd (.zst)
 * files or a memory buffer, for `shardlm prepare`: bounded memory (one
 * buffer that grows only to the longest line), line numbers for messages.
 */
#ifndef SL_LINEREAD_H
#define SL_LINEREAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_lineread sl_lineread;

/* Opens path; the compression is chosen by its suffix (.gz, .zst, else
 * plain). SL_EINPUT naming the file when it cannot be opened or does not
 * start with the magic bytes of its suffix. A compressed stream that is
 * truncated, corrupt (deflate error, CRC / checksum mismatch) or followed by
 * other data fails a later sl_lineread_next with SL_EINPUT, "FILE: truncated
 * gzip stream at byte N" / "FILE: corrupt zstd stream at byte N: why". */
int sl_lineread_open(const char *path, sl_lineread **out);
/* Reads from text[0..len) (not copied; must outlive the reader). */
int sl_lineread_open_mem(const char *name, const char *text, size_t len, sl_lineread **out);
/* The next line without its '\n' (a '\r' before it is kept). *line points
 * into the reader's buffer until the next call; *eof = 1 when no line is
 * left. A last line without '\n' is returned as a line. */
int sl_lineread_next(sl_lineread *r, const char **line, size_t *len, int *eof);
int64_t sl_lineread_lineno(const sl_lineread *r);   /* 1-based number of the last line returned */
int64_t sl_lineread_bytes_in(const sl_lineread *r); /* compressed bytes consumed so far */
const char *sl_lineread_name(const sl_lineread *r);
void sl_lineread_close(sl_lineread *r);

#ifdef __cplusplus
}
#endif
#endif /* SL_LINEREAD_H */
