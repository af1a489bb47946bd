/*
 * cli.h: what the files of the weightmap tool share. The tool uses only the library's public
 * header (weightmap.h); scripts/check-layering.sh checks that.
 *
 * Files: main.c (dispatch, usage and every command's --help, from the table); commands.c (THE
 * command table: names, summaries, options with their defaults and ranges, an example and the
 * handler of every command); util.c (the one option parser and the output helpers); one file per
 * command family: info.c, load.c (load, check), demo.c, probe.c, cat.c, makemodel.c, budget.c (fit,
 * swap), and the tracer's command next to its interposer (tools/trace/). A command file names only
 * what this header declares, never another command file's names.
 */
#ifndef WM_CLI_H
#define WM_CLI_H

#include "weightmap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---- the command table (commands.c) ---- */

typedef enum cli_kind {
    CLI_FLAG, /* --json: no value */
    CLI_NUM,  /* --cycles N: a whole number in [min, max] */
    CLI_SIZE, /* --max-buffer BYTES: 4096, 0x1000, 512M, 1GiB; in [min, max] */
    CLI_TEXT  /* --mode M: a word the command checks */
} cli_kind;

typedef struct cli_option {
    const char *name; /* without the dashes: "cycles" is --cycles */
    cli_kind kind;
    const char *value; /* the value's name in help: "N", "heap|mmap|mmap-private" */
    bool optional;     /* the value may be left out, and is given only as --name=VALUE */
    bool required;     /* the command refuses to run without it */
    uint64_t min, max; /* CLI_NUM and CLI_SIZE: the range cli_value_u64 accepts */
    const char *def;   /* the default as help prints it; NULL: none (off, for a flag) */
    const char *help;  /* one line */
    bool absent;       /* this build lacks what it needs (check --ggml without the ggml bridge):
                          --help and the usage leave it out; given, the handler says how to get it */
} cli_option;

typedef struct cli_command {
    const char *name;
    const char *args;       /* the positional arguments: "FILE", "OUT", "-- CMD ARGS..." */
    const char *summary;    /* one line */
    const char *about;      /* a paragraph for --help; NULL: the summary alone */
    const cli_option *opts; /* ends with an entry whose name is NULL */
    const char *example;
    /* Options end at the first argument that is not one (trace: what follows is CMD and its
     * own arguments, --help among them). */
    bool options_end_at_arg;
    int (*run)(int argc, char **argv); /* argv: the arguments after the command's name */
} cli_command;

/* The commands, in the order usage lists them; ends with an entry whose name is NULL. */
extern const cli_command cli_commands[];
/* The entry named `name`, or NULL. */
const cli_command *cli_command_find(const char *name);

int cmd_info(int argc, char **argv);       /* info.c */
int cmd_load(int argc, char **argv);       /* load.c */
int cmd_check(int argc, char **argv);      /* load.c */
int cmd_demo(int argc, char **argv);       /* demo.c */
int cmd_probe(int argc, char **argv);      /* probe.c */
int cmd_cat(int argc, char **argv);        /* cat.c */
int cmd_make_model(int argc, char **argv); /* makemodel.c */
int cmd_fit(int argc, char **argv);        /* budget.c */
int cmd_swap(int argc, char **argv);       /* budget.c */
int cmd_trace(int argc, char **argv);      /* the tracer's command, beside tools/trace/wmtrace.c */

/* ---- the option parser (util.c), the one every command's handler uses ----
 *
 *     cli_args p;
 *     cli_args_init(&p, "load", argc, argv);
 *     for (int k; (k = cli_next(&p)) != CLI_END;) {
 *         if (k == CLI_ERROR) return 2;
 *         if (k == CLI_ARG) ... p.value is a positional argument ...
 *         else if (cli_is(&p, "cycles") && cli_value_u64(&p, &n)) return 2;
 *     }
 *
 * Options are written --name VALUE or --name=VALUE; an option the command's entry does not list,
 * a missing value ("load: --mode needs a value (heap|mmap|mmap-private)") or a value given to a
 * flag is a usage error, printed by cli_next. "--" ends the options. */

enum { CLI_END, CLI_OPTION, CLI_ARG, CLI_ERROR };

typedef struct cli_args {
    const cli_command *cmd;
    int argc;
    char **argv;
    int i;
    const cli_option *opt; /* CLI_OPTION: the option */
    const char *value;     /* CLI_OPTION: its value (NULL: none); CLI_ARG: the argument */
    bool no_more_options;  /* after "--" */
} cli_args;

void cli_args_init(cli_args *p, const char *command, int argc, char **argv);
int cli_next(cli_args *p);
/* The option just read is --name. */
bool cli_is(const cli_args *p, const char *name);
/* The value of the CLI_NUM or CLI_SIZE option just read, checked against its range: 0, or 2
 * after the usage error "load: bad --cycles '-1': expected 1..100000". */
int cli_value_u64(const cli_args *p, uint64_t *out);
/* For a value the command checks itself: prints "CMD: bad --NAME 'VALUE': expected WHAT" and
 * returns 2. */
int cli_bad_value(const cli_args *p, const char *expected);

/* ---- help (main.c prints them from the table) ---- */

void cli_help_command(FILE *out, const cli_command *c);
void cli_help_usage(FILE *out);

/* ---- output and errors (util.c) ---- */

void cli_json_string(FILE *out, const char *s, size_t n);
void cli_json_cstr(FILE *out, const char *s);
const char *cli_bytes(uint64_t b, char buf[32]);
/* Prints "weightmap: <err->msg>" and returns 1. */
int cli_fail(const wm_error *err);
/* Prints "weightmap: <message>" and a pointer to the current command's --help; returns 2. */
int cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The command being run (main.c sets it), for the hint cli_usage prints. */
void cli_set_command(const char *name);
/* Parses "123", "0x10", "512M", "1GiB". */
bool cli_parse_u64(const char *s, uint64_t *out);
/* Seconds on the monotonic clock (for the time between two calls). */
double cli_now_s(void);
/* The type named `name` if tensors can be converted to it (f32, f16, bf16, f64: the types that
 * convert to themselves), else WM_TYPE_INVALID. */
wm_type cli_target_type(const char *name);
/* Opens FILE as every command does: as wm_file_open (a path to one shard or split part is that
 * file alone; an index is its set), or with --set (`set`) as wm_file_open_set (the whole set a
 * shard or part belongs to). */
wm_status cli_open(const char *path, bool set, wm_file **out, wm_error *err);
/* For messages: the conversion targets, "f32, f16, bf16, f64". */
#define CLI_TARGETS "f32, f16, bf16, f64"

/* ---- shared by commands (makemodel.c) ---- */

/* Writes the deterministic model make-model writes (GGUF) of at most `size` bytes to `path`.
 * Returns 0, or 1 after one line on stderr. */
int cli_make_default_model(const char *path, uint64_t size);

/* ---- shared by load, check and demo (load.c) ---- */

/* Another way for check to load (--ggml: the ggml bridge, cli/ggml.c): `load` makes a handle
 * and says its model, `verify` reads every tensor back that way and compares it with the file,
 * `release` frees the handle (and the model). */
typedef struct cli_via {
    const char *name;
    wm_status (*load)(wm_file *f, const wm_load_options *o, void **handle, const wm_model **model,
                      wm_error *err);
    wm_status (*verify)(void *handle, wm_error *err);
    void (*release)(void *handle);
} cli_via;
/* The optional ways of check, each built with its bridge: CMake defines WM_CLI_GGML or
 * WM_CLI_LLAMA then, and CLI_HAVE_GGML / CLI_HAVE_LLAMA say so (1 or 0). Not weak symbols:
 * Mach-O's linker refuses an undefined one that no library defines (the Darwin lane links the
 * CLI). CLI_GGML_VIA: cli/ggml.c's way through the ggml bridge, or NULL. */
#ifdef WM_CLI_GGML
#define CLI_HAVE_GGML 1
extern const cli_via cli_ggml_via;
#define CLI_GGML_VIA (&cli_ggml_via)
#else
#define CLI_HAVE_GGML 0
#define CLI_GGML_VIA ((const cli_via *)0)
#endif
/* What check --llama and swap --llama share. What the trimmed footprint may grow over the
 * cycles: llama.cpp's own small blocks fragment glibc's heap by a few KiB a cycle (measured the
 * same with llama_model_load_from_file); a weight buffer left behind is the model's size. Under
 * AddressSanitizer freed memory sits in its quarantine, which malloc_trim cannot give back: the
 * footprint is not judged there (said in the output). */
#define CLI_LLAMA_SLACK ((int64_t)1 << 20)
#if defined(__SANITIZE_ADDRESS__)
#define CLI_LLAMA_JUDGE_FOOTPRINT 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CLI_LLAMA_JUDGE_FOOTPRINT 0
#endif
#endif
#ifndef CLI_LLAMA_JUDGE_FOOTPRINT
#define CLI_LLAMA_JUDGE_FOOTPRINT 1
#endif
/* llama.cpp's log silenced, unless WM_LLAMA_LOG=1 (cli/llama.c; with the bridge only). */
void cli_llama_log_quiet(void);
/* One decode step of model m (a struct llama_model) from BOS: the likeliest next token, and its
 * text into piece (cap bytes, NUL-terminated; NULL: not asked); -1 where llama.cpp could not
 * decode (cli/llama.c; with the bridge only). */
struct llama_model;
int cli_llama_decode_one(struct llama_model *m, char *piece, size_t cap);

/* check --llama (cli/llama.c, with the llama.cpp bridge): `cycles` loads into llama.cpp through
 * wm_llama_load, one decode step each, the verdict; exit 0 or 1. Without the bridge a stand-in
 * that is never reached (load.c refuses --llama first, on CLI_HAVE_LLAMA) and returns 2. */
/* swap --llama (cli/llama_swap.c): the files as llama.cpp models in rotation through a pool
 * (wm_llama_pool_get), `mode` llama.cpp's load mode by name (NULL: none); the verdict; exit 0, 1
 * or 2. Without the bridge a stand-in that is never reached (budget.c refuses first). */
#ifdef WM_CLI_LLAMA
#define CLI_HAVE_LLAMA 1
int cli_check_llama(const char *path, unsigned cycles, bool json, unsigned threads);
int cli_swap_llama(const char *const *files, unsigned n, const char *mode, uint64_t cycles,
                   uint64_t budget, bool json, unsigned threads);
#else
#define CLI_HAVE_LLAMA 0
#define cli_check_llama(path, cycles, json, threads)                                               \
    ((void)(path), (void)(cycles), (void)(json), (void)(threads), 2)
#define cli_swap_llama(files, n, mode, cycles, budget, json, threads)                              \
    ((void)(files), (void)(n), (void)(mode), (void)(cycles), (void)(budget), (void)(json),         \
     (void)(threads), 2)
#endif
/* check on `path` (opened by cli_open with `set`): every mode, `cycles` cycles, the verdict;
 * exit status 0, 1. With `via`, the loads go that way and each cycle verifies every tensor
 * through it. */
int cli_check_file(const char *path, bool set, unsigned cycles, bool json, unsigned threads,
                   const cli_via *via);

#endif
