/*
 * cat.c: `weightmap cat FILE TENSOR [--as f32|f16|bf16|f64] [--force]`, one tensor's bytes on
 * standard output, as stored or converted.
 *
 * Sections: arguments; reading (the tensor's shard is read with pread in pieces of whole blocks,
 * so a large tensor never sits in memory at once); conversion of each piece through the public
 * wm_convert; the command. Binary output to a terminal is refused unless --force.
 */
#include "cli.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bytes of source data read per piece (rounded down to whole blocks). */
#define PIECE_BYTES ((size_t)4 << 20)

static size_t elem_bytes(wm_type t) { return t == WM_TYPE_F64 ? 8 : t == WM_TYPE_F32 ? 4 : 2; }

/* Reads exactly n bytes at off, retrying short reads; 0 or an errno (EIO for end of file). */
static int pread_full(int fd, void *buf, size_t n, uint64_t off) {
    unsigned char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (r == 0) return EIO;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static int write_full(const void *buf, size_t n) { return fwrite(buf, 1, n, stdout) == n ? 0 : 1; }

/* Streams tensor t of the file at shard_path to stdout, converted to `to` unless `to` is its own
 * type. Returns 0, or 1 after printing one line naming the file. */
static int stream(const char *path, const char *shard_path, const wm_tensor_info *t, wm_type to) {
    size_t be = wm_type_block_elems(t->type), bb = wm_type_block_bytes(t->type);
    size_t piece = PIECE_BYTES / bb * bb;
    if (piece == 0) piece = bb;
    bool convert = to != t->type;
    unsigned char *in = malloc(piece);
    void *out = convert ? malloc(piece / bb * be * elem_bytes(to)) : NULL;
    int rc = 1, fd = -1;
    if (!in || (convert && !out)) {
        fprintf(stderr, "weightmap: %s: out of memory\n", path);
        goto done;
    }
    fd = open(shard_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "weightmap: %s: %s\n", shard_path, strerror(errno));
        goto done;
    }
    for (uint64_t done = 0; done < t->nbytes;) {
        size_t n = t->nbytes - done < piece ? (size_t)(t->nbytes - done) : piece;
        int e = pread_full(fd, in, n, t->offset + done);
        if (e) {
            fprintf(stderr, "weightmap: %s: reading tensor '%s' at offset %llu: %s\n", shard_path,
                    t->name, (unsigned long long)(t->offset + done),
                    e == EIO ? "file ends early" : strerror(e));
            goto done;
        }
        if (convert) {
            uint64_t n_el = (uint64_t)(n / bb) * be;
            wm_status st = wm_convert(t->type, to, in, out, n_el);
            if (st != WM_OK) {
                fprintf(stderr, "weightmap: %s: tensor '%s': converting %s to %s: %s\n", path,
                        t->name, wm_type_name(t->type), wm_type_name(to), wm_strerror(st));
                goto done;
            }
            if (write_full(out, (size_t)n_el * elem_bytes(to))) goto write_failed;
        } else if (write_full(in, n)) {
            goto write_failed;
        }
        done += n;
    }
    if (fflush(stdout) == 0) {
        rc = 0;
        goto done;
    }
write_failed:
    fprintf(stderr, "weightmap: %s: writing to standard output: %s\n", path, strerror(errno));
done:
    if (fd >= 0) close(fd);
    free(in);
    free(out);
    return rc;
}

int cmd_cat(int argc, char **argv) {
    const char *path = NULL, *name = NULL, *as = NULL;
    bool force = false, set = false;
    cli_args p;
    cli_args_init(&p, "cat", argc, argv);
    for (int k; (k = cli_next(&p)) != CLI_END;) {
        if (k == CLI_ERROR) return 2;
        if (k == CLI_ARG && !path)
            path = p.value;
        else if (k == CLI_ARG && !name)
            name = p.value;
        else if (k == CLI_ARG)
            return cli_usage("cat: FILE and TENSOR only");
        else if (cli_is(&p, "force"))
            force = true;
        else if (cli_is(&p, "set"))
            set = true;
        else if (cli_is(&p, "as"))
            as = p.value;
    }
    if (!path || !name) return cli_usage("cat: FILE and TENSOR are required");
    wm_type to = WM_TYPE_INVALID;
    if (as) {
        to = cli_target_type(as);
        if (to == WM_TYPE_INVALID)
            return cli_usage("cat: --as %s: not a type tensors convert to (" CLI_TARGETS ")", as);
    }
    if (isatty(STDOUT_FILENO) && !force)
        return cli_usage("cat: standard output is a terminal; redirect it or pass --force");

    wm_error err = {0};
    wm_file *f = NULL;
    if (cli_open(path, set, &f, &err) != WM_OK) return cli_fail(&err);
    int rc = 1;
    size_t idx;
    wm_tensor_info t;
    if (wm_file_find_tensor(f, name, &idx) != WM_OK || wm_file_tensor(f, idx, &t) != WM_OK) {
        fprintf(stderr, "weightmap: %s: no tensor '%s'\n", path, name);
        goto done;
    }
    if (to == WM_TYPE_INVALID) to = t.type;
    if (to != t.type && !wm_convert_supported(t.type, to)) {
        fprintf(stderr, "weightmap: %s: tensor '%s' of type %s cannot be converted to %s\n", path,
                name, wm_type_name(t.type) ? wm_type_name(t.type) : "unknown", wm_type_name(to));
        goto done;
    }
    if (wm_type_block_bytes(t.type) == 0) {
        fprintf(stderr, "weightmap: %s: tensor '%s' has an unknown type\n", path, name);
        goto done;
    }
    const char *shard = wm_file_shard_path(f, t.shard);
    rc = stream(path, shard ? shard : path, &t, to);
done:
    wm_file_close(f);
    return rc;
}
