/* What more than one subcommand of the `clattn` program uses: messages, opening a
 * context, option parsing, the mask names and device strings; see cli.h. */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

CLI_PRINTF(2, 3)
int usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", command);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", command);
    return EXIT_USAGE;
}

/* "clattn COMMAND" of the running subcommand (cli_set_command), or "clattn" */
static char command_name[32] = "clattn";

void cli_set_command(const char *command)
{
    snprintf(command_name, sizeof command_name, "clattn %s", command);
}

CLI_PRINTF(1, 2)
int cli_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", command_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return EXIT_FAILURE;
}

/* A failed library call: its status and the context's message. */
int library_error(const char *call, clattn_status status, const clattn_context *ctx)
{
    const char *message = clattn_last_error_message(ctx);
    return cli_error("%s failed: %s%s%s", call, clattn_status_string(status),
                     message[0] != '\0' ? ": " : "", message);
}

clattn_status open_context(const char *device, clattn_context **ctx)
{
    clattn_context_options options = {0}; /* fields are only ever appended */
    options.device = device;
    clattn_status status = clattn_context_create(&options, ctx);
    if (status != CLATTN_SUCCESS) {
        library_error("clattn_context_create", status, NULL);
    }
    return status;
}

int cli_lookup(const char *text, const char *const *names)
{
    for (int i = 0; names[i] != NULL; ++i) {
        if (strcmp(text, names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

const char *const cli_mask_names[] = {"none", "causal", "causal-bottom-right", "no-self",
                                      NULL}; /* in clattn_mask order */

enum { PARSE_OK, PARSE_HELP, PARSE_ERROR };

const option *cli_find_option(const char *arg, const option *options, size_t n)
{
    if (strncmp(arg, "--", 2) != 0) {
        return NULL;
    }
    const char *eq = strchr(arg, '=');
    const size_t len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
    for (size_t i = 0; i < n; ++i) {
        if (strlen(options[i].name) == len && strncmp(options[i].name, arg, len) == 0) {
            return &options[i];
        }
    }
    return NULL;
}

/* Accepts "--name VALUE", "--name=VALUE" and flags; -h/--help prints `usage`. An
 * option given twice, or with an empty value, is a usage error. At most 32 options. */
static int parse_options(const char *command, const char *usage, int argc, char **argv,
                         const option *options, size_t n_options)
{
    unsigned long seen = 0; /* bit j: options[j] was given */
    for (int i = 0; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(usage, stdout);
            return PARSE_HELP;
        }
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        const option *opt = cli_find_option(arg, options, n_options);
        if (opt == NULL) {
            usage_error(command, arg[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'",
                        arg);
            return PARSE_ERROR;
        }
        const size_t j = (size_t)(opt - options);
        if (seen & 1ul << j) {
            usage_error(command, "option '%s' is given more than once", opt->name);
            return PARSE_ERROR;
        }
        seen |= 1ul << j;
        if (opt->value == NULL) {
            if (eq != NULL) {
                usage_error(command, "option '%s' takes no value", opt->name);
                return PARSE_ERROR;
            }
            *opt->flag = 1;
            continue;
        }
        const char *value = eq != NULL ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (value == NULL) {
            usage_error(command, "option '%s' needs a value", opt->name);
            return PARSE_ERROR;
        }
        if (value[0] == '\0') {
            usage_error(command, "option '%s' needs a non-empty value", opt->name);
            return PARSE_ERROR;
        }
        if (eq == NULL && cli_find_option(value, options, n_options) != NULL) {
            /* "--block-table --out o.npy": the value forgotten, the next option taken */
            usage_error(command,
                        "option '%s' needs a value before the next option (%s=VALUE passes a "
                        "value that looks like an option)",
                        opt->name, opt->name);
            return PARSE_ERROR;
        }
        *opt->value = value;
    }
    return PARSE_OK;
}

/* parse_options() mapped to "continue" (-1) or an exit status. */
int parse_command_line(const char *command, const char *usage, int argc, char **argv,
                       const option *options, size_t n_options)
{
    switch (parse_options(command, usage, argc, argv, options, n_options)) {
    case PARSE_OK: return -1;
    case PARSE_HELP: return EXIT_SUCCESS;
    default: return EXIT_USAGE;
    }
}

/* A string property of `device`, or of `platform` when device is NULL (malloc'd;
 * NULL on failure). */
char *cl_info_string(cl_platform_id platform, cl_device_id device, cl_uint param)
{
    size_t size = 0;
    cl_int rc = device != NULL ? clGetDeviceInfo(device, param, 0, NULL, &size)
                               : clGetPlatformInfo(platform, param, 0, NULL, &size);
    char *text = rc == CL_SUCCESS ? malloc(size + 1) : NULL;
    if (text == NULL) {
        return NULL;
    }
    rc = device != NULL ? clGetDeviceInfo(device, param, size, text, NULL)
                        : clGetPlatformInfo(platform, param, size, text, NULL);
    if (rc != CL_SUCCESS) {
        free(text);
        return NULL;
    }
    text[size] = '\0';
    return text;
}
