/*
 * test_sniff.c: a file that is neither GGUF nor safetensors is refused naming what it is and
 * what to do instead (src/format/sniff.c), under a GGUF name and under a safetensors name: a
 * PyTorch checkpoint (zip and legacy pickle), a pickle, a Git LFS pointer, JSON (a config, a
 * shard index), HTML, ONNX, NumPy (.npy, .npz), HDF5, compressed files, a tar archive, ggml's
 * formats from before GGUF, plain text. Each is WM_EFORMAT with the path, offset 0 and the kind
 * in the message, *out NULL, no descriptor left and (the runner checks) an empty ledger. Then
 * files made by the tools themselves (torch.save, torch.onnx.export, numpy, pickle, with Debian's
 * python3 and torch), the CLI's one-line error, and files that must still open: every fixture
 * kind and a safetensors header whose first bytes happen to be text.
 */
#include "wmtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct foreign {
    const char *name;  /* file name stem */
    const char *bytes; /* its first bytes */
    size_t len;
    const char *kind; /* what the message must say it is */
    const char *todo; /* and a word of what to do */
} foreign;

#define B(s) s, sizeof(s) - 1

/* The first bytes of each kind, as its tools write them. */
static const foreign FOREIGN[] = {
    {"torch-zip",
     B("PK\3\4\0\0\10\10\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\20\0\0\0archive/data.pklXX"),
     "PyTorch checkpoint", "safetensors.torch.save_file"},
    {"torch-legacy", B("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02"),
     "PyTorch checkpoint (legacy", "convert_hf_to_gguf.py"},
    {"pickle", B("\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00}\x94."), "Python pickle",
     "safetensors"},
    {"lfs", B("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 1185376\n"),
     "Git LFS pointer", "git lfs pull"},
    {"config", B("{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"hidden_size\": 64\n}\n"),
     "JSON text file", "weight file itself"},
    {"index",
     B("{\"metadata\": {\"total_size\": 16}, \"weight_map\": {\"a\": \"m-00001.safetensors\"}}"),
     "sharded checkpoint's index", ".index.json"},
    {"page", B("\n<!DOCTYPE html>\n<html lang=\"en\"><head><title>404</title></head></html>"),
     "HTML page", "/resolve/"},
    {"onnx",
     B("\x08\x07\x12\x07pytorch\x1a\x06"
       "1.13.0:\xde\x01\x0a\x5c"),
     "ONNX model", "safetensors or GGUF"},
    {"npy", B("\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }"),
     "NumPy array file", "safetensors.numpy.save_file"},
    {"npz", B("PK\3\4\24\0\0\0\0\0\0\0!\0\0\0\0\0\0\0\0\0\0\0\0\0\5\0\24\0x.npyXX"),
     "NumPy .npz archive", "safetensors.numpy.save_file"},
    {"zip", B("PK\3\4\24\0\0\0\0\0\0\0!\0\0\0\0\0\0\0\0\0\0\0\0\0\7\0\0\0weightsXX"),
     "zip archive, first entry 'weights'", "unpack it"},
    {"hdf5", B("\x89HDF\r\n\x1a\n\0\0\0\0\0\x08\x08\0"), "HDF5 file", "safetensors"},
    {"gzip", B("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"), "compressed file", "decompress it"},
    {"zstd", B("\x28\xb5\x2f\xfd\x04\x58"), "compressed file", "decompress it"},
    {"ggjt", B("tjgg\x03\x00\x00\x00\x00\x7d\x00\x00"), "before GGUF",
     "convert_llama_ggml_to_gguf"},
    {"text", B("These are not the weights you are looking for.\n"), "a text file",
     "weight file itself"},
};

/* Opens `path`, which must be refused as `kind`; `as` is what the name claims (GGUF or
 * safetensors). */
static void refused_as(const char *path, const char *as, const char *kind, const char *todo) {
    int fds = wmt_count_fds();
    wm_file *f = (wm_file *)1;
    wm_error err;
    CHECK_STATUS(wm_file_open(path, &f, &err), WM_EFORMAT);
    CHECK(f == NULL);
    CHECK_EQ(err.code, WM_EFORMAT);
    CHECK_MSG_HAS(err, path);
    CHECK_MSG_HAS(err, "at offset 0 (0x0)");
    char want[64];
    snprintf(want, sizeof want, "not a %s file: it is", as);
    CHECK_MSG_HAS(err, want);
    CHECK_MSG_HAS(err, kind);
    CHECK_MSG_HAS(err, todo);
    CHECK_EQ(wmt_count_fds(), fds);
}

WM_TEST(each_kind_under_either_name) {
    for (size_t i = 0; i < sizeof FOREIGN / sizeof FOREIGN[0]; i++) {
        const foreign *k = &FOREIGN[i];
        char name[64];
        snprintf(name, sizeof name, "%s.gguf", k->name);
        const char *g = wmt_tmp(name);
        wmt_write_file(g, k->bytes, k->len);
        refused_as(g, "GGUF", k->kind, k->todo);
        snprintf(name, sizeof name, "%s.safetensors", k->name);
        const char *s = wmt_tmp(name);
        wmt_write_file(s, k->bytes, k->len);
        refused_as(s, "safetensors", k->kind, k->todo);
    }
}

/* The fixture that the team's README describes as a Git LFS pointer committed by mistake. */
WM_TEST(lfs_pointer_fixture) {
    refused_as(wmt_fixture("malformed/lfs-pointer.gguf"), "GGUF", "Git LFS pointer",
               "git lfs pull");
}

/* A tar archive: "ustar" at offset 257 of its first header block. */
WM_TEST(tar_archive) {
    unsigned char block[512] = {0};
    memcpy(block, "model.safetensors", 17);
    memcpy(block + 257,
           "ustar\0"
           "00",
           8);
    const char *p = wmt_tmp("weights.tar");
    wmt_write_file(p, block, sizeof block);
    refused_as(p, "GGUF", "tar archive", "unpack it");
}

/* Real files from the tools that write them (Debian's python3 with torch and numpy). */
WM_TEST(files_the_tools_write) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && /usr/bin/python3 -c \""
             "import pickle, numpy as np, torch\n"
             "m = torch.nn.Linear(3, 2)\n"
             "torch.save(m.state_dict(), 'zip.pt')\n"
             "torch.save(m.state_dict(), 'legacy.bin', _use_new_zipfile_serialization=False)\n"
             "pickle.dump({'w': [1.0, 2.0]}, open('obj.pkl', 'wb'))\n"
             "np.save('a.npy', np.zeros(3)); np.savez('a.npz', x=np.zeros(3))\n"
             "torch.onnx.export(m, torch.zeros(1, 3), 'm.onnx')\n"
             "\" 2>/dev/null",
             wmt_tmpdir());
    char *out = NULL;
    int rc = wmt_run(cmd, &out);
    free(out);
    if (rc != 0) WM_SKIP("/usr/bin/python3 with torch and numpy is not installed");
    refused_as(wmt_tmp("zip.pt"), "GGUF", "PyTorch checkpoint (torch.save zip)",
               "safetensors.torch.save_file");
    refused_as(wmt_tmp("legacy.bin"), "GGUF", "PyTorch checkpoint (legacy", "safetensors");
    refused_as(wmt_tmp("obj.pkl"), "GGUF", "Python pickle", "safetensors");
    refused_as(wmt_tmp("a.npy"), "GGUF", "NumPy array file", "safetensors");
    refused_as(wmt_tmp("a.npz"), "GGUF", "NumPy .npz archive", "safetensors");
    refused_as(wmt_tmp("m.onnx"), "GGUF", "ONNX model", "safetensors or GGUF");
}

/* The CLI says it in its one line on stderr, exit 1. */
WM_TEST(cli_names_the_kind) {
    const char *p = wmt_tmp("model.safetensors");
    wmt_write_file(p, FOREIGN[3].bytes, FOREIGN[3].len);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' info '%s'", WM_CLI, p);
    char *out = NULL;
    CHECK_EQ(wmt_run(cmd, &out), 1);
    free(out);
    char *e = wmt_stderr_text();
    CHECK_MSG(strstr(e, "not a safetensors file: it is a Git LFS pointer") && strchr(e, '\n') &&
                  strchr(e, '\n')[1] == 0,
              "stderr: %s", e);
    free(e);
}

/* What must still open: the fixtures of both formats, and a safetensors file whose 8-byte
 * header length is made of printable bytes (0x20 each: a text-looking start) is not taken for
 * text when the length fits the file. */
WM_TEST(weight_files_still_open) {
    static const char *const ok[] = {"gguf/stories260K.gguf", "gguf/stories260K-v1.gguf",
                                     "safetensors/hf-sample-overall.safetensors",
                                     "safetensors/runai-empty.safetensors"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        wm_file_close(OPEN_OK(wmt_fixture(ok[i])));
    /* header length 0x2020 = 8224: "  \0\0\0\0\0\0" then '{', a JSON object padded with spaces */
    size_t hlen = 0x2020, len = 8 + hlen;
    unsigned char *b = malloc(len);
    CHECK(b);
    memset(b, ' ', len);
    memset(b + 2, 0, 6);
    memcpy(b + 8, "{\"__metadata__\":{\"k\":\"v\"}}", 26);
    const char *p = wmt_tmp("spaces.safetensors");
    wmt_write_file(p, b, len);
    free(b);
    wm_file *f = OPEN_OK(p);
    CHECK_EQ(wm_file_tensor_count(f), 0);
    wm_file_close(f);
}

/* Not taken for text: a cut GGUF magic (the GGUF reader names it), bytes that are not UTF-8 (a
 * safetensors length of 0xff...ff: the safetensors reader names the length). */
WM_TEST(near_misses_keep_their_parsers_message) {
    const char *p = wmt_tmp("cut.gguf");
    wmt_write_file(p, "GGU", 3);
    wm_file *f;
    wm_error err;
    CHECK_STATUS(wm_file_open(p, &f, &err), WM_EFORMAT);
    CHECK_MSG(strstr(err.msg, "it is") == NULL, "%s", err.msg);
    const char *s = wmt_tmp("ff.safetensors");
    wmt_write_file(s, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10);
    CHECK_STATUS(wm_file_open(s, &f, &err), WM_EFORMAT);
    CHECK_MSG_HAS(err, "limit");
}
