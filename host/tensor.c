/* Small value constructors of the public API. */
#include "internal.h"

#include <math.h>
#include <string.h>

const char *clattn_version(void)
{
    return CLATTN_VERSION_STRING;
}

static clattn_tensor packed(int64_t batch, int64_t heads, int64_t seq, int64_t dim)
{
    clattn_tensor t;
    memset(&t, 0, sizeof t);
    t.shape[0] = batch;
    t.shape[1] = heads;
    t.shape[2] = seq;
    t.shape[3] = dim;
    t.dtype = CLATTN_FLOAT32;
    return t;
}

clattn_tensor clattn_tensor_host(void *data, int64_t batch, int64_t heads, int64_t seq, int64_t dim)
{
    clattn_tensor t = packed(batch, heads, seq, dim);
    t.host = data;
    return t;
}

clattn_tensor clattn_tensor_buffer(cl_mem buffer, int64_t batch, int64_t heads, int64_t seq,
                                   int64_t dim)
{
    clattn_tensor t = packed(batch, heads, seq, dim);
    t.buffer = buffer;
    return t;
}

clattn_attention_desc clattn_attention_desc_default(void)
{
    clattn_attention_desc d;
    memset(&d, 0, sizeof d);
    d.scale = 0.0f;
    d.mask = CLATTN_MASK_NONE;
    d.algorithm = CLATTN_ALGORITHM_AUTO;
    return d;
}

float clattn_effective_scale(const clattn_attention_desc *desc, int64_t d_k)
{
    if (desc && desc->scale != 0.0f)
        return desc->scale;
    return (float)(1.0 / sqrt((double)(d_k > 0 ? d_k : 1)));
}

size_t clattn_dtype_size(clattn_dtype dtype)
{
    switch (dtype) {
    case CLATTN_FLOAT32: return 4;
    case CLATTN_FLOAT16:
    case CLATTN_BFLOAT16: return 2;
    case CLATTN_BOOL:
    case CLATTN_INT8:
    case CLATTN_FLOAT8_E4M3: return 1;
    case CLATTN_FLOAT64: return 8;
    case CLATTN_INT32: return 4;
    default: return 0;
    }
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float clattn_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* inf or NaN (payload kept, quiet) */
        return bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
    if (exp != 0)
        return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
    /* zero or subnormal: man · 2^-24, exact in float */
    const float mag = (float)man * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
}

uint16_t clattn_f32_to_f16(float f)
{
    const uint32_t u = f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN: stay NaN */
        return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x1ffu));
    if (abs >= 0x477ff000u) /* ≥ 65520 rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* below 2^-14: subnormal half, round man·2^24 to int */
        const float mag = bits_f32(abs) * 16777216.0f; /* exact: scales by 2^24 */
        /* round half to even with the current (default) rounding of float→int via
         * nearbyint-free arithmetic: add 2^23 trick */
        const float r = (mag + 8388608.0f) - 8388608.0f;
        return (uint16_t)(sign | (uint16_t)r);
    }
    /* normal: rebias and round the 13 dropped bits to nearest even */
    uint32_t h = ((abs >> 13) - (112u << 10));
    const uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++; /* may carry into the exponent, up to inf: correct */
    return (uint16_t)(sign | h);
}

float clattn_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t clattn_f32_to_bf16(float f)
{
    const uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    const uint32_t r = u + 0x7fffu + ((u >> 16) & 1u); /* nearest, ties to even */
    return (uint16_t)(r >> 16);
}

void clattn_rope_freqs(const clattn_rotary *r, int64_t dim, float *out)
{
    const double base = r->base > 0.0f ? (double)r->base : 10000.0;
    for (int64_t p = 0; p < dim / 2; p++)
        out[p] = (float)pow(base, -2.0 * (double)p / (double)dim);
}

int64_t clattn_rope_rows(const clattn_attention_desc *d, int64_t batch, int64_t n_q, int64_t n_new)
{
    int64_t rows = 1;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t first = d->kv_start + d->kv_lens[b];
        const int64_t q_last = first + clattn_rope_q_step(d) * (n_q > 0 ? n_q - 1 : 0);
        const int64_t k_last = first + (n_new > 0 ? n_new - 1 : 0);
        const int64_t last = q_last > k_last ? q_last : k_last;
        if (last + 1 > rows)
            rows = last + 1;
    }
    return rows;
}

int clattn_rope_q_step(const clattn_attention_desc *d)
{
    return d->mask == CLATTN_MASK_CAUSAL_TOP_LEFT || d->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT ||
           d->window;
}

float clattn_fp8e4m3_to_f32(uint8_t x)
{
    const int e = (x >> 3) & 15, m = x & 7;
    if (e == 15 && m == 7)
        return NAN;
    const float v = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return (x & 0x80) ? -v : v;
}

uint8_t clattn_f32_to_fp8e4m3(float f)
{
    if (isnan(f))
        return 0x7f;
    const uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a > 448.0f)
        a = 448.0f;  /* saturate (no infinities in E4M3) */
    if (a < 0x1p-6f) /* subnormals: steps of 2^-9 (8 steps reach the smallest normal, 0x08) */
        return (uint8_t)(sign | (uint8_t)lrintf(a * 512.0f));
    int e2;
    const float fr = frexpf(a, &e2); /* a = fr·2^e2, fr in [0.5, 1) */
    int m = (int)lrintf((fr * 2.0f - 1.0f) * 8.0f), e = e2 + 6;
    if (m == 8) {
        m = 0;
        e++;
    }
    if (e > 15 || (e == 15 && m == 7))
        return (uint8_t)(sign | 0x7e);
    return (uint8_t)(sign | (e << 3) | m);
}
