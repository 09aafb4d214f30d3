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
