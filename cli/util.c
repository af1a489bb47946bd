/*
 * util.c: what every command of the tool shares: the one option parser (driven by the command's
 * entry in the table, commands.c), usage errors, JSON strings, sizes.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the option parser ---- */

static const char *current_command;

void cli_set_command(const char *name) { current_command = name; }

const cli_command *cli_command_find(const char *name) {
    for (const cli_command *c = cli_commands; c->name; c++)
        if (!strcmp(c->name, name)) return c;
    return NULL;
}

void cli_args_init(cli_args *p, const char *command, int argc, char **argv) {
    memset(p, 0, sizeof *p);
    p->cmd = cli_command_find(command);
    p->argc = argc;
    p->argv = argv;
}

/* The option of the command named by s + 2 (up to '=' or the end), or NULL. */
static const cli_option *find_option(const cli_command *c, const char *s, size_t len) {
    for (const cli_option *o = c->opts; o && o->name; o++)
        if (strlen(o->name) == len && !strncmp(o->name, s, len)) return o;
    return NULL;
}

/* What a value of o is, for messages: "N", "1..100000", "heap|mmap|mmap-private". */
static void value_words(const cli_option *o, char *buf, size_t cap) {
    if (o->kind == CLI_NUM)
        snprintf(buf, cap, "%" PRIu64 "..%" PRIu64, o->min, o->max);
    else if (o->kind == CLI_SIZE && o->min)
        snprintf(buf, cap, "a size of at least %" PRIu64 " byte%s (4096, 512M, 1G, 2T)", o->min,
                 o->min == 1 ? "" : "s");
    else if (o->kind == CLI_SIZE)
        snprintf(buf, cap, "a size in bytes (4096, 512M, 1G, 2T)");
    else
        snprintf(buf, cap, "%s", o->value ? o->value : "a value");
}

static int option(cli_args *p, const char *s) {
    const char *eq = strchr(s + 2, '=');
    size_t len = eq ? (size_t)(eq - s - 2) : strlen(s + 2);
    const cli_option *o = find_option(p->cmd, s + 2, len);
    if (!o) {
        cli_usage("%s: unknown option %.*s", p->cmd->name, (int)(len + 2), s);
        return CLI_ERROR;
    }
    p->opt = o;
    p->value = eq ? eq + 1 : NULL;
    if (o->kind == CLI_FLAG && eq && !o->optional) {
        cli_usage("%s: --%s takes no value", p->cmd->name, o->name);
        return CLI_ERROR;
    }
    if (o->kind != CLI_FLAG && !eq && !o->optional) {
        /* the next argument is the value, unless there is none or it is another option */
        const char *next = p->i < p->argc ? p->argv[p->i] : NULL;
        if (!next || (next[0] == '-' && next[1] == '-')) {
            char words[96];
            value_words(o, words, sizeof words);
            cli_usage("%s: --%s needs a value (%s)", p->cmd->name, o->name, words);
            return CLI_ERROR;
        }
        p->value = next;
        p->i++;
    }
    return CLI_OPTION;
}

int cli_next(cli_args *p) {
    p->opt = NULL;
    p->value = NULL;
    if (p->i >= p->argc) return CLI_END;
    const char *s = p->argv[p->i++];
    if (!p->no_more_options && !strcmp(s, "--")) {
        p->no_more_options = true;
        return cli_next(p);
    }
    if (p->no_more_options || s[0] != '-' || !s[1]) {
        p->value = s;
        return CLI_ARG;
    }
    if (s[1] != '-') {
        cli_usage("%s: unknown option %s (options are written --name)", p->cmd->name, s);
        return CLI_ERROR;
    }
    return option(p, s);
}

bool cli_is(const cli_args *p, const char *name) { return p->opt && !strcmp(p->opt->name, name); }

int cli_bad_value(const cli_args *p, const char *expected) {
    return cli_usage("%s: bad --%s '%s': expected %s", p->cmd->name, p->opt->name,
                     p->value ? p->value : "", expected);
}

/* Why `s` is no size (cli_parse_u64 refused it), for cli_bad_value's "expected ...": written as
 * a size (digits, a suffix cli_parse_u64 takes) but past 64 bits, or not a size at all. */
static const char *size_words(const char *s) {
    char *end;
    errno = 0;
    bool digits = s && *s >= '0' && *s <= '9';
    if (digits) strtoull(s, &end, 0);
    bool too_big = digits && errno == ERANGE;
    if (digits && !too_big) {
        if (*end && strchr("KkMmGgTtPp", *end)) end++;
        if (*end == 'i' || *end == 'B') end++;
        if (*end == 'B') end++;
        too_big = *end == 0; /* well written: only the value is too large */
    }
    if (too_big) return "a size that fits in 64 bits (at most 16 EiB)";
    return "a size: a whole number of bytes with an optional suffix K, M, G, T or P (powers of "
           "1024; KiB, KB also), e.g. 4096, 512M, 1G, 2T";
}

int cli_value_u64(const cli_args *p, uint64_t *out) {
    const cli_option *o = p->opt;
    uint64_t v = 0;
    bool ok;
    if (o->kind == CLI_NUM) { /* decimal digits only */
        char *end;
        errno = 0;
        unsigned long long n = strtoull(p->value, &end, 10);
        ok = p->value[0] >= '0' && p->value[0] <= '9' && !*end && !errno;
        v = n;
    } else {
        ok = cli_parse_u64(p->value, &v);
        if (!ok) /* the reason: not a size at all, or one past 16 EiB */
            return cli_bad_value(p, size_words(p->value));
    }
    if (!ok || v < o->min || v > o->max) {
        char words[96];
        value_words(o, words, sizeof words);
        return cli_bad_value(p, words);
    }
    *out = v;
    return 0;
}

/* ---- errors ---- */

int cli_fail(const wm_error *err) {
    fprintf(stderr, "weightmap: %s\n", err->msg);
    return 1;
}

int cli_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("weightmap: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (current_command)
        fprintf(stderr, "\n(weightmap %s --help lists its options)\n", current_command);
    else
        fputs("\n(weightmap --help lists the commands)\n", stderr);
    return 2;
}

void cli_json_string(FILE *out, const char *s, size_t n) {
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (c < 0x20)
                fprintf(out, "\\u%04x", c);
            else
                fputc(c, out);
        }
    }
    fputc('"', out);
}

void cli_json_cstr(FILE *out, const char *s) { cli_json_string(out, s, strlen(s)); }

const char *cli_bytes(uint64_t b, char buf[32]) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    if (i == 0)
        snprintf(buf, 32, "%" PRIu64 " B", b);
    else
        snprintf(buf, 32, "%.1f %s", v, u[i]);
    return buf;
}

wm_status cli_open(const char *path, bool set, wm_file **out, wm_error *err) {
    return set ? wm_file_open_set(path, out, err) : wm_file_open(path, out, err);
}

wm_type cli_target_type(const char *name) {
    wm_type t = wm_type_from_name(name);
    return t != WM_TYPE_INVALID && wm_convert_supported(t, t) ? t : WM_TYPE_INVALID;
}

bool cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || s[0] == '-') return false;
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1024, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1024 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1024ull * 1024 * 1024, end++;
    else if (*end == 'T' || *end == 't')
        mul = 1024ull * 1024 * 1024 * 1024, end++;
    else if (*end == 'P' || *end == 'p')
        mul = 1024ull * 1024 * 1024 * 1024 * 1024, end++;
    if (*end == 'i' || *end == 'B') end++;
    if (*end == 'B') end++;
    if (*end) return false;
    if (v > UINT64_MAX / mul) return false;
    *out = v * mul;
    return true;
}

double cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
