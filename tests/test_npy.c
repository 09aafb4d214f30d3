/* The .npy reader and writer of tools/npy/npy.c: round trips of every supported rank and
 * dtype (float32, float16, bool, uint8, uint16, int32), the writer's header layout,
 * versions 2.0 and 3.0, and every kind of malformed file rejected with a message that
 * names the file. No OpenCL needed. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, opendir, mkfifo */

#include "npy.h"

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp_dir[4096];

/* tmp_dir/name in a static buffer (one at a time). */
static const char *tmp_path(const char *name)
{
    static char path[4096 + 256];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    return path;
}

static void write_bytes(const char *path, const void *bytes, size_t size)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_msg(fwrite(bytes, 1, size, f) == size, "cannot write %s", path);
    ck_assert_msg(fclose(f) == 0, "cannot close %s", path);
}

/* The whole file in a malloc'd buffer. */
static unsigned char *read_bytes(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    unsigned char *bytes = malloc(1 << 20);
    ck_assert_ptr_nonnull(bytes);
    *size = fread(bytes, 1, 1 << 20, f);
    ck_assert_msg(feof(f) && !ferror(f), "cannot read %s (or larger than 1 MiB)", path);
    fclose(f);
    return bytes;
}

/* A .npy file with format version major.minor, the header text `dict` exactly as given
 * and `data_bytes` bytes of data (a byte pattern); returns its path. */
static const char *make_file(const char *name, int major, int minor, const char *dict,
                             size_t data_bytes)
{
    size_t dict_len = strlen(dict);
    size_t prefix = major >= 2 ? 12 : 10;
    size_t size = prefix + dict_len + data_bytes;
    unsigned char *bytes = malloc(size);
    ck_assert_ptr_nonnull(bytes);
    memcpy(bytes, "\x93NUMPY", 6);
    bytes[6] = (unsigned char)major;
    bytes[7] = (unsigned char)minor;
    for (size_t i = 8; i < prefix; ++i) {
        bytes[i] = (unsigned char)(dict_len >> (8 * (i - 8)));
    }
    memcpy(bytes + prefix, dict, dict_len);
    for (size_t i = 0; i < data_bytes; ++i) {
        bytes[prefix + dict_len + i] = (unsigned char)(i * 7 + 1);
    }
    const char *path = tmp_path(name);
    write_bytes(path, bytes, size);
    free(bytes);
    return path;
}

/* Reading `path` fails with a message that names the file and contains `fragment`,
 * and leaves the array zeroed. */
static void expect_read_error(const char *path, const char *fragment)
{
    npy_array a;
    char err[512] = "";
    ck_assert_msg(npy_read_f32(path, &a, err, sizeof err) != 0, "%s was accepted", path);
    ck_assert_msg(strstr(err, path) != NULL, "message does not name the file: %s", err);
    ck_assert_msg(strstr(err, fragment) != NULL, "message lacks '%s': %s", fragment, err);
    ck_assert_ptr_null(a.data);
    ck_assert_int_eq(a.ndim, 0);
}

#define STD_DICT(descr, order, shape)                                                              \
    "{'descr': '" descr "', 'fortran_order': " order ", 'shape': " shape ", }\n"

/* ---- round trips ------------------------------------------------------------------ */

static const struct {
    int ndim;
    int64_t shape[4];
} round_trip_shapes[] = {
    {1, {1}},          {1, {7}},          {1, {0}},          {2, {6, 3}},
    {2, {1, 1}},       {2, {65, 17}},     {3, {2, 3, 5}},    {3, {1, 0, 4}},
    {4, {2, 1, 3, 4}}, {4, {1, 2, 0, 3}}, {4, {1, 1, 1, 1}}, {4, {3, 2, 4, 5}},
};

START_TEST(test_round_trip)
{
    int ndim = round_trip_shapes[_i].ndim;
    const int64_t *shape = round_trip_shapes[_i].shape;
    size_t count = 1;
    for (int d = 0; d < ndim; ++d) {
        count *= (size_t)shape[d];
    }
    float *data = malloc((count + 1) * sizeof *data);
    ck_assert_ptr_nonnull(data);
    /* ordinary values, and specials that must survive bit for bit */
    const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-45f, -3.4028235e38f};
    for (size_t i = 0; i < count; ++i) {
        data[i] = i < 6 ? specials[i] : (float)i * 0.25f - 3.0f;
    }
    char name[64], err[512] = "";
    snprintf(name, sizeof name, "round_trip_%d.npy", _i);
    const char *path = tmp_path(name);
    ck_assert_msg(npy_write_f32(path, data, shape, ndim, err, sizeof err) == 0, "%s", err);

    npy_array a;
    ck_assert_msg(npy_read_f32(path, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.ndim, ndim);
    for (int d = 0; d < NPY_MAX_NDIM; ++d) {
        ck_assert_int_eq(a.shape[d], d < ndim ? shape[d] : 1);
    }
    ck_assert_uint_eq(a.count, count);
    ck_assert_ptr_nonnull(a.data);
    ck_assert_msg(count == 0 || memcmp(a.data, data, count * sizeof *data) == 0,
                  "data differs after a round trip");
    npy_free(&a);
    ck_assert_ptr_null(a.data);
    free(data);
}
END_TEST

START_TEST(test_writer_header)
{
    const int64_t shapes[][4] = {{6, 3}, {7}, {2, 3, 4, 5}};
    const int ndims[] = {2, 1, 4};
    const char *const texts[] = {"'shape': (6, 3), }", "'shape': (7,), }",
                                 "'shape': (2, 3, 4, 5), }"};
    for (int t = 0; t < 3; ++t) {
        float data[120] = {0};
        char err[512] = "";
        const char *path = tmp_path("header.npy");
        ck_assert_msg(npy_write_f32(path, data, shapes[t], ndims[t], err, sizeof err) == 0, "%s",
                      err);
        size_t size, count = 1;
        for (int d = 0; d < ndims[t]; ++d) {
            count *= (size_t)shapes[t][d];
        }
        unsigned char *bytes = read_bytes(path, &size);
        ck_assert_int_eq(memcmp(bytes, "\x93NUMPY\x01\x00", 8), 0);
        size_t header_len = bytes[8] | (size_t)bytes[9] << 8;
        ck_assert_uint_eq((10 + header_len) % 64, 0);
        ck_assert_uint_eq(size, 10 + header_len + 4 * count);
        ck_assert_int_eq(bytes[10 + header_len - 1], '\n');
        char header[256] = "";
        ck_assert_uint_lt(header_len, sizeof header);
        memcpy(header, bytes + 10, header_len);
        ck_assert_msg(strncmp(header, "{'descr': '<f4', 'fortran_order': False, ", 41) == 0,
                      "header: %s", header);
        ck_assert_msg(strstr(header, texts[t]) != NULL, "header: %s", header);
        free(bytes);
    }
}
END_TEST

START_TEST(test_little_endian_bytes)
{
    /* 1.0f is 0x3f800000: stored as 00 00 80 3f whatever the host */
    const int64_t shape[1] = {2};
    const float data[2] = {1.0f, -2.0f};
    char err[512] = "";
    const char *path = tmp_path("endian.npy");
    ck_assert_msg(npy_write_f32(path, data, shape, 1, err, sizeof err) == 0, "%s", err);
    size_t size;
    unsigned char *bytes = read_bytes(path, &size);
    size_t data_offset = 10 + (bytes[8] | (size_t)bytes[9] << 8);
    ck_assert_uint_eq(size, data_offset + 8);
    ck_assert_int_eq(memcmp(bytes + data_offset, "\x00\x00\x80\x3f\x00\x00\x00\xc0", 8), 0);
    free(bytes);
}
END_TEST

/* ---- versions and header spellings that must be accepted ---------------------------- */

static const struct {
    int major;
    const char *dict;
    int ndim;
    int64_t shape[4];
} accepted[] = {
    {2, STD_DICT("<f4", "False", "(6, 3)"), 2, {6, 3}},
    {3, STD_DICT("<f4", "False", "(2, 3, 4)"), 3, {2, 3, 4}},
    {1, "{\"shape\": (3,), \"descr\": \"<f4\", \"fortran_order\": False}", 1, {3}},
    /* '=' is native order, little-endian on the machines clattn runs on (x86-64, ARM) */
    {1, STD_DICT("=f4", "False", "(2, 2)"), 2, {2, 2}},
    {1, "{'descr':'<f4','fortran_order':False,'shape':(2,3,),}      \n", 2, {2, 3}},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }\n", 2, {2, 3}},
    {1,
     "\t{ 'fortran_order' : False ,\r\n 'shape' : ( 1 , 1 , 2 , 1 ) , 'descr' : '<f4' }",
     4,
     {1, 1, 2, 1}},
};

START_TEST(test_accepted_headers)
{
    size_t count = 1;
    for (int d = 0; d < accepted[_i].ndim; ++d) {
        count *= (size_t)accepted[_i].shape[d];
    }
    const char *path =
        make_file("accepted.npy", accepted[_i].major, 0, accepted[_i].dict, 4 * count);
    npy_array a;
    char err[512] = "";
    ck_assert_msg(npy_read_f32(path, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.ndim, accepted[_i].ndim);
    for (int d = 0; d < a.ndim; ++d) {
        ck_assert_int_eq(a.shape[d], accepted[_i].shape[d]);
    }
    /* the same bytes through the in-memory parser give the same values */
    size_t size;
    unsigned char *bytes = read_bytes(path, &size);
    npy_array b;
    ck_assert_msg(npy_parse_f32("mem", bytes, size, &b, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(b.count, count);
    ck_assert_int_eq(memcmp(a.data, b.data, 4 * count), 0);
    ck_assert_int_eq(memcmp(b.data, bytes + size - 4 * count, 4 * count), 0); /* LE host */
    npy_free(&a);
    npy_free(&b);
    free(bytes);
}
END_TEST

/* ---- malformed files ---------------------------------------------------------------- */

static const struct {
    int major, minor;
    const char *dict;
    size_t data_bytes;
    const char *fragment; /* expected in the message */
} rejected[] = {
    /* versions */
    {1, 1, STD_DICT("<f4", "False", "(2,)"), 8, "unsupported .npy format version 1.1"},
    {4, 0, STD_DICT("<f4", "False", "(2,)"), 8, "unsupported .npy format version 4.0"},
    {0, 0, STD_DICT("<f4", "False", "(2,)"), 8, "unsupported .npy format version 0.0"},
    /* dtypes */
    {1, 0, STD_DICT("<f8", "False", "(2,)"), 16, "dtype '<f8' is not supported"},
    {1, 0, STD_DICT(">f4", "False", "(2,)"), 8, "dtype '>f4' is not supported"},
    {1, 0, STD_DICT("<f2", "False", "(2,)"), 4, "dtype '<f2' is not supported"},
    {1, 0, STD_DICT("<i4", "False", "(2,)"), 8, "dtype '<i4' is not supported"},
    {1, 0, STD_DICT("|u1", "False", "(2,)"), 2, "dtype '|u1' is not supported"},
    {1, 0, STD_DICT("<f4x", "False", "(2,)"), 8, "dtype '<f4x' is not supported"},
    {1, 0, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8,
     "'descr' is not a dtype string"},
    /* order, rank, dimensions */
    {1, 0, STD_DICT("<f4", "True", "(2, 3)"), 24, "fortran_order is True"},
    {1, 0, STD_DICT("<f4", "False", "()"), 4, "rank 0 is not supported"},
    {1, 0, STD_DICT("<f4", "False", "(1, 1, 1, 1, 2)"), 8, "rank 5 is not supported"},
    {1, 0, STD_DICT("<f4", "False", "(2, -3)"), 24, "negative dimension"},
    {1, 0, STD_DICT("<f4", "False", "(99999999999999999999,)"), 8, "larger than 2^63-1"},
    {1, 0, STD_DICT("<f4", "False", "(9223372036854775807, 2)"), 8, "overflows"},
    {1, 0, STD_DICT("<f4", "False", "(4611686018427387904,)"), 8, "overflows"},
    {1, 0, STD_DICT("<f4", "False", "(65536, 65536, 65536, 65536)"), 8, "overflows"},
    /* data size */
    {1, 0, STD_DICT("<f4", "False", "(6, 3)"), 71,
     "truncated: data is 71 bytes but shape (6, 3) needs 72"},
    {1, 0, STD_DICT("<f4", "False", "(6, 3)"), 0, "truncated: data is 0 bytes"},
    {1, 0, STD_DICT("<f4", "False", "(6, 3)"), 76, "trailing bytes: data is 76 bytes"},
    {1, 0, STD_DICT("<f4", "False", "(0, 3)"), 4, "trailing bytes"},
    /* malformed dicts */
    {1, 0, "", 8, "malformed header"},
    {1, 0, "[1, 2]", 8, "malformed header"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False}", 8, "no 'shape' key"},
    {1, 0, "{'descr': '<f4', 'shape': (2,)}", 8, "no 'fortran_order' key"},
    {1, 0, "{'fortran_order': False, 'shape': (2,)}", 8, "no 'descr' key"},
    {1, 0, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
     "appears twice"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", 8,
     "unexpected key 'extra'"},
    {1, 0, "{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}", 8, "True or False"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", 8, "not a tuple"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", 8, "malformed header"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}", 8, "malformed header"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", 8, "malformed header"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8, "malformed header"},
    {1, 0, "{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", 8, "malformed header"},
    {1, 0, "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", 8, "malformed header"},
    {1, 0, "{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", 8, "malformed header"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", 8, "malformed header"},
    {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}\x01", 8, "malformed header"},
    {1, 0, "{descr: '<f4', 'fortran_order': False, 'shape': (2,)}", 8, "malformed header"},
    {1, 0, "{'descr': '<\\f4', 'fortran_order': False, 'shape': (2,)}", 8, "not a dtype string"},
};

START_TEST(test_rejected_headers)
{
    const char *path = make_file("rejected.npy", rejected[_i].major, rejected[_i].minor,
                                 rejected[_i].dict, rejected[_i].data_bytes);
    expect_read_error(path, rejected[_i].fragment);
}
END_TEST

START_TEST(test_bad_magic_and_truncation)
{
    const char *path = tmp_path("raw.npy");
    static const struct {
        const char *bytes;
        size_t size;
        const char *fragment;
    } cases[] = {
        {"", 0, "truncated: 0 bytes"},
        {"\x93NUM", 4, "truncated: 4 bytes"},
        {"\x93NUMPY\x01", 7, "truncated: 7 bytes"},
        {"\x93NUMPY\x01\x00\x10", 9, "file ends inside the header length field"},
        {"\x93NUMPY\x02\x00\x10\x00\x00", 11, "file ends inside the header length field"},
        {"\x93NUMPY\x01\x00\x10\x00{}", 12, "header length 16 runs past the end"},
        {"\x93NUMPY\x02\x00\xff\xff\xff\xff{}", 14, "header length 4294967295 runs past"},
        {"\x93NUMPX\x01\x00\x00\x00", 10, "bad magic"},
        {"PK\x03\x04", 4, "bad magic"},
        {"\x93", 1, "truncated"},
        {"N", 1, "bad magic"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        write_bytes(path, cases[i].bytes, cases[i].size);
        expect_read_error(path, cases[i].fragment);
    }
}
END_TEST

/* Every proper prefix of a valid file is rejected, and no single-byte change of the
 * header makes the parser read out of bounds (run under valgrind or ASan to see). */
START_TEST(test_prefixes_and_mutations)
{
    const int64_t shape[2] = {5, 3};
    float data[15];
    for (int i = 0; i < 15; ++i) {
        data[i] = (float)i;
    }
    char err[512] = "";
    const char *path = tmp_path("valid.npy");
    ck_assert_msg(npy_write_f32(path, data, shape, 2, err, sizeof err) == 0, "%s", err);
    size_t size;
    unsigned char *bytes = read_bytes(path, &size);
    size_t data_offset = 10 + (bytes[8] | (size_t)bytes[9] << 8);
    for (size_t len = 0; len < size; ++len) {
        /* an exact-size copy so that ASan/valgrind see any read past `len` */
        unsigned char *prefix = malloc(len > 0 ? len : 1);
        ck_assert_ptr_nonnull(prefix);
        memcpy(prefix, bytes, len);
        npy_array a;
        ck_assert_msg(npy_parse_f32("prefix.npy", prefix, len, &a, err, sizeof err) != 0,
                      "a %zu-byte prefix was accepted", len);
        ck_assert_msg(strstr(err, "prefix.npy") != NULL, "%s", err);
        free(prefix);
    }
    static const unsigned char replacements[] = {0,   ' ', '\'', '"', '(', ')', ',',
                                                 ':', '{', '}',  '9', '-', 'L', 0xff};
    for (size_t pos = 0; pos < data_offset; ++pos) {
        for (size_t r = 0; r < sizeof replacements; ++r) {
            unsigned char *copy = malloc(size);
            ck_assert_ptr_nonnull(copy);
            memcpy(copy, bytes, size);
            copy[pos] = replacements[r];
            npy_array a;
            if (npy_parse_f32("mutant.npy", copy, size, &a, err, sizeof err) == 0) {
                ck_assert_uint_eq(data_offset + a.count * 4, size);
                npy_free(&a);
            } else {
                ck_assert_msg(strstr(err, "mutant.npy") != NULL, "%s", err);
            }
            free(copy);
        }
    }
    free(bytes);
}
END_TEST

/* ---- files that cannot be read or written -------------------------------------------- */

START_TEST(test_io_errors)
{
    expect_read_error(tmp_path("does-not-exist.npy"), "cannot open");
    expect_read_error(tmp_dir, tmp_dir); /* a directory */

    const int64_t shape[1] = {1};
    const float one = 1.0f;
    char err[512] = "";
    const char *path = tmp_path("no-such-folder/out.npy");
    ck_assert_int_ne(npy_write_f32(path, &one, shape, 1, err, sizeof err), 0);
    ck_assert_msg(strstr(err, path) != NULL, "%s", err);

    /* writer argument checks */
    const int64_t bad_shape[2] = {2, -1};
    path = tmp_path("bad.npy");
    ck_assert_int_ne(npy_write_f32(path, &one, shape, 0, err, sizeof err), 0);
    ck_assert_int_ne(npy_write_f32(path, &one, shape, 5, err, sizeof err), 0);
    ck_assert_int_ne(npy_write_f32(path, &one, bad_shape, 2, err, sizeof err), 0);
    ck_assert_int_ne(npy_write_f32(path, NULL, shape, 1, err, sizeof err), 0);
    ck_assert_msg(strstr(err, path) != NULL, "%s", err);
    ck_assert_int_eq(access(path, F_OK), -1); /* failed writes leave no file */

    /* reader argument checks; a NULL or empty message buffer is allowed */
    npy_array a;
    ck_assert_int_ne(npy_parse_f32("x", NULL, 5, &a, NULL, 0), 0);
    ck_assert_int_ne(npy_parse_f32("x", (const unsigned char *)"", 0, NULL, err, 1), 0);
    ck_assert_int_ne(npy_read_f32(NULL, &a, err, sizeof err), 0);
    npy_free(NULL);
}
END_TEST

/* Inputs that are not regular files are rejected without being read: a FIFO (which has
 * no writer: a blocking open or read would hang), a device (/dev/null here: a reader
 * that reads to the end first would never finish /dev/zero) and a directory. Each
 * message names the file. */
START_TEST(test_special_files)
{
    const char *fifo = tmp_path("fifo.npy");
    ck_assert_msg(mkfifo(fifo, 0600) == 0, "mkfifo %s failed", fifo);
    expect_read_error(fifo, "is a FIFO (named pipe), not a regular file");
    remove(fifo);
    if (access("/dev/null", R_OK) == 0) {
        expect_read_error("/dev/null", "is a device, not a regular file");
    }
    expect_read_error(tmp_dir, "is a directory, not a regular file");
}
END_TEST

/* npy_read_f32_rank(): a minimum rank, and the description of the accepted ranks in
 * the message. */
START_TEST(test_min_rank)
{
    static const char ranks[] = "(n, d), (h, n, d) or (b, h, n, d)";
    char err[512] = "";
    npy_array a;
    const char *path = make_file("rank1.npy", 1, 0, STD_DICT("<f4", "False", "(2,)"), 8);
    ck_assert_msg(npy_read_f32(path, &a, err, sizeof err) == 0, "%s", err);
    npy_free(&a);
    ck_assert_int_ne(npy_read_f32_rank(path, 2, ranks, &a, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "rank1.npy: rank 1 is not supported (need (n, d), (h, n, d) or "
                              "(b, h, n, d))") != NULL,
                  "%s", err);
    ck_assert_ptr_null(a.data);

    path = make_file("rank5.npy", 1, 0, STD_DICT("<f4", "False", "(1, 1, 1, 1, 2)"), 8);
    ck_assert_int_ne(npy_read_f32_rank(path, 2, ranks, &a, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "rank 5 is not supported (need (n, d),") != NULL, "%s", err);
    ck_assert_int_ne(npy_read_f32(path, &a, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "rank 5 is not supported (need 1 to 4 dimensions)") != NULL, "%s",
                  err);

    path = make_file("rank2.npy", 1, 0, STD_DICT("<f4", "False", "(2, 1)"), 8);
    ck_assert_msg(npy_read_f32_rank(path, 2, ranks, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.ndim, 2);
    npy_free(&a);
    ck_assert_int_ne(npy_read_f32_rank(path, 0, ranks, &a, err, sizeof err), 0);
    ck_assert_int_ne(npy_read_f32_rank(path, 5, ranks, &a, err, sizeof err), 0);
}
END_TEST

/* ---- dtypes other than float32 ------------------------------------------------------ */

static const npy_dtype all_dtypes[] = {NPY_F32, NPY_F16, NPY_BOOL, NPY_U8,
                                       NPY_U16, NPY_I32, NPY_I8,   NPY_F64};

/* Every dtype through npy_write() and npy_read(), every round-trip shape: the values
 * (bit patterns) survive, the header names the dtype, the data is little-endian. */
START_TEST(test_dtype_round_trip)
{
    const npy_dtype dtype = all_dtypes[_i];
    const size_t esize = npy_dtype_size(dtype);
    ck_assert_uint_gt(esize, 0);
    for (size_t t = 0; t < sizeof round_trip_shapes / sizeof round_trip_shapes[0]; ++t) {
        const int ndim = round_trip_shapes[t].ndim;
        const int64_t *shape = round_trip_shapes[t].shape;
        size_t count = 1;
        for (int d = 0; d < ndim; ++d) {
            count *= (size_t)shape[d];
        }
        unsigned char *data = malloc(count * esize + 1);
        ck_assert_ptr_nonnull(data);
        for (size_t i = 0; i < count * esize; ++i) {
            data[i] = (unsigned char)(i * 37 + 11 + t);
        }
        if (dtype == NPY_BOOL) {
            for (size_t i = 0; i < count; ++i) {
                data[i] = (unsigned char)(i % 3 == 0);
            }
        }
        char err[512] = "";
        const char *path = tmp_path("dtype_round_trip.npy");
        ck_assert_msg(npy_write(path, dtype, data, shape, ndim, err, sizeof err) == 0, "%s", err);

        npy_data a;
        ck_assert_msg(npy_read(path, NPY_ACCEPT_ALL, 1, NULL, &a, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(a.dtype, dtype);
        ck_assert_int_eq(a.ndim, ndim);
        for (int d = 0; d < NPY_MAX_NDIM; ++d) {
            ck_assert_int_eq(a.shape[d], d < ndim ? shape[d] : 1);
        }
        ck_assert_uint_eq(a.count, count);
        ck_assert_ptr_nonnull(a.data);
        ck_assert_msg(count == 0 || memcmp(a.data, data, count * esize) == 0,
                      "%s data differs after a round trip", npy_dtype_name(dtype));

        /* the header and the bytes on disk (little-endian) */
        size_t size;
        unsigned char *bytes = read_bytes(path, &size);
        size_t data_offset = 10 + (bytes[8] | (size_t)bytes[9] << 8);
        ck_assert_uint_eq(data_offset % 64, 0);
        ck_assert_uint_eq(size, data_offset + count * esize);
        char descr[32];
        snprintf(descr, sizeof descr, "{'descr': '%s', ", npy_dtype_descr(dtype));
        ck_assert_int_eq(memcmp(bytes + 10, descr, strlen(descr)), 0);
        for (size_t i = 0; i < count; ++i) {
            uint64_t host = 0, disk = 0;
            for (size_t b = 0; b < esize; ++b) {
                disk |= (uint64_t)bytes[data_offset + i * esize + b] << (8 * b);
            }
            if (esize == 1) {
                host = ((const uint8_t *)a.data)[i];
            } else if (esize == 2) {
                host = ((const uint16_t *)a.data)[i];
            } else if (esize == 4) {
                host = ((const uint32_t *)a.data)[i];
            } else {
                host = ((const uint64_t *)a.data)[i];
            }
            ck_assert_uint_eq(host, disk);
        }

        /* the same bytes through the in-memory parser */
        npy_data b;
        ck_assert_msg(npy_parse("mem", bytes, size, NPY_ACCEPT(dtype), &b, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_int_eq(b.dtype, dtype);
        ck_assert_uint_eq(b.count, count);
        ck_assert_int_eq(memcmp(a.data, b.data, count * esize), 0);
        free(bytes);
        npy_data_free(&a);
        npy_data_free(&b);
        ck_assert_ptr_null(a.data);
        free(data);
    }
}
END_TEST

START_TEST(test_dtype_names)
{
    static const char *const descrs[] = {"<f4", "<f2", "|b1", "|u1", "<u2", "<i4", "|i1", "<f8"};
    static const char *const names[] = {"float32", "float16", "bool", "uint8",
                                        "uint16",  "int32",   "int8", "float64"};
    static const size_t sizes[] = {4, 2, 1, 1, 2, 4, 1, 8};
    for (int d = 0; d < NPY_DTYPE_COUNT; ++d) {
        ck_assert_str_eq(npy_dtype_descr((npy_dtype)d), descrs[d]);
        ck_assert_str_eq(npy_dtype_name((npy_dtype)d), names[d]);
        ck_assert_uint_eq(npy_dtype_size((npy_dtype)d), sizes[d]);
    }
    ck_assert_str_eq(npy_dtype_descr(NPY_DTYPE_COUNT), "?");
    ck_assert_str_eq(npy_dtype_name((npy_dtype)-1), "?");
    ck_assert_uint_eq(npy_dtype_size(NPY_DTYPE_COUNT), 0);
}
END_TEST

/* Valid files of each dtype, written by hand, through npy_read with only that dtype
 * accepted, and refused (naming what is accepted) when it is not. */
static const struct {
    int major;
    const char *dict;
    npy_dtype dtype;
    size_t data_bytes;
    int ndim;
    int64_t shape[4];
} typed_files[] = {
    {1, STD_DICT("<f2", "False", "(2, 3)"), NPY_F16, 12, 2, {2, 3}},
    {2, STD_DICT("<f2", "False", "(1, 1, 5)"), NPY_F16, 10, 3, {1, 1, 5}},
    {1, STD_DICT("|b1", "False", "(4, 4)"), NPY_BOOL, 16, 2, {4, 4}},
    {3, STD_DICT("|b1", "False", "(7,)"), NPY_BOOL, 7, 1, {7}},
    {1, STD_DICT("|u1", "False", "(3, 1, 2, 2)"), NPY_U8, 12, 4, {3, 1, 2, 2}},
    {1, STD_DICT("<u2", "False", "(2, 0)"), NPY_U16, 0, 2, {2, 0}},
    {1, STD_DICT("<u2", "False", "(2, 2)"), NPY_U16, 8, 2, {2, 2}},
    {1, STD_DICT("<i4", "False", "(3,)"), NPY_I32, 12, 1, {3}},
    {1, "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<i4\"}", NPY_I32, 8, 1, {2}},
    {1, STD_DICT("|i1", "False", "(2, 3)"), NPY_I8, 6, 2, {2, 3}},
    {1, STD_DICT("<f8", "False", "(2, 2)"), NPY_F64, 32, 2, {2, 2}},
};

START_TEST(test_typed_files)
{
    const char *path = make_file("typed.npy", typed_files[_i].major, 0, typed_files[_i].dict,
                                 typed_files[_i].data_bytes);
    const npy_dtype dtype = typed_files[_i].dtype;
    npy_data a;
    char err[512] = "";
    ck_assert_msg(npy_read(path, NPY_ACCEPT(dtype), 1, NULL, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.dtype, dtype);
    ck_assert_int_eq(a.ndim, typed_files[_i].ndim);
    for (int d = 0; d < a.ndim; ++d) {
        ck_assert_int_eq(a.shape[d], typed_files[_i].shape[d]);
    }
    ck_assert_uint_eq(a.count * npy_dtype_size(dtype), typed_files[_i].data_bytes);
    npy_data_free(&a);

    /* not accepted: the message names the file's dtype and the accepted ones */
    const unsigned others = NPY_ACCEPT_ALL & ~NPY_ACCEPT(dtype);
    ck_assert_int_ne(npy_read(path, others, 1, NULL, &a, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "is not supported (need '<f4' (float32), ") != NULL ||
                      strstr(err, "is not supported (need '<f2' (float16), ") != NULL,
                  "%s", err);
    ck_assert_ptr_null(a.data);
    if (dtype != NPY_F32) {
        npy_array f;
        ck_assert_int_ne(npy_read_f32(path, &f, err, sizeof err), 0);
        ck_assert_msg(strstr(err, "is not supported (need '<f4', little-endian float32)") != NULL,
                      "%s", err);
        ck_assert_ptr_null(f.data);
    }
}
END_TEST

static const struct {
    const char *dict;
    size_t data_bytes;
    unsigned accept;
    const char *fragment;
} typed_rejected[] = {
    /* byte orders and spellings */
    {STD_DICT(">f2", "False", "(2,)"), 4, NPY_ACCEPT_ALL,
     "dtype '>f2' is not supported (not little-endian; need"},
    {STD_DICT(">u2", "False", "(2,)"), 4, NPY_ACCEPT_ALL, "dtype '>u2' is not supported (not"},
    {STD_DICT(">i4", "False", "(2,)"), 8, NPY_ACCEPT_ALL, "dtype '>i4' is not supported (not"},
    {STD_DICT("<b1", "False", "(2,)"), 2, NPY_ACCEPT_ALL, "dtype '<b1' is not supported"},
    {STD_DICT("<i1", "False", "(2,)"), 2, NPY_ACCEPT_ALL, "dtype '<i1' is not supported"},
    {STD_DICT("<i8", "False", "(2,)"), 16, NPY_ACCEPT_ALL, "dtype '<i8' is not supported"},
    {STD_DICT("<u4", "False", "(2,)"), 8, NPY_ACCEPT_ALL, "dtype '<u4' is not supported"},
    {STD_DICT("?", "False", "(2,)"), 2, NPY_ACCEPT_ALL, "dtype '?' is not supported"},
    {STD_DICT("<f4", "False", "(2,)"), 8, NPY_ACCEPT(NPY_BOOL) | NPY_ACCEPT(NPY_U8),
     "dtype '<f4' is not supported (need '|b1' (bool) or '|u1' (uint8))"},
    {STD_DICT("<f8", "False", "(2,)"), 16,
     NPY_ACCEPT(NPY_F32) | NPY_ACCEPT(NPY_F16) | NPY_ACCEPT(NPY_U16),
     "dtype '<f8' is not supported (need '<f4' (float32), '<f2' (float16) or '<u2' (uint16))"},
    /* data sizes name the dtype */
    {STD_DICT("<f2", "False", "(2, 3)"), 11, NPY_ACCEPT_ALL,
     "truncated: data is 11 bytes but shape (2, 3) needs 12 (float16)"},
    {STD_DICT("<f2", "False", "(2, 3)"), 24, NPY_ACCEPT_ALL,
     "trailing bytes: data is 24 bytes but shape (2, 3) needs 12 (float16)"},
    {STD_DICT("|b1", "False", "(5,)"), 4, NPY_ACCEPT_ALL, "truncated: data is 4 bytes"},
    {STD_DICT("|b1", "False", "(5,)"), 20, NPY_ACCEPT_ALL, "needs 5 (bool)"},
    {STD_DICT("|u1", "False", "(0, 3)"), 1, NPY_ACCEPT_ALL, "trailing bytes"},
    {STD_DICT("<u2", "False", "(3,)"), 5, NPY_ACCEPT_ALL, "needs 6 (uint16)"},
    {STD_DICT("<i4", "False", "(3,)"), 13, NPY_ACCEPT_ALL, "needs 12 (int32)"},
    /* order, rank, overflow */
    {STD_DICT("<f2", "True", "(2, 3)"), 12, NPY_ACCEPT_ALL, "fortran_order is True"},
    {STD_DICT("|b1", "True", "(2, 3)"), 6, NPY_ACCEPT_ALL, "fortran_order is True"},
    {STD_DICT("|b1", "False", "()"), 1, NPY_ACCEPT_ALL, "rank 0 is not supported"},
    {STD_DICT("<u2", "False", "(1, 1, 1, 1, 2)"), 4, NPY_ACCEPT_ALL, "rank 5 is not supported"},
    {STD_DICT("|u1", "False", "(9223372036854775807, 2)"), 8, NPY_ACCEPT_ALL, "overflows"},
    {STD_DICT("<f2", "False", "(4611686018427387904, 2)"), 8, NPY_ACCEPT_ALL, "overflows"},
    {STD_DICT("<i4", "False", "(65536, 65536, 65536, 65536)"), 8, NPY_ACCEPT_ALL, "overflows"},
    {STD_DICT("|b1", "False", "(2, -3)"), 6, NPY_ACCEPT_ALL, "negative dimension"},
};

START_TEST(test_typed_rejected)
{
    const char *path = make_file("typed_rejected.npy", 1, 0, typed_rejected[_i].dict,
                                 typed_rejected[_i].data_bytes);
    npy_data a;
    char err[512] = "";
    ck_assert_msg(npy_read(path, typed_rejected[_i].accept, 1, NULL, &a, err, sizeof err) != 0,
                  "%s was accepted", typed_rejected[_i].dict);
    ck_assert_msg(strstr(err, path) != NULL, "message does not name the file: %s", err);
    ck_assert_msg(strstr(err, typed_rejected[_i].fragment) != NULL, "message lacks '%s': %s",
                  typed_rejected[_i].fragment, err);
    ck_assert_ptr_null(a.data);
    ck_assert_int_eq(a.ndim, 0);
    /* the in-memory parser agrees */
    size_t size;
    unsigned char *bytes = read_bytes(path, &size);
    ck_assert_int_ne(
        npy_parse("mem.npy", bytes, size, typed_rejected[_i].accept, &a, err, sizeof err), 0);
    ck_assert_msg(strstr(err, typed_rejected[_i].fragment) != NULL, "%s", err);
    free(bytes);
}
END_TEST

/* Prefixes and header mutations of a float16 and a bool file, as for float32. */
START_TEST(test_typed_prefixes_and_mutations)
{
    const npy_dtype dtypes[] = {NPY_F16, NPY_BOOL, NPY_I32};
    const npy_dtype dtype = dtypes[_i];
    const int64_t shape[2] = {3, 5};
    unsigned char data[60];
    for (size_t i = 0; i < sizeof data; ++i) {
        data[i] = (unsigned char)(dtype == NPY_BOOL ? i % 2 : i * 5);
    }
    char err[512] = "";
    const char *path = tmp_path("typed_valid.npy");
    ck_assert_msg(npy_write(path, dtype, data, shape, 2, err, sizeof err) == 0, "%s", err);
    size_t size;
    unsigned char *bytes = read_bytes(path, &size);
    size_t data_offset = 10 + (bytes[8] | (size_t)bytes[9] << 8);
    for (size_t len = 0; len < size; ++len) {
        unsigned char *prefix = malloc(len > 0 ? len : 1);
        ck_assert_ptr_nonnull(prefix);
        memcpy(prefix, bytes, len);
        npy_data a;
        ck_assert_msg(npy_parse("prefix.npy", prefix, len, NPY_ACCEPT_ALL, &a, err, sizeof err) !=
                          0,
                      "a %zu-byte prefix was accepted", len);
        ck_assert_msg(strstr(err, "prefix.npy") != NULL, "%s", err);
        free(prefix);
    }
    static const unsigned char replacements[] = {0,   ' ', '\'', '"', '(', ')', ',', ':',
                                                 '{', '}', '9',  '-', '<', '|', 'b', 0xff};
    for (size_t pos = 0; pos < data_offset; ++pos) {
        for (size_t r = 0; r < sizeof replacements; ++r) {
            unsigned char *copy = malloc(size);
            ck_assert_ptr_nonnull(copy);
            memcpy(copy, bytes, size);
            copy[pos] = replacements[r];
            npy_data a;
            if (npy_parse("mutant.npy", copy, size, NPY_ACCEPT_ALL, &a, err, sizeof err) == 0) {
                ck_assert_uint_eq(data_offset + a.count * npy_dtype_size(a.dtype), size);
                npy_data_free(&a);
            } else {
                ck_assert_msg(strstr(err, "mutant.npy") != NULL, "%s", err);
            }
            free(copy);
        }
    }
    free(bytes);
}
END_TEST

START_TEST(test_typed_argument_errors)
{
    char err[512] = "";
    npy_data a;
    const int64_t shape[1] = {2};
    const uint16_t words[2] = {0x3c00, 0xc000};
    const char *path = make_file("f2.npy", 1, 0, STD_DICT("<f2", "False", "(2,)"), 4);
    ck_assert_int_ne(npy_read(path, 0, 1, NULL, &a, err, sizeof err), 0); /* nothing accepted */
    ck_assert_msg(strstr(err, "invalid argument") != NULL, "%s", err);
    ck_assert_int_ne(npy_read(path, NPY_ACCEPT_ALL, 0, NULL, &a, err, sizeof err), 0);
    ck_assert_int_ne(npy_read(path, NPY_ACCEPT_ALL, 1, NULL, NULL, err, sizeof err), 0);
    ck_assert_int_ne(npy_parse("x", NULL, 5, NPY_ACCEPT_ALL, &a, NULL, 0), 0);
    ck_assert_int_ne(npy_parse("x", (const unsigned char *)"", 0, 0, &a, err, sizeof err), 0);
    ck_assert_int_ne(npy_read_f32_rank(path, 1, NULL, NULL, err, sizeof err), 0);
    const char *out = tmp_path("bad_dtype.npy");
    ck_assert_int_ne(npy_write(out, NPY_DTYPE_COUNT, words, shape, 1, err, sizeof err), 0);
    ck_assert_int_ne(npy_write(out, (npy_dtype)-1, words, shape, 1, err, sizeof err), 0);
    ck_assert_int_ne(npy_write(out, NPY_F16, NULL, shape, 1, err, sizeof err), 0);
    ck_assert_msg(strstr(err, out) != NULL, "%s", err);
    ck_assert_int_eq(access(out, F_OK), -1); /* failed writes leave no file */
    /* a '<f2' file holds float16 bit patterns: 1.0 and -2.0 */
    ck_assert_int_eq(npy_write(out, NPY_F16, words, shape, 1, err, sizeof err), 0);
    size_t size;
    unsigned char *bytes = read_bytes(out, &size);
    ck_assert_int_eq(memcmp(bytes + size - 4, "\x00\x3c\x00\xc0", 4), 0);
    free(bytes);
    npy_data_free(NULL);
}
END_TEST

/* ---- main --------------------------------------------------------------------------- */

static void remove_tmp_dir(void)
{
    DIR *dir = opendir(tmp_dir);
    if (dir != NULL) {
        struct dirent *entry;
        while ((entry = readdir(dir)) != NULL) {
            if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) {
                remove(tmp_path(entry->d_name));
            }
        }
        closedir(dir);
    }
    rmdir(tmp_dir);
}

#define COUNT(array) ((int)(sizeof array / sizeof array[0]))

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/test_npy.XXXXXX",
             base != NULL && base[0] ? base : "/tmp");
    if (mkdtemp(tmp_dir) == NULL) {
        perror("test_npy: mkdtemp");
        return EXIT_FAILURE;
    }

    Suite *suite = suite_create("npy");
    TCase *tc = tcase_create("npy");
    tcase_add_loop_test(tc, test_round_trip, 0, COUNT(round_trip_shapes));
    tcase_add_test(tc, test_writer_header);
    tcase_add_test(tc, test_little_endian_bytes);
    tcase_add_loop_test(tc, test_accepted_headers, 0, COUNT(accepted));
    tcase_add_loop_test(tc, test_rejected_headers, 0, COUNT(rejected));
    tcase_add_test(tc, test_bad_magic_and_truncation);
    tcase_add_test(tc, test_prefixes_and_mutations);
    tcase_add_test(tc, test_io_errors);
    tcase_add_test(tc, test_special_files);
    tcase_add_test(tc, test_min_rank);
    tcase_add_loop_test(tc, test_dtype_round_trip, 0, COUNT(all_dtypes));
    tcase_add_test(tc, test_dtype_names);
    tcase_add_loop_test(tc, test_typed_files, 0, COUNT(typed_files));
    tcase_add_loop_test(tc, test_typed_rejected, 0, COUNT(typed_rejected));
    tcase_add_loop_test(tc, test_typed_prefixes_and_mutations, 0, 3);
    tcase_add_test(tc, test_typed_argument_errors);
    suite_add_tcase(suite, tc);

    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    remove_tmp_dir();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
