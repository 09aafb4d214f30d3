#define _POSIX_C_SOURCE 200809L /* strtok_r */
/* clattn bench's --shapes list: each entry b,h_q,h_kv,n_q,n_kv,d_k,d_v[,mask[,alg[,dtype
 * [,pageN][,inorder|roundrobin][,int8][,half][,varlen|padded][,dropP][,winL][,bshd]]]] into bench
 * cases (bench.h; the grammar is in `clattn bench --help`), and what a case's tokens make:
 * its name in the table and --json, its pool's block table. */
#include "bench.h"
#include "cli.h"

#include <clattn.h>
#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses LIST into cases (an algorithm "both" gives two cases). Returns the count, or
 * -1 with a message. */
int parse_shapes(const char *list, bench_case *cases, int max)
{
    char *copy = malloc(strlen(list) + 1);
    if (!copy)
        return bench_fail("out of memory"), -1;
    strcpy(copy, list);
    int n = 0, entries = 0;
    char *save = NULL;
    for (char *spec = strtok_r(copy, ";", &save); spec; spec = strtok_r(NULL, ";", &save)) {
        while (*spec == ' ')
            spec++;
        for (size_t e = strlen(spec); e > 0 && spec[e - 1] == ' '; e--)
            spec[e - 1] = '\0'; /* "…, f16 ; …": spaces around the ';' */
        if (!*spec)
            continue;
        bench_case c = {0};
        c.window_left = -1;
        c.entry = ++entries;
        char mask[32] = "none", alg[16] = "both", dtype[16] = "f32", extra[48] = "";
        long long v[7];
        int sizes_end = -1, used = -1; /* where d_v and the tokens after the dtype end */
        int got = sscanf(
            spec, "%lld,%lld,%lld,%lld,%lld,%lld,%lld%n,%31[^,],%15[^,],%15[^,],%47s%n", &v[0],
            &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &sizes_end, mask, alg, dtype, extra, &used);
        int range = 0; /* a size past the 64-bit range: sscanf clamps it to the limit */
        for (int k = 0; k < got && k < 7; k++)
            range |= v[k] == LLONG_MAX || v[k] == LLONG_MIN;
        /* an empty field (",," or a trailing ",") would leave the fields after it at their
         * defaults: "1,…,8,,f16" is not f16 */
        const size_t len = strlen(spec);
        const int empty = strstr(spec, ",,") != NULL || (len > 0 && spec[len - 1] == ',');
        /* text no field took is not dropped silently: after d_v when no mask follows (" ,",
         * "64x"), after the tokens past the dtype (past extra's 47 characters, or after a
         * space) */
        const int left = (got == 7 && sizes_end >= 0 && spec[sizes_end] != '\0') ||
                         (got == 11 && (used < 0 || spec[used] != '\0'));
        const int m = cli_lookup(mask, cli_mask_names); /* (clattn_mask's order) */
        c.mask = m >= 0 ? (clattn_mask)m : CLATTN_MASK_NONE;
        int bad = got < 7 || range || empty || left || m < 0;
        char unknown[64];
        snprintf(unknown, sizeof unknown, "unknown mask '%s'", mask);
        const char *why = got < 7 ? "seven sizes first"
                          : range ? "a size out of range"
                          : empty ? "an empty field"
                          : left  ? "text no field takes (fields: separated by ',', tokens "
                                    "without spaces, at most 47 characters after the dtype)"
                          : bad   ? unknown
                                  : NULL;
        /* pageN (a paged K/V pool) and int8 (an int8 K/V cache), each at most once, in
         * either order; fused only */
        char *extra_save = NULL;
        for (char *tok = got >= 11 ? strtok_r(extra, ",", &extra_save) : NULL; tok && !bad;
             tok = strtok_r(NULL, ",", &extra_save)) {
            char *end = NULL;
            if (strcmp(tok, "int8") == 0 && !c.int8_kv) {
                c.int8_kv = 1;
            } else if (strcmp(tok, "half") == 0 && !c.half) {
                c.half = 1; /* desc.half_arithmetic */
            } else if ((strcmp(tok, "varlen") == 0 || strcmp(tok, "padded") == 0) && !c.ragged) {
                c.ragged = tok[0] == 'v' ? 1 : 2;
                bad = strcmp(alg, "backward") == 0;
                why = bad ? "varlen and padded time the forward call (not backward)" : why;
                continue; /* (either algorithm) */
            } else if (strncmp(tok, "drop", 4) == 0 && c.dropout == 0.0f) {
                c.dropout = strtof(tok + 4, &end);
                bad = !(c.dropout > 0.0f && c.dropout < 1.0f) || !end || *end != '\0';
                why = bad ? "dropP takes a dropout probability within (0, 1)" : why;
                continue; /* (any algorithm) */
            } else if (strncmp(tok, "win", 3) == 0 && c.window_left < 0) {
                c.window_left = isdigit((unsigned char)tok[3]) ? strtoll(tok + 3, &end, 10) : -1;
                bad = c.window_left < 0 || c.window_left >= ((int64_t)1 << 53) || !end ||
                      *end != '\0';
                why = bad ? "winL takes a window of 0 to 2^53 - 1 keys" : why;
                continue; /* (any algorithm) */
            } else if (strcmp(tok, "bshd") == 0 && !c.bshd) {
                c.bshd = 1; /* K/V [b, n_kv, h_kv, d] */
                bad = strcmp(alg, "backward") == 0;
                why = bad ? "bshd times the forward call (not backward)" : why;
                continue; /* (either algorithm) */
            } else if ((strcmp(tok, "inorder") == 0 || strcmp(tok, "roundrobin") == 0) &&
                       !c.page_order) { /* (needs pageN: checked below) */
                c.page_order = tok[0] == 'i' ? PAGES_INORDER : PAGES_ROUNDROBIN;
            } else if (strncmp(tok, "page", 4) == 0 && !c.page_size) {
                c.page_size = isdigit((unsigned char)tok[4]) ? strtoll(tok + 4, &end, 10) : 0;
                bad = c.page_size < 1 || c.page_size > ((int64_t)1 << 31) || !end || *end != '\0';
                why = bad ? "pageN takes a page size of 1 to 2^31 keys" : why;
            } else {
                bad = 1;
                why = "an unknown or repeated token (pageN, inorder or roundrobin, int8, half, "
                      "varlen, padded, dropP, winL, bshd: each once)";
            }
            if (!bad && strcmp(alg, "fused") != 0) {
                bad = 1;
                why = "pageN, its order, int8 and half run with the fused algorithm only";
            }
        }
        if (!bad && c.page_order && !c.page_size) {
            bad = 1;
            why = "inorder and roundrobin order a pool's pages: they need pageN";
        }
        if (!bad && got >= 11 && !c.int8_kv && !c.half && !c.page_size && !c.ragged &&
            c.dropout == 0.0f && c.window_left < 0 && !c.bshd) {
            bad = 1; /* an empty 11th field */
            why = "an empty field after the dtype";
        }
        if (!bad && c.ragged &&
            (v[3] != v[4] || v[0] > 64 || c.page_size || c.int8_kv || c.window_left >= 0 ||
             c.bshd)) {
            bad = 1;
            why = "varlen and padded need n_q = n_kv, at most 64 sequences, no pageN, int8, winL "
                  "or bshd";
        }
        for (int i = 0; i < 7 && !bad; i++) {
            bad = v[i] < (i == 3 || i == 4 ? 0 : 1);
            why = bad ? "sizes must be positive (n_q and n_kv may be 0)" : why;
        }
        if (!bad && v[1] % v[2] != 0) { /* (the library's rule too; said once, not per alg) */
            bad = 1;
            why = "h_q must be a multiple of h_kv";
        }
        if (!bad) {
            c.b = v[0], c.h_q = v[1], c.h_kv = v[2], c.n_q = v[3], c.n_kv = v[4];
            c.d_k = v[5], c.d_v = v[6];
        }
        const int both = strcmp(alg, "both") == 0;
        if (strcmp(dtype, "f32") == 0)
            c.dtype = CLATTN_FLOAT32;
        else if (strcmp(dtype, "f16") == 0)
            c.dtype = CLATTN_FLOAT16;
        else if (strcmp(dtype, "bf16") == 0)
            c.dtype = CLATTN_BFLOAT16;
        else if (!bad) {
            bad = 1;
            why = "dtype f32, f16 or bf16";
        }
        if (!bad && c.half && (c.dtype != CLATTN_FLOAT16 || c.int8_kv)) {
            bad = 1; /* (the library would run float32 and say so in the plan) */
            why = "half needs dtype f16 (Q, K and V float16) and no int8";
        }
        if (strcmp(alg, "backward") == 0)
            c.backward = 1;
        if (!bad && !both && !c.backward && strcmp(alg, "fused") != 0 &&
            strcmp(alg, "unfused") != 0) {
            bad = 1;
            why = "algorithm fused, unfused, both or backward";
        }
        if (bad || n + 1 + both > max) {
            bench_fail("bad --shapes entry '%s': %s (%s, at most %d cases)", spec,
                       bad && why ? why
                       : bad      ? "malformed"
                                  : "too many cases",
                       bench_shapes_grammar, max);
            free(copy);
            return -1;
        }
        if (both || c.backward || strcmp(alg, "fused") == 0) {
            c.algorithm = CLATTN_ALGORITHM_FUSED;
            cases[n++] = c;
        }
        if (both || strcmp(alg, "unfused") == 0) {
            c.algorithm = CLATTN_ALGORITHM_UNFUSED;
            cases[n++] = c;
        }
    }
    free(copy);
    if (n == 0)
        return bench_fail("--shapes names no case"), -1;
    return n;
}

const char *bench_case_name(const bench_case *c, char buf[BENCH_CASE_NAME])
{
    if (c->backward)
        return "backward";
    const char *alg = c->algorithm == CLATTN_ALGORITHM_FUSED ? "fused" : "unfused";
    if (c->ragged)
        snprintf(buf, BENCH_CASE_NAME, "%s/%s", alg, c->ragged == 1 ? "varlen" : "padded");
    else if (c->page_size)
        snprintf(buf, BENCH_CASE_NAME, "paged%lld%s%s", (long long)c->page_size,
                 c->page_order == PAGES_INORDER      ? "/inorder"
                 : c->page_order == PAGES_ROUNDROBIN ? "/roundrobin"
                                                     : "",
                 c->bshd ? "/bshd" : "");
    else if (c->bshd)
        snprintf(buf, BENCH_CASE_NAME, "%s/bshd", alg);
    return c->ragged || c->page_size || c->bshd ? buf : alg;
}

int32_t *bench_page_table(const bench_case *c, int64_t max_pages)
{
    const int64_t pages = c->b * max_pages;
    int32_t *table = malloc(sizeof(int32_t) * (size_t)(pages > 0 ? pages : 1));
    if (!table)
        return NULL;
    table[0] = 0; /* no keys, no pages: a one-entry table (a cl_mem is never empty) */
    for (int64_t i = 0; i < pages; i++) /* (entry i: sequence i / max_pages) */
        table[i] =
            (int32_t)(c->page_order == PAGES_ROUNDROBIN ? i % max_pages * c->b + i / max_pages : i);
    unsigned seed = 5;
    for (int64_t i = pages - 1; c->page_order == PAGES_SHUFFLED && i > 0; i--) {
        seed = seed * 1664525u + 1013904223u;
        const int64_t j = (int64_t)(seed >> 8) % (i + 1);
        const int32_t x = table[i];
        table[i] = table[j];
        table[j] = x;
    }
    return table;
}
