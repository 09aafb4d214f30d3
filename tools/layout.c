/* The command line's dimension orders (--layout); see layout.h. */
#include "layout.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

/* The --layout names, in the order of layout_parse's values (NULL-terminated). */
static const char *const layout_names[] = {"bhsd", "bshd", NULL};

int layout_parse(const char *text)
{
    return cli_lookup(text, layout_names);
}

int layout_dim(int bshd, int ndim, int axis)
{
    const int dim = 4 - ndim + axis; /* bhsd: the last ndim of (b, h, n, d) */
    return bshd && ndim >= 3 && (dim == 1 || dim == 2) ? 3 - dim : dim;
}

const char *layout_text(int bshd, int ndim, const char *const names[4], char *buf, size_t size)
{
    snprintf(buf, size, "(");
    for (int axis = 0; axis < ndim; ++axis) {
        const size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s", names[layout_dim(bshd, ndim, axis)],
                 axis + 1 < ndim ? ", " : ")");
    }
    return buf;
}

const char *layout_ranks(int bshd, char *buf, size_t size)
{
    static const char *const names[4] = {"b", "h", "n", "d"};
    char r[3][32];
    for (int i = 0; i < 3; ++i) {
        layout_text(bshd, i + 2, names, r[i], sizeof r[i]);
    }
    snprintf(buf, size, "%s, %s or %s", r[0], r[1], r[2]);
    return buf;
}

const char *layout_hint(int bshd)
{
    return bshd ? " (--layout bshd: heads are the last dimension but one, after the rows)" : "";
}

int layout_check_heads(const char *q_path, int64_t h_q, const char *k_path, int64_t h_kv, int bshd)
{
    if (h_q < 1 || h_kv < 1) {
        cli_error("%s: %s is 0; heads must be at least 1", h_q < 1 ? q_path : k_path,
                  h_q < 1 ? "h_q" : "h_kv");
        return 0;
    }
    if (h_q % h_kv != 0) {
        cli_error("%s: %lld head%s not a multiple of the %lld head%s of %s (h_q must be a "
                  "multiple of h_kv)%s",
                  q_path, (long long)h_q, h_q == 1 ? " is" : "s is", (long long)h_kv,
                  h_kv == 1 ? "" : "s", k_path, layout_hint(bshd));
        return 0;
    }
    return 1;
}

void shape4(const int64_t *shape, int ndim, int bshd, int64_t out[4])
{
    for (int i = 0; i < 4; ++i) {
        out[i] = 1;
    }
    for (int axis = 0; axis < ndim; ++axis) {
        out[layout_dim(bshd, ndim, axis)] = shape[axis];
    }
}

clattn_tensor host_view(void *data, const int64_t *shape, int ndim, clattn_dtype dtype, int bshd)
{
    int64_t s[4];
    shape4(shape, ndim, bshd, s);
    clattn_tensor t = clattn_tensor_host(data, s[0], s[1], s[2], s[3]);
    t.dtype = dtype;
    /* bshd: h and n swapped, so each dimension gets its stride in the file. At rank 3, b
     * (extent 1) keeps stride 0. Extents of 0 count as 1, and the product saturates: the
     * library refuses such extents, after this. */
    if (bshd && ndim >= 3) {
        int64_t step = 1;
        for (int axis = ndim - 1; axis >= 0; --axis) {
            t.strides[layout_dim(bshd, ndim, axis)] = step;
            const int64_t extent = shape[axis] > 1 ? shape[axis] : 1;
            step = step <= INT64_MAX / extent ? step * extent : INT64_MAX;
        }
    }
    return t;
}

clattn_tensor view_slice(clattn_tensor t, int64_t b, int64_t h)
{
    if (t.strides[0] == 0 && t.strides[1] == 0 && t.strides[2] == 0 && t.strides[3] == 0) {
        t.strides[3] = 1; /* packed: its strides made explicit */
        t.strides[2] = t.shape[3];
        t.strides[1] = t.shape[2] * t.shape[3];
        t.strides[0] = t.shape[1] * t.strides[1];
    }
    t.offset += b * t.strides[0] + h * t.strides[1];
    t.shape[0] = t.shape[1] = 1;
    return t;
}
