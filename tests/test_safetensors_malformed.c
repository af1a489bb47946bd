/*
 * test_safetensors_malformed.c: hand-built safetensors files that must be refused, each with
 * WM_EFORMAT (WM_EUNSUPPORTED for a dtype the format knows and weightmap does not), a message
 * naming the file, an offset and the defect, no descriptor left open and nothing held.
 *
 * Sections: helpers; the length field; JSON that is not JSON (or is JSON that cJSON alone would
 * let through: duplicates, depth, inexact numbers); tensor entries (dtype, shape, offsets);
 * layout of the data section (the reference's validate: sorted by offset, contiguous from 0, no
 * gap, no overlap, sizes matching, data ending the file); __metadata__; names.
 * The cases cover every refusal in the reference implementation's tests (huggingface/safetensors
 * tensor.rs: header too small, too large, invalid length, invalid UTF-8, not JSON, invalid
 * offset, invalid info, incomplete buffer, validation overflow, misaligned sub-byte slices) and
 * the list.
 */
#include "wmtest.h"

#include <string.h>

/* ---- helpers ---- */

/* Writes a file: the 8-byte length `hlen_field`, hlen bytes of header, data_len bytes of data. */
static const char *raw_file(uint64_t hlen_field, const void *hdr, size_t hlen, size_t data_len) {
    wmt_buf b = {0};
    wmt_put_u64(&b, hlen_field);
    wmt_put(&b, hdr, hlen);
    wmt_put_zeros(&b, data_len);
    const char *path = wmt_tmp("bad.safetensors");
    wmt_write_file(path, b.p, b.len);
    wmt_buf_free(&b);
    return path;
}

/* Opening `path` fails with `want`; the message names the file, an offset and `needle`. */
static void refused_at(const char *file, int line, const char *path, wm_status want,
                       const char *needle) {
    int fds = wmt_count_fds();
    wm_file *f = (wm_file *)(uintptr_t)1;
    wm_error err = {0};
    wm_status st = wm_file_open(path, &f, &err);
    if (st != want)
        wmt_fail(file, line, "got %s, want %s (%s)", wm_status_name(st), wm_status_name(want),
                 err.msg);
    if (f != NULL) wmt_fail(file, line, "out not NULL on failure");
    if (err.code != want) wmt_fail(file, line, "err.code %d", (int)err.code);
    if (!strstr(err.msg, path)) wmt_fail(file, line, "\"%s\" lacks the path", err.msg);
    if (want == WM_EFORMAT && !strstr(err.msg, "offset"))
        wmt_fail(file, line, "\"%s\" lacks the offset", err.msg);
    if (!strstr(err.msg, needle)) wmt_fail(file, line, "\"%s\" lacks \"%s\"", err.msg, needle);
    if (wmt_count_fds() != fds) wmt_fail(file, line, "a descriptor was left open");
    wmt_check_ledger_empty(file, line);
}

/* A header given as a C string, followed by data_len bytes. */
#define REFUSE(hdr, data_len, want, needle)                                                        \
    refused_at(__FILE__, __LINE__, raw_file(strlen(hdr), (hdr), strlen(hdr), (data_len)), (want),  \
               (needle))
#define BAD(hdr, data_len, needle) REFUSE(hdr, data_len, WM_EFORMAT, needle)

/* One good tensor entry, to build headers around. */
#define T_OK "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

/* ---- the length field ---- */

WM_TEST(shorter_than_length_field) {
    for (size_t n = 0; n < 8; n++) {
        const char *path = wmt_tmp("short.safetensors");
        wmt_write_file(path, "\x02\0\0\0\0\0\0\0", n);
        refused_at(__FILE__, __LINE__, path, WM_EFORMAT, "too short");
    }
}

WM_TEST(header_too_large) {
    refused_at(__FILE__, __LINE__, raw_file(100000001, "{}", 2, 0), WM_EFORMAT, "limit");
    refused_at(__FILE__, __LINE__, raw_file(UINT64_MAX, "{}", 2, 0), WM_EFORMAT, "limit");
    refused_at(__FILE__, __LINE__, raw_file(1ull << 63, "{}", 2, 0), WM_EFORMAT, "limit");
}

WM_TEST(header_past_end_of_file) {
    refused_at(__FILE__, __LINE__, raw_file(3, "{}", 2, 0), WM_EFORMAT, "past the end");
    refused_at(__FILE__, __LINE__, raw_file(100000000, "{}", 2, 0), WM_EFORMAT, "past the end");
    /* A length that is right but the file stops inside the header. */
    const char *h = "{" T_OK "}";
    refused_at(__FILE__, __LINE__, raw_file(strlen(h), h, strlen(h) - 5, 0), WM_EFORMAT,
               "past the end");
}

WM_TEST(empty_and_blank_header) {
    refused_at(__FILE__, __LINE__, raw_file(0, "", 0, 0), WM_EFORMAT, "not valid JSON");
    BAD("        ", 0, "not valid JSON");
}

/* ---- not JSON ---- */

WM_TEST(not_json) {
    BAD("hello world", 0, "not JSON");
    BAD("{\"t\":{\"dtype\":\"F32\",}", 0, "not valid JSON");
    BAD("{\"t\" {}}", 0, "not valid JSON");
    BAD("{'t':{}}", 0, "not JSON");
    BAD("{} // comment", 0, "not JSON");
    BAD("{\"a\":NaN}", 0, "not JSON");
    BAD("{\"a\":truth}", 0, "not JSON");
    BAD("{", 0, "not valid JSON");
    BAD("{\"a\":\"unterminated}", 0, "unterminated");
    BAD("{\"a\":\"bad \\x escape\"}", 0, "invalid escape");
    BAD("{\"a\":\"\\u12\"}", 0, "\\u escape");
    BAD("{\"a\":\"\\ud800\"}", 0, "not valid JSON"); /* a lone surrogate */
    BAD("{\"a\":01}", 0, "leading zero");
    BAD("{\"a\":1.}", 0, "malformed JSON number");
    BAD("{\"a\":-}", 0, "malformed JSON number");
    BAD("{\"a\":1e}", 0, "malformed JSON number");
    BAD("{\"a\":+1}", 0, "not JSON");
    BAD("{\"a\":.5}", 0, "not JSON");
    BAD("\xef\xbb\xbf{}", 0, "not JSON"); /* a byte-order mark */
    BAD("{\"a\":\"tab\there\"}", 0, "control byte 0x09");
    BAD("{\x01}", 0, "byte 0x01"); /* cJSON alone takes control bytes for white space */
    BAD("{}\v", 0, "byte 0x0b");
}

WM_TEST(top_level_not_an_object) {
    BAD("[]", 0, "not an object");
    BAD("[{" T_OK "}]", 8, "not an object");
    BAD("\"str\"", 0, "not an object");
    BAD("42", 0, "not an object");
    BAD("null", 0, "not an object");
    BAD("true", 0, "not an object");
}

WM_TEST(trailing_garbage_in_header) {
    BAD("{}x", 0, "not JSON");
    BAD("{}{}", 0, "trailing bytes after the JSON object");
    BAD("{" T_OK "} []", 8, "trailing bytes");
    /* Padding must be white space, not NUL bytes. */
    refused_at(__FILE__, __LINE__, raw_file(6, "{}\0\0\0\0", 6, 0), WM_EFORMAT, "byte 0x00");
}

WM_TEST(not_utf8) {
    BAD("{\"a\":\"\xff\"}", 0, "not valid UTF-8");
    BAD("{\"a\":\"\xc0\xaf\"}", 0, "not valid UTF-8");         /* overlong '/' */
    BAD("{\"a\":\"\xed\xa0\x80\"}", 0, "not valid UTF-8");     /* encoded surrogate */
    BAD("{\"a\":\"\xf4\x90\x80\x80\"}", 0, "not valid UTF-8"); /* above U+10FFFF */
    BAD("{\"a\":\"\xe2\x82\"}", 0, "not valid UTF-8");         /* cut short */
}

/* 200,000 levels: refused before cJSON recurses (the stack would not survive it). */
WM_TEST(nesting_200000_deep) {
    size_t depth = 200000, n = 0;
    char *h = malloc(2 * depth + 16);
    n += (size_t)sprintf(h, "{\"a\":");
    for (size_t i = 0; i < depth; i++)
        h[n++] = '[';
    for (size_t i = 0; i < depth; i++)
        h[n++] = ']';
    h[n++] = '}';
    h[n] = 0;
    BAD(h, 0, "nested deeper than 128");
    /* Deep objects too, and deep nesting inside __metadata__. */
    n = 0;
    for (size_t i = 0; i < depth; i++)
        n += (size_t)sprintf(h + n, "{\"");
    h[n] = 0;
    BAD(h, 0, "nested deeper");
    free(h);
    BAD("{\"__metadata__\":{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
        "[["
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
        "[[[[[[["
        "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
        "]]]]]]"
        "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
        "]]]]]]"
        "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
        "]]]]]]"
        "}}",
        0, "nested deeper");
}

/* ---- tensor entries ---- */

WM_TEST(huge_and_inexact_numbers) {
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,1e400]}}", 8,
        "data_offsets[1]");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8.0]}}", 8, "data_offsets[1]");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8e0]}}", 8, "data_offsets[1]");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,18446744073709551616]}}", 8,
        "fits 64 bits");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,99999999999999999999999999]}}",
        8, "fits 64 bits");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, "shape[0]");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,18446744073709551615]}}", 8,
        "hold 18446744073709551615 bytes");
}

WM_TEST(negative_and_overflowing_shapes) {
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,8]}}", 8,
        "shape[0] is not a non-negative");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[2,-0],\"data_offsets\":[0,0]}}", 0, "shape[1]");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
        "element count of the shape overflows");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[18446744073709551615,2],\"data_offsets\":[0,8]}}", 8,
        "overflows");
    /* The element count fits, the byte count does not. */
    BAD("{\"t\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,8]}}", 8,
        "byte size overflows");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":\"8\",\"data_offsets\":[0,8]}}", 8, "not an array");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[\"8\"],\"data_offsets\":[0,8]}}", 8, "shape[0]");
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[null],\"data_offsets\":[0,8]}}", 8, "shape[0]");
}

WM_TEST(more_than_four_dims) {
    BAD("{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,2,2,2],\"data_offsets\":[0,8]}}", 8,
        "has 5 dimensions; at most 4 are supported");
}

WM_TEST(unknown_dtype) {
    BAD("{\"t\":{\"dtype\":\"F128\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
        "unknown dtype 'F128'");
    BAD("{\"t\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
        "unknown dtype 'f32'");
    BAD("{\"t\":{\"dtype\":\"float32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype");
    BAD("{\"t\":{\"dtype\":\"\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype");
    BAD("{\"t\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype is a JSON number");
    REFUSE("{\"t\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, WM_EUNSUPPORTED,
           "dtype C64 is not supported");
    REFUSE("{\"t\":{\"dtype\":\"F8_E4M3FNUZ\",\"shape\":[8],\"data_offsets\":[0,8]}}", 8,
           WM_EUNSUPPORTED, "not supported");
}

WM_TEST(missing_or_repeated_fields) {
    BAD("{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "has no dtype field");
    BAD("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "has no shape field");
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "has no data_offsets field");
    BAD("{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
        "field 'dtype' appears twice");
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"data_offsets\":[0,8]}}",
        8, "appears twice");
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
        "has 1 entries, not 2");
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, "has 3 entries");
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{\"a\":0}}}", 8, "not an array");
    BAD("{\"t\":[1,2]}", 0, "tensor 't' is a JSON array, not an object");
    BAD("{\"t\":\"x\"}", 0, "not an object");
}

/* ---- layout of the data section ---- */

WM_TEST(reversed_offsets) {
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
        "end before they begin");
}

WM_TEST(overlapping_offsets) {
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        12, "overlaps tensor 'a'");
    /* The same range twice. */
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        8, "overlaps");
}

WM_TEST(gapped_offsets) {
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
        12, "4 bytes at data offset 4 belong to no tensor (gap before tensor 'b')");
    /* The data must start at 0. */
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
        "4 bytes at data offset 0 belong to no tensor");
}

WM_TEST(out_of_bounds_offsets) {
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
        "ends past the end of the file");
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, "past the end");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[99,99]}}",
        4, "belong to no tensor");
}

WM_TEST(size_not_shape_times_dtype) {
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
        "hold 4 bytes, but its shape and dtype need 8");
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12, "need 8");
    BAD("{\"t\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "need 2");
    BAD("{\"t\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[0,2]}}", 2, "need 0");
}

/* Sub-byte types must fill whole bytes (the reference's MisalignedSlice). */
WM_TEST(misaligned_sub_byte) {
    BAD("{\"t\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
        "do not fill whole bytes");
    BAD("{\"t\":{\"dtype\":\"F6_E2M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, "whole bytes");
    BAD("{\"t\":{\"dtype\":\"F6_E3M2\",\"shape\":[5],\"data_offsets\":[0,4]}}", 4, "whole bytes");
}

WM_TEST(trailing_bytes_after_data) {
    BAD("{" T_OK "}", 9, "1 bytes follow the last tensor's data; the data must end the file");
    BAD("{}", 1, "1 bytes follow");
    BAD("{\"__metadata__\":{\"a\":\"b\"}}", 64, "64 bytes follow");
}

/* ---- __metadata__ ---- */

WM_TEST(metadata_not_strings) {
    BAD("{\"__metadata__\":{\"a\":1}}", 0, "__metadata__ 'a' is a JSON number, not a string");
    BAD("{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0, "is a JSON object, not a string");
    BAD("{\"__metadata__\":{\"a\":[\"x\"]}}", 0, "is a JSON array");
    BAD("{\"__metadata__\":{\"a\":null}}", 0, "is a JSON null");
    BAD("{\"__metadata__\":{\"a\":true}}", 0, "is a JSON boolean");
    BAD("{\"__metadata__\":\"x\"}", 0, "__metadata__ is a JSON string, not an object");
    BAD("{\"__metadata__\":[]}", 0, "not an object of strings");
    BAD("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ appears twice");
}

/* ---- names ---- */

WM_TEST(duplicate_names) {
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        8, "duplicate tensor name 't'");
    BAD("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, "duplicate metadata key 'k'");
    /* Equal after unescaping. */
    BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"\\u0074\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        8, "duplicate tensor name 't'");
}

WM_TEST(bad_names) {
    BAD("{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
        "not valid UTF-8");
    BAD("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "\\u0000");
    BAD("{\"__metadata__\":{\"k\\u0000\":\"v\"}}", 0, "NUL character");
    BAD("{\"__metadata__\":{\"k\":\"v\\u0000\"}}", 0, "NUL character");
}
