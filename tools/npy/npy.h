/*
 * A small reader and writer for NumPy .npy files.
 *
 * Reads format versions 1.0, 2.0 and 3.0 with fortran_order False, rank
 * 1..NPY_MAX_NDIM and one of these little-endian dtypes (npy_dtype):
 *     '<f4' float32, '<f2' float16, '|b1' bool, '|u1' uint8, '<u2' uint16 (also how
 *     bfloat16 arrays travel: their raw 16-bit words), '<i4' int32, '|i1' int8.
 * Big-endian ('>f4'), native-order ('=f4') and every other dtype are refused. Writes
 * version 1.0 with the header padded so that the data starts at a multiple of 64 bytes,
 * as numpy does.
 * Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
 *
 * Every function returns 0 on success and -1 on failure; on failure `err` (if not
 * NULL and errlen > 0) receives a one-line message that starts with the file's name,
 * e.g. "K.npy: dtype '<f8' is not supported (need '<f4', little-endian float32)".
 * The parser never reads outside the bytes it is given, whatever they hold.
 */
#ifndef CLATTN_NPY_H
#define CLATTN_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define NPY_MAX_NDIM 4

/** The element types this reader and writer know. */
typedef enum npy_dtype {
    NPY_F32 = 0,  /**< '<f4', float */
    NPY_F16 = 1,  /**< '<f2', IEEE binary16 bits as uint16_t */
    NPY_BOOL = 2, /**< '|b1', one byte per element (numpy writes 0 and 1) */
    NPY_U8 = 3,   /**< '|u1', uint8_t */
    NPY_U16 = 4,  /**< '<u2', uint16_t (bfloat16 bit patterns, for instance) */
    NPY_I32 = 5,  /**< '<i4', int32_t */
    NPY_I8 = 6,   /**< '|i1', int8_t (a quantized K/V cache, for instance) */
    NPY_F64 = 7,  /**< '<f8', double (a float64 LSE, for instance) */
    NPY_DTYPE_COUNT
} npy_dtype;

/** A set of accepted dtypes for the readers: NPY_ACCEPT(NPY_F32) | NPY_ACCEPT(NPY_F16). */
#define NPY_ACCEPT(dtype) (1u << (unsigned)(dtype))
#define NPY_ACCEPT_ALL ((1u << NPY_DTYPE_COUNT) - 1u)

/** Bytes per element (4, 2, 1, 1, 2, 4, 1, 8); 0 for an unknown value. */
size_t npy_dtype_size(npy_dtype dtype);
/** The header's descr string ("<f4") and a name for messages ("float32"); "?" for an
 *  unknown value. */
const char *npy_dtype_descr(npy_dtype dtype);
const char *npy_dtype_name(npy_dtype dtype);

/** An array of any npy_dtype. `data` holds `count` elements in C order, converted to
 *  the host's byte order (so it can be read as float, uint16_t, uint8_t, int32_t or
 *  int8_t directly); malloc'd, free with npy_data_free(). */
typedef struct npy_data {
    npy_dtype dtype;
    int ndim;                    /**< 1..NPY_MAX_NDIM */
    int64_t shape[NPY_MAX_NDIM]; /**< shape[0..ndim-1]; the rest are 1 */
    size_t count;                /**< product of the shape */
    void *data;                  /**< count * npy_dtype_size(dtype) bytes; never NULL after
                                      a successful read */
} npy_data;

/** Read the file at `path` into `out` (zeroed on failure). Its dtype must be in the
 *  set `accept` (NPY_ACCEPT bits; a message names the accepted dtypes otherwise) and
 *  its rank at least `min_ndim` (1..NPY_MAX_NDIM); `ranks` describes the accepted
 *  ranks in the message of a rank error, which reads "rank R is not supported (need
 *  RANKS)"; NULL gives "1 to 4 dimensions". The file must be a regular file (a FIFO,
 *  device or directory is rejected without reading it); its magic and header are
 *  checked before the data is read. */
int npy_read(const char *path, unsigned accept, int min_ndim, const char *ranks, npy_data *out,
             char *err, size_t errlen);

/** Parse `size` bytes of .npy content of a dtype in `accept`, any rank 1..4; `name`
 *  is used in messages only. The bytes are not modified and may be freed afterwards.
 *  This is the fuzzing entry point. */
int npy_parse(const char *name, const unsigned char *bytes, size_t size, unsigned accept,
              npy_data *out, char *err, size_t errlen);

/** Free what a successful read allocated and zero the array. Accepts NULL. */
void npy_data_free(npy_data *array);

/** Write `count` elements of `dtype` at `data` (host byte order, C order, the product
 *  of shape[0..ndim-1], 1 <= ndim <= NPY_MAX_NDIM, dims >= 0) as a version 1.0 file
 *  at `path`, replacing it; on failure no file is left there. */
int npy_write(const char *path, npy_dtype dtype, const void *data, const int64_t *shape, int ndim,
              char *err, size_t errlen);

/** As npy_write() on an open binary stream; `name` is used in messages only. The
 *  stream is not closed; the caller must still check fclose(). */
int npy_write_stream(FILE *stream, const char *name, npy_dtype dtype, const void *data,
                     const int64_t *shape, int ndim, char *err, size_t errlen);

/* ---- float32 shorthands (the dtype is NPY_F32 only) ------------------------------ */

/** A float32 array read from a .npy file. `data` holds `count` elements in C order
 *  (malloc'd; free with npy_free()). */
typedef struct npy_array {
    int ndim;                    /**< 1..NPY_MAX_NDIM */
    int64_t shape[NPY_MAX_NDIM]; /**< shape[0..ndim-1]; the rest are 1 */
    size_t count;                /**< product of the shape */
    float *data;                 /**< never NULL after a successful read */
} npy_array;

/** npy_read() of a '<f4' file of any rank 1..4. */
int npy_read_f32(const char *path, npy_array *out, char *err, size_t errlen);

/** npy_read() of a '<f4' file of rank min_ndim..4 (see npy_read() for `ranks`). */
int npy_read_f32_rank(const char *path, int min_ndim, const char *ranks, npy_array *out, char *err,
                      size_t errlen);

/** npy_parse() of a '<f4' file. */
int npy_parse_f32(const char *name, const unsigned char *bytes, size_t size, npy_array *out,
                  char *err, size_t errlen);

/** Free what a successful npy_read_f32() allocated and zero the array. Accepts NULL. */
void npy_free(npy_array *array);

/** npy_write() of float32 data. */
int npy_write_f32(const char *path, const float *data, const int64_t *shape, int ndim, char *err,
                  size_t errlen);

/** npy_write_stream() of float32 data. */
int npy_write_f32_stream(FILE *stream, const char *name, const float *data, const int64_t *shape,
                         int ndim, char *err, size_t errlen);

/* What a file that is not a regular file is ("a directory", "a FIFO (named pipe)", …),
 * from its st_mode, for messages. */
const char *npy_file_kind(unsigned mode);

#endif /* CLATTN_NPY_H */
