/*
 * A small reader and writer for NumPy .npy files holding float32 arrays.
 *
 * Reads format versions 1.0, 2.0 and 3.0 with dtype '<f4' (little-endian float32),
 * fortran_order False and rank 1..NPY_MAX_NDIM. Writes version 1.0 with the header
 * padded so that the data starts at a multiple of 64 bytes, as numpy does.
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

/** A float32 array read from a .npy file. `data` holds `count` elements in C order
 *  (malloc'd; free with npy_free()). */
typedef struct npy_array {
    int ndim;                    /**< 1..NPY_MAX_NDIM */
    int64_t shape[NPY_MAX_NDIM]; /**< shape[0..ndim-1]; the rest are 1 */
    size_t count;                /**< product of the shape */
    float *data;                 /**< never NULL after a successful read */
} npy_array;

/** Read the file at `path` into `out` (zeroed on failure). The file must be a regular
 *  file (a FIFO, device or directory is rejected without reading it); its magic and
 *  header are checked before the data is read. */
int npy_read_f32(const char *path, npy_array *out, char *err, size_t errlen);

/** As npy_read_f32(), but ranks below `min_ndim` (1..NPY_MAX_NDIM) are rejected too.
 *  `ranks` describes the accepted ranks in the message of a rank error, which reads
 *  "rank R is not supported (need RANKS)", e.g. ranks = "(n, d), (h, n, d) or
 *  (b, h, n, d)"; NULL gives "1 to 4 dimensions". */
int npy_read_f32_rank(const char *path, int min_ndim, const char *ranks, npy_array *out, char *err,
                      size_t errlen);

/** Parse `size` bytes of .npy content; `name` is used in messages only. The bytes
 *  are not modified and may be freed afterwards. This is the fuzzing entry point. */
int npy_parse_f32(const char *name, const unsigned char *bytes, size_t size, npy_array *out,
                  char *err, size_t errlen);

/** Free what a successful read allocated and zero the array. Accepts NULL. */
void npy_free(npy_array *array);

/** Write `data` (C order, product of shape[0..ndim-1] elements, 1 <= ndim <=
 *  NPY_MAX_NDIM, dims >= 0) as a version 1.0 '<f4' file at `path`, replacing it. */
int npy_write_f32(const char *path, const float *data, const int64_t *shape, int ndim, char *err,
                  size_t errlen);

/** As npy_write_f32() on an open binary stream; `name` is used in messages only. The
 *  stream is not closed; the caller must still check fclose(). */
int npy_write_f32_stream(FILE *stream, const char *name, const float *data, const int64_t *shape,
                         int ndim, char *err, size_t errlen);

/* What a file that is not a regular file is ("a directory", "a FIFO (named pipe)", …),
 * from its st_mode, for messages. */
const char *npy_file_kind(unsigned mode);

#endif /* CLATTN_NPY_H */
