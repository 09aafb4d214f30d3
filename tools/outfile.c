/* All-or-nothing output files of `clattn run` and `clattn heatmap`; see outfile.h. */
#define _POSIX_C_SOURCE 200809L /* lstat, stat, access, link */

#include "outfile.h"
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* The folder part of `path` ("." if it has none; malloc'd, NULL if out of memory). */
static char *folder_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t len = slash == NULL ? 0 : slash == path ? 1 : (size_t)(slash - path);
    char *folder = malloc(len + 2);
    if (folder != NULL) {
        if (slash == NULL) {
            strcpy(folder, ".");
        } else {
            memcpy(folder, path, len);
            folder[len] = '\0';
        }
    }
    return folder;
}

/* Whether `a` and `b` name the same file: the same text; the same (st_dev, st_ino) if
 * both exist; or, if neither exists, the same name in the same folder. */
int same_file(const char *a, const char *b)
{
    if (strcmp(a, b) == 0) {
        return 1;
    }
    struct stat sa, sb;
    int a_exists = stat(a, &sa) == 0, b_exists = stat(b, &sb) == 0;
    if (a_exists || b_exists) {
        return a_exists && b_exists && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    }
    const char *base_a = strrchr(a, '/'), *base_b = strrchr(b, '/');
    base_a = base_a != NULL ? base_a + 1 : a;
    base_b = base_b != NULL ? base_b + 1 : b;
    if (strcmp(base_a, base_b) != 0) {
        return 0;
    }
    char *folder_a = folder_of(a), *folder_b = folder_of(b);
    int same = folder_a != NULL && folder_b != NULL && stat(folder_a, &sa) == 0 &&
               stat(folder_b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    free(folder_a);
    free(folder_b);
    return same;
}

/* An output may be replaced: it is not there yet, or is a regular file (not a
 * symbolic link); and its folder is writable. Returns 0, or an exit status. */
int check_output_file(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            return cli_error("%s: is %s, not a regular file; refusing to replace it (name a new or "
                             "regular file)",
                             path, npy_file_kind(st.st_mode));
        }
    } else if (errno != ENOENT) {
        return cli_error("%s: cannot use it as an output: %s", path, strerror(errno));
    }
    char *folder = folder_of(path);
    if (folder == NULL) {
        return cli_error("out of memory");
    }
    int rc = 0;
    if (access(folder, W_OK | X_OK) != 0) {
        rc = cli_error("%s: cannot create a temporary file in its folder '%s': %s", path, folder,
                       strerror(errno));
    }
    free(folder);
    return rc;
}

/* Creates a new file next to `path`, named "PATH.clattn-tmpN", with `create` (which
 * must fail with EEXIST if the name is taken); *name receives the malloc'd name.
 * Returns 0, or -1 with errno set. */
int create_next_to(const char *path, int (*create)(const char *name, void *arg), void *arg,
                   char **name)
{
    size_t len = strlen(path) + 32;
    char *candidate = malloc(len);
    if (candidate == NULL) {
        errno = ENOMEM;
        return -1;
    }
    for (int i = 0; i < 1000; ++i) {
        snprintf(candidate, len, "%s.clattn-tmp%d", path, i);
        errno = 0;
        if (create(candidate, arg) == 0) {
            *name = candidate;
            return 0;
        }
        if (errno != EEXIST) {
            break;
        }
    }
    int saved = errno;
    free(candidate);
    errno = saved;
    return -1;
}

typedef struct npy_content {
    const output_file *file;
    char message[512]; /* set when writing fails */
} npy_content;

/* create_next_to() callback: a new file holding an npy_content. */
static int create_npy(const char *name, void *arg)
{
    npy_content *c = arg;
    const output_file *o = c->file;
    c->message[0] = '\0';
    FILE *f = fopen(name, "wbx"); /* C11 exclusive create: never clobbers a file */
    if (f == NULL) {
        return -1;
    }
    int rc = npy_write_stream(f, o->path, o->dtype, o->data, o->shape, o->ndim, c->message,
                              sizeof c->message);
    if (fclose(f) != 0 && rc == 0) {
        rc = -1;
        snprintf(c->message, sizeof c->message, "%s: write failed: %s", o->path, strerror(errno));
    }
    if (rc != 0) {
        remove(name);
        errno = 0; /* not EEXIST: stop trying other names */
    }
    return rc;
}

/* create_next_to() callback: a second hard link to the file `arg`. */
static int create_link(const char *name, void *arg)
{
    return link((const char *)arg, name);
}

/* Writes an output to a new temporary file next to its path; *tmp receives its name. */
static int write_temporary(const output_file *file, char **tmp)
{
    npy_content content = {file, ""};
    if (create_next_to(file->path, create_npy, &content, tmp) == 0) {
        return 0;
    }
    if (content.message[0] != '\0') {
        return cli_error("%s", content.message);
    }
    return cli_error("%s: cannot create a temporary file next to it: %s", file->path,
                     strerror(errno));
}

/* Renames the temporary file `tmp` onto `path`. If `backup` is not NULL and `path`
 * exists, it is first hard-linked to a new name in *backup (NULL if that fails), so
 * that the old file can be put back. Returns 0, or an exit status. */
int replace_file(const char *tmp, const char *path, char **backup)
{
    struct stat st;
    if (backup != NULL && lstat(path, &st) == 0 &&
        create_next_to(path, create_link, (void *)path, backup) != 0) {
        *backup = NULL; /* e.g. a file system without hard links: no way back */
    }
    if (rename(tmp, path) != 0) {
        int saved = errno;
        if (backup != NULL && *backup != NULL) {
            remove(*backup);
            free(*backup);
            *backup = NULL;
        }
        return cli_error("%s: cannot rename the temporary file onto it: %s", path, strerror(saved));
    }
    return 0;
}

/* Writes the outputs all-or-nothing: each goes to a temporary file first, then they are
 * renamed over their destinations in order; if a rename fails, the destinations
 * already replaced get their old content back (or are removed if they did not
 * exist). */
int write_outputs(const output_file *files, int n)
{
    char *tmp[MAX_OUTPUTS] = {NULL}, *backup[MAX_OUTPUTS] = {NULL};
    int existed[MAX_OUTPUTS] = {0};
    int rc = 0, renamed = 0;
    for (int i = 0; i < n && rc == 0; ++i) {
        rc = write_temporary(&files[i], &tmp[i]);
    }
    for (int i = 0; i < n && rc == 0; ++i) {
        struct stat st;
        existed[i] = lstat(files[i].path, &st) == 0;
        /* the last one needs no way back: nothing can fail after it */
        rc = replace_file(tmp[i], files[i].path, i + 1 < n ? &backup[i] : NULL);
        if (rc == 0) {
            free(tmp[i]); /* renamed: nothing left to remove */
            tmp[i] = NULL;
            renamed = i + 1;
        }
    }
    for (int i = renamed - 1; rc != 0 && i >= 0; --i) { /* undo */
        if (backup[i] != NULL && rename(backup[i], files[i].path) == 0) {
            free(backup[i]);
            backup[i] = NULL;
        } else if (backup[i] != NULL || existed[i] || remove(files[i].path) != 0) {
            cli_error("%s: was already replaced and could not be restored", files[i].path);
        }
    }
    for (int i = 0; i < n; ++i) {
        if (backup[i] != NULL) {
            remove(backup[i]);
            free(backup[i]);
        }
        if (tmp[i] != NULL) {
            remove(tmp[i]);
            free(tmp[i]);
        }
    }
    return rc;
}
