/*
 * test_safetensors_malformed.c: hand-built safetensors files that must be refused, each with
 * WM_EFORMAT (WM_EUNSUPPORTED for a dtype the format knows and weightmap does not), a message
 * naming the file, an offset and the defect, no descriptor left open and nothing held.
 *
 * Sections: helpers; the table of headers to refuse (one row per header, each case runs its
 * rows); the length field; JSON that is not JSON (or is JSON that a lax parser would let
 * through: duplicates, depth, inexact numbers); tensor entries (dtype, shape, offsets);
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

/* ---- the table: one row per header that must be refused, by case ---- */

/* A header (a C string) followed by data_len bytes, refused with `want` and a message naming
 * `needle`; `test` is the case (WM_TEST) the row belongs to, `line` its place here. */
typedef struct bad_header {
    const char *test, *hdr;
    size_t data_len;
    wm_status want;
    const char *needle;
    int line;
} bad_header;

/* One tensor entry of a header: ENTRY("a", "F32", "[2]", "0,8"). */
#define ENTRY(name, dtype, shape, offsets)                                                         \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" offsets "]}"
/* A row of the case `test`. */
#define ROW(test, hdr, data_len, want, needle)                                                     \
    { #test, hdr, data_len, want, needle, __LINE__ }
#define BAD_ROW(test, hdr, data_len, needle) ROW(test, hdr, data_len, WM_EFORMAT, needle)

static const bad_header bad_headers[] = {
    BAD_ROW(empty_and_blank_header, "        ", 0, "not valid JSON"),
    BAD_ROW(not_json, "hello world", 0, "not JSON"),
    BAD_ROW(not_json, "{\"t\":{\"dtype\":\"F32\",}", 0, "not valid JSON"),
    BAD_ROW(not_json, "{\"t\" {}}", 0, "not valid JSON"),
    BAD_ROW(not_json, "{'t':{}}", 0, "not JSON"),
    BAD_ROW(not_json, "{} // comment", 0, "not JSON"),
    BAD_ROW(not_json, "{\"a\":NaN}", 0, "not JSON"),
    BAD_ROW(not_json, "{\"a\":truth}", 0, "not JSON"),
    BAD_ROW(not_json, "{", 0, "not valid JSON"),
    BAD_ROW(not_json, "{\"a\":\"unterminated}", 0, "unterminated"),
    BAD_ROW(not_json, "{\"a\":\"bad \\x escape\"}", 0, "invalid escape"),
    BAD_ROW(not_json, "{\"a\":\"\\u12\"}", 0, "\\u escape"),
    BAD_ROW(not_json, "{\"a\":\"\\ud800\"}", 0, "not valid JSON"), /* a lone surrogate */
    BAD_ROW(not_json, "{\"a\":\"\\udc00x\"}", 0, "lone UTF-16 low surrogate"),
    BAD_ROW(not_json, "{\"a\":\"\\ud83d\\u0041\"}", 0, "lone UTF-16 high surrogate"),
    BAD_ROW(not_json, "{\"a\":[1,2}", 0, "',' or ']' expected"),
    BAD_ROW(not_json, "{\"a\":1 \"b\":2}", 0, "',' or '}' expected"),
    BAD_ROW(not_json, "{1:2}", 0, "a member name expected"),
    BAD_ROW(not_json, "{\"a\":}", 0, "a value expected"),
    BAD_ROW(not_json, "{\"a\":01}", 0, "leading zero"),
    BAD_ROW(not_json, "{\"a\":1.}", 0, "malformed JSON number"),
    BAD_ROW(not_json, "{\"a\":-}", 0, "malformed JSON number"),
    BAD_ROW(not_json, "{\"a\":1e}", 0, "malformed JSON number"),
    BAD_ROW(not_json, "{\"a\":+1}", 0, "not JSON"),
    BAD_ROW(not_json, "{\"a\":.5}", 0, "not JSON"),
    BAD_ROW(not_json, "\xef\xbb\xbf{}", 0, "not JSON"), /* a byte-order mark */
    BAD_ROW(not_json, "{\"a\":\"tab\there\"}", 0, "control byte 0x09"),
    BAD_ROW(not_json, "{\x01}", 0,
            "byte 0x01"), /* a lax parser takes control bytes for white space */
    BAD_ROW(not_json, "{}\v", 0, "byte 0x0b"),
    BAD_ROW(top_level_not_an_object, "[]", 0, "not an object"),
    BAD_ROW(top_level_not_an_object, "[{" T_OK "}]", 8, "not an object"),
    BAD_ROW(top_level_not_an_object, "\"str\"", 0, "not an object"),
    BAD_ROW(top_level_not_an_object, "42", 0, "not an object"),
    BAD_ROW(top_level_not_an_object, "null", 0, "not an object"),
    BAD_ROW(top_level_not_an_object, "true", 0, "not an object"),
    BAD_ROW(trailing_garbage_in_header, "{}x", 0, "not JSON"),
    BAD_ROW(trailing_garbage_in_header, "{}{}", 0, "trailing bytes after the JSON object"),
    BAD_ROW(trailing_garbage_in_header, "{" T_OK "} []", 8, "trailing bytes"),
    BAD_ROW(not_utf8, "{\"a\":\"\xff\"}", 0, "not valid UTF-8"),
    BAD_ROW(not_utf8, "{\"a\":\"\xc0\xaf\"}", 0, "not valid UTF-8"),         /* overlong '/' */
    BAD_ROW(not_utf8, "{\"a\":\"\xed\xa0\x80\"}", 0, "not valid UTF-8"),     /* encoded surrogate */
    BAD_ROW(not_utf8, "{\"a\":\"\xf4\x90\x80\x80\"}", 0, "not valid UTF-8"), /* above U+10FFFF */
    BAD_ROW(not_utf8, "{\"a\":\"\xe2\x82\"}", 0, "not valid UTF-8"),         /* cut short */
    BAD_ROW(huge_and_inexact_numbers,
            "{\"t\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,1e400]}}", 8,
            "data_offsets[1]"),
    BAD_ROW(huge_and_inexact_numbers,
            "{\"t\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8.0]}}", 8,
            "data_offsets[1]"),
    BAD_ROW(huge_and_inexact_numbers,
            "{\"t\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8e0]}}", 8,
            "data_offsets[1]"),
    BAD_ROW(huge_and_inexact_numbers, "{" ENTRY("t", "U8", "[8]", "0,18446744073709551616") "}", 8,
            "fits 64 bits"),
    BAD_ROW(huge_and_inexact_numbers,
            "{" ENTRY("t", "U8", "[8]", "0,99999999999999999999999999") "}", 8, "fits 64 bits"),
    BAD_ROW(huge_and_inexact_numbers,
            "{\"t\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, "shape[0]"),
    BAD_ROW(huge_and_inexact_numbers, "{" ENTRY("t", "U8", "[8]", "0,18446744073709551615") "}", 8,
            "hold 18446744073709551615 bytes"),
    BAD_ROW(negative_and_overflowing_shapes,
            "{\"t\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,8]}}", 8,
            "shape[0] is not a non-negative"),
    BAD_ROW(negative_and_overflowing_shapes,
            "{\"t\":{\"dtype\":\"U8\",\"shape\":[2,-0],\"data_offsets\":[0,0]}}", 0, "shape[1]"),
    BAD_ROW(negative_and_overflowing_shapes,
            "{" ENTRY("t", "U8", "[4294967296,4294967296]", "0,8") "}", 8,
            "element count of the shape overflows"),
    BAD_ROW(negative_and_overflowing_shapes,
            "{" ENTRY("t", "U8", "[18446744073709551615,2]", "0,8") "}", 8, "overflows"),
    /* The element count fits, the byte count does not. */
    BAD_ROW(negative_and_overflowing_shapes,
            "{" ENTRY("t", "F64", "[2305843009213693952]", "0,8") "}", 8, "byte size overflows"),
    BAD_ROW(negative_and_overflowing_shapes,
            "{\"t\":{\"dtype\":\"U8\",\"shape\":\"8\",\"data_offsets\":[0,8]}}", 8, "not an array"),
    BAD_ROW(negative_and_overflowing_shapes,
            "{\"t\":{\"dtype\":\"U8\",\"shape\":[\"8\"],\"data_offsets\":[0,8]}}", 8, "shape[0]"),
    BAD_ROW(negative_and_overflowing_shapes,
            "{\"t\":{\"dtype\":\"U8\",\"shape\":[null],\"data_offsets\":[0,8]}}", 8, "shape[0]"),
    BAD_ROW(more_than_four_dims, "{" ENTRY("t", "U8", "[1,1,2,2,2]", "0,8") "}", 8,
            "has 5 dimensions; at most 4 are supported"),
    BAD_ROW(unknown_dtype, "{" ENTRY("t", "F128", "[2]", "0,8") "}", 8, "unknown dtype 'F128'"),
    BAD_ROW(unknown_dtype, "{" ENTRY("t", "f32", "[2]", "0,8") "}", 8, "unknown dtype 'f32'"),
    BAD_ROW(unknown_dtype, "{" ENTRY("t", "float32", "[2]", "0,8") "}", 8, "unknown dtype"),
    BAD_ROW(unknown_dtype, "{\"t\":{\"dtype\":\"\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
            "unknown dtype"),
    BAD_ROW(unknown_dtype, "{\"t\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
            "dtype is a JSON number"),
    BAD_ROW(unknown_dtype, "{" ENTRY("t", "c64", "[1]", "0,8") "}", 8, "unknown dtype 'c64'"),
    BAD_ROW(missing_or_repeated_fields, "{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
            "has no dtype field"),
    BAD_ROW(missing_or_repeated_fields, "{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8,
            "has no shape field"),
    BAD_ROW(missing_or_repeated_fields, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8,
            "has no data_offsets field"),
    BAD_ROW(missing_or_repeated_fields,
            "{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
            "field 'dtype' appears twice"),
    BAD_ROW(
        missing_or_repeated_fields,
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"data_offsets\":[0,8]}}",
        8, "appears twice"),
    BAD_ROW(missing_or_repeated_fields,
            "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
            "has 1 entries, not 2"),
    BAD_ROW(missing_or_repeated_fields,
            "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8,
            "has 3 entries"),
    BAD_ROW(missing_or_repeated_fields,
            "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{\"a\":0}}}", 8,
            "not an array"),
    BAD_ROW(missing_or_repeated_fields, "{\"t\":[1,2]}", 0,
            "tensor 't' is a JSON array, not an object"),
    BAD_ROW(missing_or_repeated_fields, "{\"t\":\"x\"}", 0, "not an object"),
    BAD_ROW(reversed_offsets, "{" ENTRY("t", "F32", "[2]", "8,0") "}", 8, "end before they begin"),
    BAD_ROW(overlapping_offsets,
            "{" ENTRY("a", "F32", "[2]", "0,8") "," ENTRY("b", "F32", "[2]", "4,12") "}", 12,
            "overlaps tensor 'a'"),
    /* The same range twice. */
    BAD_ROW(overlapping_offsets,
            "{" ENTRY("a", "F32", "[2]", "0,8") "," ENTRY("b", "F32", "[2]", "0,8") "}", 8,
            "overlaps"),
    BAD_ROW(gapped_offsets,
            "{" ENTRY("a", "F32", "[1]", "0,4") "," ENTRY("b", "F32", "[1]", "8,12") "}", 12,
            "4 bytes at data offset 4 belong to no tensor (gap before tensor 'b')"),
    /* The data must start at 0. */
    BAD_ROW(gapped_offsets, "{" ENTRY("a", "F32", "[1]", "4,8") "}", 8,
            "4 bytes at data offset 0 belong to no tensor"),
    BAD_ROW(out_of_bounds_offsets, "{" ENTRY("t", "F32", "[2]", "0,8") "}", 4,
            "ends past the end of the file"),
    BAD_ROW(out_of_bounds_offsets, "{" ENTRY("t", "F32", "[2]", "0,8") "}", 0, "past the end"),
    BAD_ROW(out_of_bounds_offsets,
            "{" ENTRY("a", "F32", "[1]", "0,4") "," ENTRY("b", "U8", "[0]", "99,99") "}", 4,
            "belong to no tensor"),
    BAD_ROW(size_not_shape_times_dtype, "{" ENTRY("t", "F32", "[2]", "0,4") "}", 4,
            "hold 4 bytes, but its shape and dtype need 8"),
    BAD_ROW(size_not_shape_times_dtype, "{" ENTRY("t", "F32", "[2]", "0,12") "}", 12, "need 8"),
    BAD_ROW(size_not_shape_times_dtype, "{" ENTRY("t", "BF16", "[]", "0,4") "}", 4, "need 2"),
    BAD_ROW(size_not_shape_times_dtype, "{" ENTRY("t", "F16", "[0]", "0,2") "}", 2, "need 0"),
    BAD_ROW(misaligned_sub_byte, "{" ENTRY("t", "F4", "[3]", "0,2") "}", 2,
            "do not fill whole bytes"),
    BAD_ROW(misaligned_sub_byte, "{" ENTRY("t", "F6_E2M3", "[2]", "0,2") "}", 2, "whole bytes"),
    BAD_ROW(misaligned_sub_byte, "{" ENTRY("t", "F6_E3M2", "[5]", "0,4") "}", 4, "whole bytes"),
    BAD_ROW(trailing_bytes_after_data, "{" T_OK "}", 9,
            "1 bytes follow the last tensor's data; the data must end the file"),
    BAD_ROW(trailing_bytes_after_data, "{}", 1, "1 bytes follow"),
    BAD_ROW(trailing_bytes_after_data, "{\"__metadata__\":{\"a\":\"b\"}}", 64, "64 bytes follow"),
    BAD_ROW(metadata_not_strings, "{\"__metadata__\":{\"a\":1}}", 0,
            "__metadata__ 'a' is a JSON number, not a string"),
    BAD_ROW(metadata_not_strings, "{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0,
            "is a JSON object, not a string"),
    BAD_ROW(metadata_not_strings, "{\"__metadata__\":{\"a\":[\"x\"]}}", 0, "is a JSON array"),
    BAD_ROW(metadata_not_strings, "{\"__metadata__\":{\"a\":null}}", 0, "is a JSON null"),
    BAD_ROW(metadata_not_strings, "{\"__metadata__\":{\"a\":true}}", 0, "is a JSON boolean"),
    BAD_ROW(metadata_not_strings, "{\"__metadata__\":\"x\"}", 0,
            "__metadata__ is a JSON string, not an object"),
    BAD_ROW(metadata_not_strings, "{\"__metadata__\":[]}", 0, "not an object of strings"),
    BAD_ROW(metadata_not_strings, "{\"__metadata__\":{},\"__metadata__\":{}}", 0,
            "__metadata__ appears twice"),
    BAD_ROW(duplicate_names,
            "{" ENTRY("t", "F32", "[1]", "0,4") "," ENTRY("t", "F32", "[1]", "4,8") "}", 8,
            "duplicate tensor name 't'"),
    BAD_ROW(duplicate_names, "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0,
            "duplicate metadata key 'k'"),
    /* Equal after unescaping. */
    BAD_ROW(duplicate_names,
            "{" ENTRY("t", "F32", "[1]", "0,4") "," ENTRY("\\u0074", "F32", "[1]", "4,8") "}", 8,
            "duplicate tensor name 't'"),
    BAD_ROW(bad_names, "{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
            "not valid UTF-8"),
    BAD_ROW(bad_names, "{" ENTRY("a\\u0000b", "U8", "[1]", "0,1") "}", 1, "\\u0000"),
    BAD_ROW(bad_names, "{\"__metadata__\":{\"k\\u0000\":\"v\"}}", 0, "NUL character"),
    BAD_ROW(bad_names, "{\"__metadata__\":{\"k\":\"v\\u0000\"}}", 0, "NUL character"),
};

/* Every row of bad_headers for `test` is refused (refused_at, failing at the row's line); the
 * case has at least one. */
static void refuse_rows(const char *test) {
    size_t n = 0;
    for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++) {
        const bad_header *b = &bad_headers[i];
        if (strcmp(b->test, test) != 0) continue;
        size_t hlen = strlen(b->hdr);
        refused_at(__FILE__, b->line, raw_file(hlen, b->hdr, hlen, b->data_len), b->want,
                   b->needle);
        n++;
    }
    CHECK_MSG(n > 0, "no rows for %s", test);
}

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
    refuse_rows("empty_and_blank_header");
    refused_at(__FILE__, __LINE__, raw_file(0, "", 0, 0), WM_EFORMAT, "not valid JSON");
}

/* ---- not JSON ---- */

WM_TEST(not_json) { refuse_rows("not_json"); }

WM_TEST(top_level_not_an_object) { refuse_rows("top_level_not_an_object"); }

WM_TEST(trailing_garbage_in_header) {
    refuse_rows("trailing_garbage_in_header");
    /* Padding must be white space, not NUL bytes. */
    refused_at(__FILE__, __LINE__, raw_file(6, "{}\0\0\0\0", 6, 0), WM_EFORMAT, "byte 0x00");
}

WM_TEST(not_utf8) { refuse_rows("not_utf8"); }

/* 200,000 levels: refused before the tree builder recurses (the stack would not survive it). */
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

WM_TEST(huge_and_inexact_numbers) { refuse_rows("huge_and_inexact_numbers"); }

WM_TEST(negative_and_overflowing_shapes) { refuse_rows("negative_and_overflowing_shapes"); }

WM_TEST(more_than_four_dims) { refuse_rows("more_than_four_dims"); }

WM_TEST(unknown_dtype) { refuse_rows("unknown_dtype"); }

WM_TEST(missing_or_repeated_fields) { refuse_rows("missing_or_repeated_fields"); }

/* ---- layout of the data section ---- */

WM_TEST(reversed_offsets) { refuse_rows("reversed_offsets"); }

WM_TEST(overlapping_offsets) { refuse_rows("overlapping_offsets"); }

WM_TEST(gapped_offsets) { refuse_rows("gapped_offsets"); }

WM_TEST(out_of_bounds_offsets) { refuse_rows("out_of_bounds_offsets"); }

WM_TEST(size_not_shape_times_dtype) { refuse_rows("size_not_shape_times_dtype"); }

/* Sub-byte types must fill whole bytes (the reference's MisalignedSlice). */
WM_TEST(misaligned_sub_byte) { refuse_rows("misaligned_sub_byte"); }

WM_TEST(trailing_bytes_after_data) { refuse_rows("trailing_bytes_after_data"); }

/* ---- __metadata__ ---- */

WM_TEST(metadata_not_strings) { refuse_rows("metadata_not_strings"); }

/* ---- names ---- */

WM_TEST(duplicate_names) { refuse_rows("duplicate_names"); }

WM_TEST(bad_names) { refuse_rows("bad_names"); }
