/* `clattn heatmap`: the attention weights of one (batch, head) as an SVG heatmap; see
 * tools/heatmap.c. */
#ifndef CLATTN_TOOLS_HEATMAP_H
#define CLATTN_TOOLS_HEATMAP_H

/* Runs the heatmap subcommand on argv (after "heatmap"); returns the exit status. */
int cmd_heatmap(int argc, char **argv);

/* Output-file helpers shared with `clattn run` (defined in tools/clattn.c). */

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

/* Renames `tmp` onto `path` (backup: see tools/clattn.c; may be NULL). 0, or an exit
 * status after printing why. */
int replace_file(const char *tmp, const char *path, char **backup);

#endif
