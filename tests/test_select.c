/*
 * test_select.c: loading a selection of tensors (wm_load_options.select): a row range of one
 * tensor holds and reads exactly those rows' bytes (the ledger, the model's bytes_read and the
 * kernel's rchar agree), the bytes are the file's, the tensors left out have no memory; whole
 * tensors in a mapped mode map only their pages; every refusal names the tensor and holds
 * nothing; a fault at each OS call of a selected load leaves nothing behind.
 */
#include "wmtest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t heap_now(void) {
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    return l.cat[WM_LEDGER_HEAP].current;
}

/* The largest 2-D tensor of f. */
static wm_tensor_info largest_matrix(const wm_file *f, size_t *index) {
    wm_tensor_info best = {0};
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        wm_tensor_info t;
        CHECK_STATUS(wm_file_tensor(f, i, &t), WM_OK);
        if (t.n_dims == 2 && t.nbytes > best.nbytes) {
            best = t;
            *index = i;
        }
    }
    CHECK(best.nbytes > 0);
    return best;
}

WM_TEST(rows_of_one_tensor_hold_and_read_those_rows) {
    const char *path = wmt_make_model("m.safetensors", "--size 2M --format safetensors");
    size_t len;
    unsigned char *bytes = wmt_read_file(path, &len);
    wm_file *f = OPEN_OK(path);
    size_t ti = 0;
    wm_tensor_info t = largest_matrix(f, &ti);
    uint64_t rows = t.shape[1], row = t.nbytes / rows;
    CHECK(rows > 8);
    wm_tensor_select sel = {ti, 3, 7};
    wm_load_options o = {
        .size = sizeof o, .mode = WM_MODE_HEAP, .threads = 2, .select = &sel, .n_select = 1};
    uint64_t heap0 = heap_now(), read0 = wmt_rchar(true);
    wm_model *m = NULL;
    wm_error err;
    CHECK_MSG(wm_model_load(f, &o, &m, &err) == WM_OK, "%s", err.msg);
    uint64_t read_by_kernel = wmt_rchar(false) - read0;
    wm_model_stats s = WM_MODEL_STATS_INIT;
    wm_model_stats_get(m, &s);
    CHECK_EQ(s.tensor_bytes, 4 * row);
    CHECK_EQ(s.bytes_read, 4 * row);
    CHECK_EQ(read_by_kernel, 4 * row);
    CHECK_EQ(s.heap_bytes, 4 * row);          /* one buffer of exactly the slice */
    CHECK(heap_now() - heap0 < t.nbytes / 2); /* the buffer and the plan's small tables */
    wm_type type;
    uint64_t nbytes, shape[WM_MAX_DIMS];
    uint32_t n_dims;
    CHECK_STATUS(wm_model_tensor_info(m, ti, &type, &nbytes), WM_OK);
    CHECK_EQ(nbytes, 4 * row);
    CHECK_EQ(type, t.type);
    CHECK_STATUS(wm_model_tensor_shape(m, ti, shape, &n_dims, NULL), WM_OK);
    CHECK_EQ(n_dims, 2);
    CHECK_EQ(shape[1], 4);
    CHECK_EQ(shape[0], t.shape[0]);
    const unsigned char *d = wm_model_tensor_data(m, ti);
    CHECK(d && memcmp(d, bytes + t.offset + 3 * row, 4 * row) == 0);
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        if (i == ti) continue;
        CHECK_STATUS(wm_model_tensor_info(m, i, &type, &nbytes), WM_ENOENT);
        CHECK_STATUS(wm_model_tensor_shape(m, i, shape, &n_dims, NULL), WM_ENOENT);
        CHECK(wm_model_tensor_data(m, i) == NULL);
    }
    wm_model_release(m);
    CHECK_EQ(heap_now(), heap0);
    wm_file_close(f);
    free(bytes);
}

WM_TEST(whole_tensors_map_only_their_pages) {
    const char *path = wmt_make_model("m.safetensors", "--size 2M --format safetensors");
    size_t len;
    unsigned char *bytes = wmt_read_file(path, &len);
    wm_file *f = OPEN_OK(path);
    size_t n = wm_file_tensor_count(f);
    CHECK(n > 4);
    wm_tensor_select sel[2] = {{1, 0, 0}, {n - 1, 0, 0}};
    for (int mode = WM_MODE_HEAP; mode <= WM_MODE_MMAP_PRIVATE; mode++) {
        wm_load_options o = {.size = sizeof o, .mode = (wm_mode)mode, .select = sel, .n_select = 2};
        wm_model *m = NULL;
        wm_error err;
        CHECK_MSG(wm_model_load(f, &o, &m, &err) == WM_OK, "%s", err.msg);
        wm_model_stats s = WM_MODEL_STATS_INIT;
        wm_model_stats_get(m, &s);
        uint64_t want = 0;
        for (int k = 0; k < 2; k++) {
            wm_tensor_info t;
            CHECK_STATUS(wm_file_tensor(f, sel[k].tensor, &t), WM_OK);
            want += t.nbytes;
            const unsigned char *d = wm_model_tensor_data(m, sel[k].tensor);
            CHECK(d && memcmp(d, bytes + t.offset, t.nbytes) == 0);
        }
        CHECK_EQ(s.tensor_bytes, want);
        if (mode != WM_MODE_HEAP) CHECK(s.mapped_bytes < len / 2); /* two runs of pages */
        CHECK(wm_model_tensor_data(m, 2) == NULL);
        wm_model_release(m);
        CHECK_EQ(wmt_count_file_maps(path), 0);
    }
    wm_file_close(f);
    free(bytes);
}

static void refused(wm_file *f, wm_load_options o, const char *needle) {
    uint64_t heap0 = heap_now();
    wm_model *m = (wm_model *)1;
    wm_error err;
    CHECK_STATUS(wm_model_load(f, &o, &m, &err), WM_EINVAL);
    CHECK(m == NULL);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "'%s' does not say '%s'", err.msg, needle);
    CHECK(strstr(err.msg, "m.safetensors") != NULL);
    CHECK_EQ(heap_now(), heap0);
}

WM_TEST(bad_selections_are_refused_naming_the_tensor) {
    const char *path = wmt_make_model("m.safetensors", "--size 2M --format safetensors");
    wm_file *f = OPEN_OK(path);
    size_t ti = 0, n = wm_file_tensor_count(f);
    wm_tensor_info t = largest_matrix(f, &ti);
    uint64_t rows = t.shape[1];
    wm_load_options o = {.size = sizeof o, .mode = WM_MODE_HEAP, .n_select = 1};
    refused(f, o, "n_select without select");
    wm_tensor_select s = {n, 0, 0};
    o.select = &s;
    refused(f, o, "names tensor");
    wm_tensor_select twice[2] = {{ti, 0, 1}, {ti, 0, 0}};
    o.select = twice;
    o.n_select = 2;
    refused(f, o, "is selected twice");
    o.n_select = 1;
    o.select = &s;
    s = (wm_tensor_select){ti, 5, 5};
    refused(f, o, t.name);
    s = (wm_tensor_select){ti, 0, rows + 1};
    refused(f, o, "are not a range to load");
    s = (wm_tensor_select){ti, 0, 1};
    o.mode = WM_MODE_MMAP;
    refused(f, o, "needs a packed layout");
    o.mode = WM_MODE_HEAP;
    wm_convert_rule r = {NULL, WM_TYPE_INVALID, WM_TYPE_F32};
    o.convert = &r;
    o.n_convert = 1;
    refused(f, o, "do not combine");
    o.convert = NULL;
    o.n_convert = 0;
    o.tp_world = 2;
    o.tp_split = wm_split_llama;
    refused(f, o, "tensor parallelism");
    wm_file_close(f);
}

static volatile unsigned touched; /* what use_selected read, so that the reads happen */

static void use_selected(wm_model *m) {
    const wm_file *f = wm_model_file(m);
    for (size_t i = 0; i < wm_file_tensor_count(f); i++) {
        const unsigned char *d = wm_model_tensor_data(m, i);
        uint64_t nbytes;
        if (!d || wm_model_tensor_info(m, i, NULL, &nbytes) != WM_OK) continue;
        unsigned sum = 0;
        for (uint64_t b = 0; b < nbytes; b += 512)
            sum += d[b];
        touched += sum;
    }
}

WM_TEST(fault_sweep_of_a_row_range) {
    const char *path = wmt_make_model("m.safetensors", "--size 2M --format safetensors");
    wm_file *f = OPEN_OK(path);
    size_t ti = 0;
    (void)largest_matrix(f, &ti);
    static wm_tensor_select sel[2];
    sel[0] = (wm_tensor_select){ti, 2, 9};
    sel[1] = (wm_tensor_select){ti == 0 ? 1 : 0, 0, 0};
    wmt_load_run l = {f,
                      {.size = sizeof(wm_load_options),
                       .mode = WM_MODE_HEAP,
                       .threads = 2,
                       .select = sel,
                       .n_select = 2},
                      use_selected};
    wmt_sweep sw = {.what = "selection",
                    .run = wmt_load_release,
                    .check = wmt_check_io_status,
                    .user = &l,
                    .path = path,
                    .shown = "m.safetensors"};
    wmt_sweep_result res = {0};
    int errs[] = {EIO, ENOMEM};
    wmt_sweep_any(&sw, errs, 2, &res);
    CHECK(res.counts[WM_OS_ANY] > 3);
    CHECK(res.failed > 0);
    wm_file_close(f);
}
