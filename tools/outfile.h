/* All-or-nothing output files of `clattn run` and `clattn heatmap`: each output goes to
 * a temporary file next to it first, then is renamed over it; see tools/outfile.c. */
#ifndef CLATTN_TOOLS_OUTFILE_H
#define CLATTN_TOOLS_OUTFILE_H

#include "npy.h"

#include <stdint.h>

/* Whether `a` and `b` name the same file (same text, same inode, or the same new name
 * in the same folder). */
int same_file(const char *a, const char *b);

/* 0 if `path` may be replaced (new, or a regular file, in a writable folder); else
 * prints why and returns an exit status. */
int check_output_file(const char *path);

/* Creates a new file "PATH.clattn-tmpN" next to `path` with `create` (which must fail
 * with EEXIST if the name is taken); *name receives the malloc'd name. 0, or -1 with
 * errno set. */
int create_next_to(const char *path, int (*create)(const char *name, void *arg), void *arg,
                   char **name);

/* Renames `tmp` onto `path` (backup: see tools/outfile.c; may be NULL). 0, or an exit
 * status after printing why. */
int replace_file(const char *tmp, const char *path, char **backup);

/* One output file: its content and where it goes. */
typedef struct output_file {
    const char *path;
    npy_dtype dtype;
    const void *data;
    int64_t shape[4];
    int ndim;
} output_file;

enum { MAX_OUTPUTS = 4 };

/* Writes `n` (at most MAX_OUTPUTS) .npy outputs all-or-nothing; if one cannot be put in
 * place, those already replaced get their old content back. 0, or an exit status after
 * printing why. */
int write_outputs(const output_file *files, int n);

#endif
