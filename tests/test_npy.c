/* The .npy reader and writer of tools/npy.c: round trips of every supported rank,
 * the writer's header layout, versions 2.0 and 3.0, and every kind of malformed file
 * rejected with a message that names the file. No OpenCL needed. */
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
    suite_add_tcase(suite, tc);

    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    remove_tmp_dir();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
