/* What more than one subcommand of the `clattn` program uses: messages and exit
 * statuses, opening a context, option parsing, the mask names and device strings;
 * see tools/cli.c. */
#ifndef CLATTN_TOOLS_CLI_H
#define CLATTN_TOOLS_CLI_H

#include "clattn.h"

#include <stddef.h>

#if defined(__GNUC__)
#define CLI_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define CLI_PRINTF(fmt_index, first_arg)
#endif

enum { EXIT_USAGE = 2 };

/* The CLI's names of the masks, indexed by clattn_mask, NULL-terminated: one spelling
 * for `run --mask`, `heatmap --mask` and `bench --shapes`. */
extern const char *const cli_mask_names[];

/* Index of `text` in the NULL-terminated `names` (an option's choices), or -1. */
int cli_lookup(const char *text, const char *const *names);

/* Prints "COMMAND: MESSAGE" and "Try 'COMMAND --help'." to stderr; returns
 * EXIT_USAGE. */
CLI_PRINTF(2, 3)
int usage_error(const char *command, const char *fmt, ...);

/* Names the running subcommand ("run": cli_error then prints "clattn run: MESSAGE", as
 * usage_error does with its command); main() calls it before dispatching. */
void cli_set_command(const char *command);

/* Prints "clattn COMMAND: MESSAGE" (the command of cli_set_command; "clattn: MESSAGE"
 * before any) to stderr; returns EXIT_FAILURE. */
CLI_PRINTF(1, 2)
int cli_error(const char *fmt, ...);

/* A failed library call: its status and the context's message (ctx may be NULL).
 * Returns EXIT_FAILURE. */
int library_error(const char *call, clattn_status status, const clattn_context *ctx);

/* A context on `device` ("P:D", a name substring, or NULL for the default); prints why
 * on failure. */
clattn_status open_context(const char *device, clattn_context **ctx);

/* One option of a command line. */
typedef struct option {
    const char *name;   /* "--q" */
    const char **value; /* receives the argument; NULL for a flag */
    int *flag;          /* set to 1 for a flag */
} option;

/* The option of `options` that `arg` ("--name" or "--name=VALUE") names, or NULL. */
const option *cli_find_option(const char *arg, const option *options, size_t n);

/* Parses argv (after the subcommand) against `options`: "--name VALUE",
 * "--name=VALUE" and flags; -h/--help prints `usage`. An option given twice, or with
 * an empty value, is a usage error (messages start with `command`). At most 32
 * options. Returns -1 to go on, or an exit status. */
int parse_command_line(const char *command, const char *usage, int argc, char **argv,
                       const option *options, size_t n_options);

/* A string property of `device`, or of `platform` when device is NULL (malloc'd;
 * NULL on failure). */
char *cl_info_string(cl_platform_id platform, cl_device_id device, cl_uint param);

#endif
