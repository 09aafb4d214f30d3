/*
 * The float32 shorthands of npy.h (npy_array, npy_read_f32(), npy_write_f32(), ...):
 * thin wrappers of the general reader and writer of npy.c, over its public API only.
 */
#include "npy.h"

#include <stdlib.h>
#include <string.h>

/* An npy_data of dtype NPY_F32 as an npy_array (takes over its data). */
static npy_array as_array(const npy_data *d)
{
    npy_array a = {d->ndim, {0}, d->count, d->data};
    memcpy(a.shape, d->shape, sizeof a.shape);
    return a;
}

int npy_parse_f32(const char *name, const unsigned char *bytes, size_t size, npy_array *out,
                  char *err, size_t errlen)
{
    npy_data d;
    int rc =
        npy_parse(name, bytes, size, NPY_ACCEPT(NPY_F32), out != NULL ? &d : NULL, err, errlen);
    if (out != NULL) {
        *out = rc == 0 ? as_array(&d) : (npy_array){0};
    }
    return rc;
}

int npy_read_f32_rank(const char *path, int min_ndim, const char *ranks, npy_array *out, char *err,
                      size_t errlen)
{
    npy_data d;
    int rc =
        npy_read(path, NPY_ACCEPT(NPY_F32), min_ndim, ranks, out != NULL ? &d : NULL, err, errlen);
    if (out != NULL) {
        *out = rc == 0 ? as_array(&d) : (npy_array){0};
    }
    return rc;
}

int npy_read_f32(const char *path, npy_array *out, char *err, size_t errlen)
{
    return npy_read_f32_rank(path, 1, NULL, out, err, errlen); /* "1 to 4 dimensions" */
}

void npy_free(npy_array *array)
{
    if (array != NULL) {
        free(array->data);
        memset(array, 0, sizeof *array);
    }
}

int npy_write_f32_stream(FILE *stream, const char *name, const float *data, const int64_t *shape,
                         int ndim, char *err, size_t errlen)
{
    return npy_write_stream(stream, name, NPY_F32, data, shape, ndim, err, errlen);
}

int npy_write_f32(const char *path, const float *data, const int64_t *shape, int ndim, char *err,
                  size_t errlen)
{
    return npy_write(path, NPY_F32, data, shape, ndim, err, errlen);
}
