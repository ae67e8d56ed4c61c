// PR 5's AVX512 float tanh (Vectorized<float>::tanh in vec512_float.h), modelled lane by lane in
// scalar C: each vector operation is one IEEE operation per lane (vrangeps: the smaller
// magnitude, vpsrld, vpsubusw: a subtraction with a floor at 0, vpermt2ps: a table read at the
// index's low 5 bits, vsubps, vfmadd: fmaf, vblendmps: d in p0's place on interval 0), so a
// lane's result is the kernel's bit for bit. Over every non-negative float (the negative
// half through the same sign handling): the worst error in ULP against float64 tanh
// rounded to float (exact below 2^-12 and from 12 on, as stacktool/tanh_accuracy.py),
// the inputs not correctly rounded, NaN lost or sign broken, and inputs from the
// saturation on that do not give exactly 1. TABLE_H names the table, SATURATION and
// FIRST_INDEX are the kernel's constants (stacktool/tanh_model.py passes them).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include TABLE_H

static inline float as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t as_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static float tanh_abs(float abs_x) {
  const float a = (isnan(abs_x) || !(SATURATION < abs_x)) ? abs_x : SATURATION;  // vrangeps
  int32_t i = (int32_t)(as_bits(a) >> SHIFT) - FIRST_INDEX;
  i = i < 0 ? 0 : i;  // vpsubusw
  const int first = i == 0;  // vptestnmd
  i &= 31;
  const float d = a - kTanhIntervals[0][i];
  float q = kTanhIntervals[7][i];
  for (int r = 6; r >= 3; --r) q = fmaf(q, d, kTanhIntervals[r][i]);
  return fmaf(fmaf(q, d, kTanhIntervals[2][i]), d, first ? d : kTanhIntervals[1][i]);
}

static float tanh_float(float x) {
  return as_float(as_bits(tanh_abs(as_float(as_bits(x) & 0x7fffffffu))) | (as_bits(x) & 0x80000000u));
}

static float expected(float x) {
  if (as_bits(x) < 0x39800000u) return x;
  if (as_bits(x) >= 0x41400000u) return 1.0f;
  return (float)tanh((double)x);
}

int main(void) {
  long long not_rounded = 0, broken = 0, not_one = 0, worst = 0;
  const uint32_t saturation = as_bits(SATURATION);
#pragma omp parallel for reduction(+ : not_rounded, broken, not_one) reduction(max : worst) schedule(dynamic, 64)
  for (uint32_t high = 0; high < (1u << 15); ++high) {
    for (uint32_t low = 0; low < (1u << 16); ++low) {
      const uint32_t u = (high << 16) | low;
      const float x = as_float(u), y = tanh_float(x), neg = tanh_float(-x);
      if (u > 0x7f800000u) {
        broken += !isnan(y) || !isnan(neg);
        continue;
      }
      broken += as_bits(neg) != (as_bits(y) | 0x80000000u);
      not_one += u >= saturation && y != 1.0f;
      const long long e = llabs((long long)as_bits(y) - (long long)as_bits(expected(x)));
      not_rounded += e != 0;
      worst = e > worst ? e : worst;
    }
  }
  printf("{\"max_ulp\": %lld, \"not_rounded\": %lld, \"nan_or_sign_broken\": %lld, \"not_one_from_saturation\": %lld}\n",
         worst, 2 * not_rounded, broken, 2 * not_one);
  return 0;
}
