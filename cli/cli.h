/*
 * cli.h: what the files of the weightmap tool share (output helpers and command entry points).
 * The tool uses only the public header of the library.
 */
#ifndef WM_CLI_H
#define WM_CLI_H

#include "weightmap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

void cli_json_string(FILE *out, const char *s, size_t n);
void cli_json_cstr(FILE *out, const char *s);
const char *cli_bytes(uint64_t b, char buf[32]);
/* Prints "weightmap: <err->msg>" and returns 1. */
int cli_fail(const wm_error *err);
/* Prints a usage error and returns 2. */
int cli_usage(const char *fmt, ...);
/* Parses "123", "0x10", "512M", "1GiB". */
bool cli_parse_u64(const char *s, uint64_t *out);
/* The type named `name` if tensors can be converted to it (f32, f16, bf16, f64: the types that
 * convert to themselves), else WM_TYPE_INVALID. */
wm_type cli_target_type(const char *name);
/* For messages: the conversion targets, "f32, f16, bf16, f64". */
#define CLI_TARGETS "f32, f16, bf16, f64"

int cmd_make_model(int argc, char **argv);
int cmd_load(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_trace(int argc, char **argv); /* tools/trace.c */

/* Further commands (load, check, probe, demo, cat) register here: a NULL-terminated table
 * defined in tools/commands.c. */
typedef struct cli_command {
    const char *name;
    int (*fn)(int argc, char **argv);
} cli_command;
extern const cli_command cli_commands[];

#endif
