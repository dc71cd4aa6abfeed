/* tools/plot.h — renders a metrics JSONL file (one object per line with
 * "step", "loss", "tokens_per_s") as a self-contained SVG: loss vs step on
 * top, tokens/s vs step below. No external dependencies.
 */
#ifndef SL_PLOT_H
#define SL_PLOT_H

#ifdef __cplusplus
extern "C" {
#endif

/* Lines that are not JSON objects with numeric step, loss and tokens_per_s
 * are skipped; a missing file or one without any usable line is SL_EINPUT.
 * The SVG is written to a temporary name and renamed over svg_path. */
int sl_plot_metrics(const char *jsonl_path, const char *svg_path);

#ifdef __cplusplus
}
#endif
#endif /* SL_PLOT_H */
