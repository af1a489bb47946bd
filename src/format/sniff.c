/*
 * sniff.c: what a file that is neither GGUF nor safetensors is, told from its first bytes, and
 * what to do instead: the files people hand a weights loader by mistake (a PyTorch checkpoint,
 * a pickle, a Git LFS pointer that was never fetched, a JSON config or index, an HTML page saved
 * in place of a download, an ONNX model, a NumPy or HDF5 file, a compressed file, ggml's formats
 * from before GGUF). open.c asks before it hands such a file to a parser, so the error says
 * "it is a zip archive holding a PyTorch checkpoint; convert it ..." instead of "bad magic".
 *
 * Pure: reads only the bytes it is given (at most the first 512 of the file), allocates nothing.
 * Sections: helpers; binary kinds (by magic); text kinds; the entry point.
 */
#include "../internal.h"

#include <stdio.h>
#include <string.h>

typedef struct kind {
    const char *what; /* "a zip archive holding a PyTorch checkpoint" */
    const char *todo; /* "convert it to safetensors (...)" */
} kind;

/* ---- helpers ---- */

static bool starts(const unsigned char *h, size_t n, size_t at, const char *magic, size_t len) {
    return n >= at + len && memcmp(h + at, magic, len) == 0;
}

static unsigned char lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* `needle` (lower case) occurs in h[0..n) ignoring case. */
static bool has_text(const unsigned char *h, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++) {
        size_t k = 0;
        while (k < m && lower(h[i + k]) == (unsigned char)needle[k])
            k++;
        if (k == m) return true;
    }
    return false;
}

/* Text: 8 bytes or more (so that a cut GGUF magic, "GGU", stays the GGUF reader's), valid
 * UTF-8 (a sequence cut by the end of the buffer allowed) with no control bytes but tab,
 * newline, carriage return and form feed. */
static bool is_text(const unsigned char *h, size_t n) {
    if (n < 8) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = h[i];
        if (c < 0x80) {
            if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') || c == 0x7f)
                return false;
            continue;
        }
        size_t more = c >= 0xc2 && c <= 0xdf   ? 1
                      : c >= 0xe0 && c <= 0xef ? 2
                      : c >= 0xf0 && c <= 0xf4 ? 3
                                               : 0;
        if (more == 0) return false;
        for (size_t k = 1; k <= more && i + k < n; k++)
            if ((h[i + k] & 0xc0) != 0x80) return false;
        i += more;
    }
    return true;
}

static const char PT_TODO[] =
    "convert it to safetensors (safetensors.torch.save_file) or GGUF (convert_hf_to_gguf.py)";

/* ---- binary kinds ---- */

/* A zip archive: PyTorch's torch.save format (entries ARCHIVE/data.pkl, ARCHIVE/data/0, ...,
 * ARCHIVE/version), NumPy's .npz (entries NAME.npy), or another. The first local file header's
 * name is at offset 30, its length at 26. */
static kind zip_kind(const unsigned char *h, size_t n, char *name, size_t cap) {
    size_t len = n >= 28 ? (size_t)(h[26] | h[27] << 8) : 0;
    if (len > n - 30 || n < 30) len = n > 30 ? n - 30 : 0;
    if (len >= cap) len = cap - 1;
    for (size_t i = 0; i < len; i++)
        name[i] = (h[30 + i] >= 0x20 && h[30 + i] < 0x7f) ? (char)h[30 + i] : '?';
    name[len] = 0;
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    if (strstr(name, ".pkl") || strcmp(base, "version") == 0 || strstr(name, "/data/") ||
        strcmp(base, ".format_version") == 0 || strcmp(base, "byteorder") == 0)
        return (kind){"a PyTorch checkpoint (torch.save zip)", PT_TODO};
    if (len > 4 && strcmp(name + len - 4, ".npy") == 0)
        return (kind){"a NumPy .npz archive",
                      "save the arrays as safetensors (Python: safetensors.numpy.save_file)"};
    return (kind){"a zip archive", "unpack it and open the weight file it holds"};
}

/* ONNX: a protobuf ModelProto, which starts with ir_version (field 1, varint: tag 0x08, a small
 * number) and then, as every exporter writes it, opset_import, producer_name or graph (fields
 * 8, 2, 7: tags 0x42, 0x12, 0x3a). */
static bool is_onnx(const unsigned char *h, size_t n) {
    return n >= 4 && h[0] == 0x08 && h[1] >= 1 && h[1] <= 32 &&
           (h[2] == 0x12 || h[2] == 0x3a || h[2] == 0x42);
}

static bool binary_kind(const unsigned char *h, size_t n, kind *k, char *name, size_t cap) {
    if (starts(h, n, 0, "PK\3\4", 4)) {
        *k = zip_kind(h, n, name, cap);
    } else if (n >= 2 && h[0] == 0x80 && h[1] >= 2 && h[1] <= 5) {
        /* the legacy torch.save format begins with the pickled magic number 0x1950a86a20f9469cfc6c
         */
        static const unsigned char legacy[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c,
                                               0x46, 0xf9, 0x20, 0x6a, 0xa8};
        *k = (kind){starts(h, n, 2, (const char *)legacy, sizeof legacy)
                        ? "a PyTorch checkpoint (legacy torch.save, a pickle)"
                        : "a Python pickle (a pickled checkpoint?)",
                    PT_TODO};
    } else if (is_onnx(h, n)) {
        *k = (kind){"an ONNX model (a protobuf graph)",
                    "export its weights as safetensors or GGUF (weightmap reads no ONNX)"};
    } else if (starts(h, n, 0, "\x93NUMPY", 6)) {
        *k = (kind){"a NumPy array file (.npy)",
                    "save it as safetensors (Python: safetensors.numpy.save_file)"};
    } else if (starts(h, n, 0, "\x89HDF\r\n\x1a\n", 8)) {
        *k = (kind){"an HDF5 file (Keras .h5?)", "convert the weights to safetensors"};
    } else if (starts(h, n, 0, "lmgg", 4) || starts(h, n, 0, "tjgg", 4) ||
               starts(h, n, 0, "fmgg", 4) || starts(h, n, 0, "algg", 4)) {
        *k = (kind){"a ggml file of a format from before GGUF (ggml, ggmf, ggjt, ggla)",
                    "convert it to GGUF (llama.cpp's convert_llama_ggml_to_gguf.py)"};
    } else if (starts(h, n, 0, "\x1f\x8b", 2) || starts(h, n, 0, "\x28\xb5\x2f\xfd", 4) ||
               starts(h, n, 0,
                      "\xfd"
                      "7zXZ",
                      6) ||
               starts(h, n, 0, "BZh", 3)) {
        *k = (kind){"a compressed file (gzip, zstd, xz or bzip2)",
                    "decompress it and open the file it holds"};
    } else if (starts(h, n, 257, "ustar", 5)) {
        *k = (kind){"a tar archive", "unpack it and open the weight file it holds"};
    } else if (starts(h, n, 4, "TFL3", 4)) {
        *k = (kind){"a TensorFlow Lite model", "convert the weights to safetensors or GGUF"};
    } else {
        return false;
    }
    return true;
}

/* ---- text kinds ---- */

static bool text_kind(const unsigned char *h, size_t n, kind *k) {
    if (!is_text(h, n)) return false;
    size_t i = 0;
    if (starts(h, n, 0, "\xef\xbb\xbf", 3)) i = 3; /* a UTF-8 byte order mark */
    while (i < n && (h[i] == ' ' || h[i] == '\t' || h[i] == '\n' || h[i] == '\r'))
        i++;
    if (starts(h, n, 0, "version https://git-lfs", 23)) {
        *k = (kind){"a Git LFS pointer (the file was never fetched)",
                    "run `git lfs pull`, or download the file itself"};
    } else if (i < n && h[i] == '<' && has_text(h + i, n - i, "html")) {
        *k = (kind){"an HTML page (saved in place of the file)",
                    "download the file itself (Hugging Face: its /resolve/ URL, not /blob/)"};
    } else if (i < n && (h[i] == '{' || h[i] == '[') && has_text(h, n, "\"weight_map\"")) {
        *k = (kind){"a sharded checkpoint's index (JSON with a weight_map)",
                    "open it by a name ending in .index.json, or open one of its shards"};
    } else if (i < n && (h[i] == '{' || h[i] == '[')) {
        *k = (kind){"a JSON text file (a config or tokenizer?)",
                    "open the weight file itself (*.safetensors or *.gguf)"};
    } else {
        *k = (kind){"a text file", "open the weight file itself (*.safetensors or *.gguf)"};
    }
    return true;
}

/* ---- the entry point ---- */

bool wm__sniff_foreign(const unsigned char *head, size_t n, char *out, size_t cap) {
    kind k;
    char name[64];
    if (!binary_kind(head, n, &k, name, sizeof name) && !text_kind(head, n, &k)) return false;
    if (starts(head, n, 0, "PK\3\4", 4) && name[0] && strstr(k.what, "PyTorch") == NULL)
        snprintf(out, cap, "it is %s, first entry '%s'; %s", k.what, name, k.todo);
    else
        snprintf(out, cap, "it is %s; %s", k.what, k.todo);
    return true;
}
