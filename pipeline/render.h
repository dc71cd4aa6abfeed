/* pipeline/render.h — the static pipeline schedule drawn for people: the
 * per-rank text timeline and the SVG timeline (pipeline/render.c). */
#ifndef SL_PIPELINE_RENDER_H
#define SL_PIPELINE_RENDER_H

#include <stdio.h>

#include "pipeline/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row per rank, one column per time unit (compact: one glyph each; F,
 * B, W, '.' idle; odd chunks lower case), to f. */
void sl_pp_timeline_print(FILE *f, const sl_pp_sched *s, int compact);

/* The timeline as a self-contained SVG (title with the schedule, P, m, V
 * and rank 0's bubble; per rank its ops, idle units and in-flight peak),
 * written atomically (temp name, fsync, rename): SL_EINPUT naming path when
 * it cannot be created there, SL_EIO on a failed write. */
int sl_pp_svg_write(const sl_pp_sched *s, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* SL_PIPELINE_RENDER_H */
