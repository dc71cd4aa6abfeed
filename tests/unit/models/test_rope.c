/* tests/unit/models/test_rope.c — the RoPE frequency rules of models/rope.c:
 * which pairs each scaled rule leaves alone and which it divides by the
 * factor (bit for bit against the default table), and the blended pairs
 * against the formulas of transformers' modeling_rope_utils.py evaluated in
 * double (1e-6 relative: a few float roundings). The PyTorch comparison of
 * whole models is tests/ref/rope_checks.py. */
#include <math.h>
#include <string.h>

#include "../../lib/check.h"
#include "models/rope.h"

#define PI 3.14159265358979323846

static double rel(double a, double b) { return fabs(a - b) / fabs(b); }

/* llama3: the wavelength bands of 2 pi / inv against old/high .. old/low */
static void llama3(int64_t hd, double theta, double f, double lo, double hi, int64_t old, int want_hi, int want_mid,
                   int want_lo) {
  float d[512], t[512];
  sl_rope_inv_freq(d, hd, (float)theta);
  sl_rope_inv_freq_llama3(t, hd, (float)theta, f, lo, hi, old);
  int nh = 0, nm = 0, nl = 0, bad = 0;
  for (int64_t i = 0; i < hd / 2; i++) {
    double wl = 2 * PI / d[i];
    if (wl < (double)old / hi) {
      nh++;
      bad += t[i] != d[i];
    } else if (wl > (double)old / lo) {
      nl++;
      bad += t[i] != d[i] / (float)f;
    } else {
      nm++;
      double s = ((double)old / wl - lo) / (hi - lo);
      double want = (1 - s) * d[i] / f + s * d[i];
      bad += rel(t[i], want) > 1e-6;
    }
  }
  CHECK(nh == want_hi && nm == want_mid && nl == want_lo && !bad,
        "llama3 hd %lld theta %g old %lld: bands %d/%d/%d (want %d/%d/%d), %d pairs off", (long long)hd, theta,
        (long long)old, nh, nm, nl, want_hi, want_mid, want_lo, bad);
}

static void yarn(int64_t hd, double theta, double f, double bf, double bs, int64_t orig) {
  float t[512];
  sl_rope_inv_freq_yarn(t, hd, theta, f, bf, bs, orig, 1);
  double low = floor((hd * log(orig / (bf * 2 * PI))) / (2 * log(theta)));
  double high = ceil((hd * log(orig / (bs * 2 * PI))) / (2 * log(theta)));
  low = low < 0 ? 0 : low;
  high = high > hd - 1 ? hd - 1 : high;
  if (low == high) high += 0.001;
  int bad = 0, nex = 0, nin = 0;
  for (int64_t i = 0; i < hd / 2; i++) {
    double pf = pow(theta, (double)(2 * i) / (double)hd);
    double ramp = (i - low) / (high - low);
    ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
    double want = (1 / (f * pf)) * ramp + (1 / pf) * (1 - ramp);
    nex += ramp == 0;
    nin += ramp == 1;
    bad += rel(t[i], want) > 1e-6;
  }
  CHECK(!bad && nex > 0 && nin > 0, "yarn hd %lld theta %g factor %g orig %lld: %d pairs off (%d kept, %d scaled)",
        (long long)hd, theta, f, (long long)orig, bad, nex, nin);
}

int main(void) {
  float d[64], t[64];
  sl_rope_inv_freq(d, 16, 10000.0f);
  sl_rope_inv_freq_linear(t, 16, 10000.0f, 4.0);
  int same = 1;
  for (int i = 0; i < 8; i++) same &= t[i] == d[i] / 4.0f;
  CHECK(same, "linear: every pair is the default's divided by the factor, bit for bit");

  /* the tiny oracle model: wavelengths 6.3 (kept), 19.9 and 62.8 (blended), 199.. (divided) */
  llama3(16, 10000.0, 8.0, 1.0, 4.0, 64, 1, 2, 5);
  /* Llama 3.1 8B / 3.3 70B / 3.2 3B (hd 128) and 3.2 1B (hd 64): theta 500000, old 8192;
   * band counts by hand: 500000^(2i/hd) against 2048 / (2 pi) and 8192 / (2 pi) */
  llama3(128, 500000.0, 8.0, 1.0, 4.0, 8192, 29, 6, 29);
  llama3(64, 500000.0, 32.0, 1.0, 4.0, 8192, 15, 3, 14);

  yarn(16, 10000.0, 4.0, 32, 1, 64);
  yarn(128, 10000.0, 4.0, 32, 1, 32768);
  yarn(64, 1000000.0, 8.0, 32, 1, 4096);

  sl_model_config c;
  memset(&c, 0, sizeof c);
  c.head_dim = 16;
  c.rope_theta = 10000.0;
  sl_rope_inv_freq_cfg(t, &c);
  CHECK(!memcmp(t, d, 8 * sizeof(float)), "cfg: no rope_scaling is the default table");
  c.rope_scaling.type = SL_ROPE_LINEAR;
  c.rope_scaling.factor = 4.0;
  sl_rope_inv_freq_cfg(d, &c);
  sl_rope_inv_freq_linear(t, 16, 10000.0f, 4.0);
  CHECK(!memcmp(t, d, 8 * sizeof(float)), "cfg: linear dispatches to the linear rule");
  return CHECK_SUMMARY();
}
