/* Problem grids shared by the forward and backward tests. */
#include "test_grids.h"

/* A config of this shape that also checks S_dmask. */
static test_config shaped(flashc_dtype dtype, int64_t batch, int64_t nheads, int64_t nheads_k,
                          int64_t d, int64_t dv, int64_t seqlen_q, int64_t seqlen_k) {
    test_config c = test_config_shaped(dtype, batch, nheads, nheads_k, d, dv, seqlen_q, seqlen_k);
    c.with_sdmask = 1;
    return c;
}

static test_config base(flashc_dtype dtype) { return shaped(dtype, 2, 4, 2, 24, 20, 37, 45); }

int grid_features_alone(test_config *cfgs, flashc_dtype dtype) {
    int n = 0;
    test_config c;
    cfgs[n++] = base(dtype);                                  /* no feature */
    c = base(dtype); c.options.causal = 1; cfgs[n++] = c;
    c = base(dtype); c.options.window_left = -1; c.options.window_right = 5; cfgs[n++] = c;
    c = base(dtype); c.options.window_left = 5; c.options.window_right = -1; cfgs[n++] = c;
    c = base(dtype); c.options.window_left = 0; c.options.window_right = 0; cfgs[n++] = c;
    c = base(dtype); c.options.window_left = 3; c.options.window_right = 7; cfgs[n++] = c;
    c = base(dtype); c.options.causal = 1; c.options.window_left = 4; cfgs[n++] = c;
    /* causal decides the right bound (flashc.h: causal is window (-1, 0)
     * combined with window_left), whatever window_right says */
    c = base(dtype); c.options.causal = 1; c.options.window_left = 4; c.options.window_right = 3;
    cfgs[n++] = c;
    c = base(dtype); c.options.softcap = 1.5; c.input_scale = 2.0; cfgs[n++] = c;
    c = base(dtype); c.alibi = 1; cfgs[n++] = c;
    c = base(dtype); c.alibi = 2; cfgs[n++] = c;
    c = base(dtype); c.nheads_k = 1; cfgs[n++] = c;           /* MQA */
    c = base(dtype); c.nheads = 6; c.nheads_k = 2; cfgs[n++] = c; /* GQA 3 */
    c = base(dtype); c.nheads_k = 4; cfgs[n++] = c;           /* MHA */
    c = base(dtype); c.options.softmax_scale = 0.31; cfgs[n++] = c;
    c = base(dtype); c.options.softmax_scale = -0.2; cfgs[n++] = c;
    c = base(dtype); c.with_lse = 0; cfgs[n++] = c;
    c = base(dtype); c.with_sdmask = 0; cfgs[n++] = c;
    c = base(dtype); c.options.dropout_p = 0.2; c.options.dropout_seed = 1234; cfgs[n++] = c;
    c = base(dtype); c.with_dlse = 1; cfgs[n++] = c;
    c = base(dtype); c.options.num_threads = 1; cfgs[n++] = c;
    return n;
}

int grid_feature_combinations(test_config *cfgs, flashc_dtype dtype) {
    int n = 0;
    for (int flip = 0; flip < 2; ++flip) {
        int64_t sq = flip ? 41 : 29, sk = flip ? 29 : 41;
        test_config c;
#define SHAPE c = base(dtype); c.seqlen_q = sq; c.seqlen_k = sk
        SHAPE; c.options.causal = 1; c.options.softcap = 2.0; c.alibi = 1; c.nheads = 6;
        cfgs[n++] = c;
        SHAPE; c.options.window_left = 7; c.options.window_right = 3; c.alibi = 2;
        c.nheads_k = 1; c.options.softmax_scale = 0.5; cfgs[n++] = c;
        SHAPE; c.options.softcap = 1.0; c.input_scale = 2.0; c.options.window_left = -1;
        c.options.window_right = 4; c.options.dropout_p = 0.15; c.options.dropout_seed = 77;
        cfgs[n++] = c;
        SHAPE; c.options.causal = 1; c.options.dropout_p = 0.3; c.options.dropout_seed = 5;
        c.options.dropout_offset = 1ull << 33; c.alibi = 2; c.options.softcap = 3.0;
        c.with_dlse = 1; cfgs[n++] = c;
        SHAPE; c.options.window_left = 4; c.options.window_right = -1; c.options.softcap = 2.5;
        c.options.dropout_p = 0.5; c.options.dropout_seed = 0xdeadbeefcafeull; c.nheads_k = 1;
        cfgs[n++] = c;
        SHAPE; c.options.window_left = 0; c.options.window_right = 0; c.alibi = 1;
        c.options.dropout_p = 0.1; c.options.dropout_seed = 3; cfgs[n++] = c;
        SHAPE; c.options.causal = 1; c.options.window_left = 9; c.options.softcap = 1.7;
        c.alibi = 2; c.options.dropout_p = 0.25; c.options.dropout_seed = 11;
        c.options.dropout_offset = 12345; c.nheads = 6; c.with_dlse = 1;
        c.layout = TEST_LAYOUT_PADDED; cfgs[n++] = c;
#undef SHAPE
    }
    return n;
}

int grid_sequence_lengths(test_config *cfgs, flashc_dtype dtype) {
    static const int64_t pairs[][2] = {{1, 1},   {1, 17},  {17, 1},  {2, 3},   {13, 13},
                                       {31, 37}, {37, 31}, {97, 11}, {11, 97}, {53, 53}};
    int n = 0;
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; ++p) {
        for (int mode = 0; mode < 3; ++mode) {
            test_config c = shaped(dtype, 2, 2, 1, 16, 16, pairs[p][0], pairs[p][1]);
            if (mode == 1) c.options.causal = 1;
            if (mode == 2) {
                c.options.window_left = 3;
                c.options.window_right = 2;
            }
            cfgs[n++] = c;
        }
    }
    /* Windows right at the sizes where a bound stops binding (right vs
     * sq - 1, left vs sk - 1), sq > sk and sq < sk: an implementation
     * that drops a bound too early (e.g. right >= sk) shows up here. */
    static const int64_t window_shapes[][2] = {{17, 1}, {20, 7}, {7, 20}};
    for (size_t p = 0; p < sizeof window_shapes / sizeof window_shapes[0]; ++p) {
        int64_t sq = window_shapes[p][0], sk = window_shapes[p][1];
        const int64_t rights[3] = {sq - 2, sq - 1, sk}, lefts[3] = {sk - 2, sk - 1, sq};
        for (int r = 0; r < 3; ++r) {
            test_config c = shaped(dtype, 2, 2, 1, 8, 8, sq, sk);
            c.options.window_left = lefts[r] < 0 ? 0 : lefts[r];
            c.options.window_right = rights[r] < 0 ? 0 : rights[r];
            cfgs[n++] = c;
            c.options.window_left = r == 0 ? -1 : 1; /* right bound alone */
            cfgs[n++] = c;
            c.options.window_left = lefts[r] < 0 ? 0 : lefts[r]; /* left bound alone */
            c.options.window_right = -1;
            cfgs[n++] = c;
        }
    }
    return n;
}

int grid_tile_boundaries(test_config *cfgs, flashc_dtype dtype) {
    static const int64_t full[] = {63, 64, 65, 127, 128, 129, 255, 257};
    static const int64_t quick[] = {63, 65, 129};
    const int64_t *lens = test_quick() ? quick : full;
    int count = test_quick() ? 3 : 8;
    int n = 0;
    for (int l = 0; l < count; ++l) {
        for (int causal = 0; causal < 2; ++causal) {
            test_config c = shaped(dtype, 1, 2, 1, 8, 8, lens[l], lens[l]);
            c.options.causal = causal;
            cfgs[n++] = c;
        }
    }
    static const int64_t mixed_full[][2] = {{63, 129}, {129, 63}, {255, 257}, {257, 128}, {65, 255}, {128, 1}};
    static const int64_t mixed_quick[][2] = {{63, 129}, {129, 63}};
    int mixed = test_quick() ? 2 : 6;
    for (int m = 0; m < mixed; ++m) {
        const int64_t *sizes = test_quick() ? mixed_quick[m] : mixed_full[m];
        test_config c = shaped(dtype, 1, 2, 1, 8, 8, sizes[0], sizes[1]);
        c.options.causal = m & 1;
        if (m == 2) {
            c.options.window_left = 65;
            c.options.window_right = 63;
        }
        cfgs[n++] = c;
    }
    if (!test_quick()) {
        /* several tiles in both directions, wider heads, threads busy */
        test_config c = shaped(dtype, 1, 2, 1, 64, 64, 513, 513);
        c.options.causal = 1;
        c.with_sdmask = 0;
        cfgs[n++] = c;
        c.d = c.dv = 16;
        c.seqlen_q = 1031;
        c.seqlen_k = 777;
        c.options.causal = 0;
        c.options.window_left = 300;
        c.options.window_right = 129;
        c.alibi = 1;
        cfgs[n++] = c;
    }
    return n;
}

int grid_head_dims(test_config *cfgs, flashc_dtype dtype) {
    static const int64_t dims[] = {1, 3, 7, 31, 33, 64, 96, 128, 129, 200, 256};
    static const int64_t pairs[][2] = {{64, 32}, {32, 128}, {7, 200}, {256, 1},
                                       {1, 256}, {129, 64}, {200, 256}, {256, 256}};
    int n = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
        test_config c = shaped(dtype, 1, 2, 1, dims[i], dims[i], 9, 21);
        c.options.causal = (int)(i & 1);
        cfgs[n++] = c;
    }
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; ++i) {
        test_config c = shaped(dtype, 1, 2, 1, pairs[i][0], pairs[i][1], 19, 11);
        c.options.window_left = (int64_t)i;
        c.options.window_right = 2;
        cfgs[n++] = c;
    }
    return n;
}

int grid_dtypes(test_config *cfgs) {
    static const flashc_dtype all[] = {FLASHC_DTYPE_BFLOAT16, FLASHC_DTYPE_FLOAT16,
                                       FLASHC_DTYPE_FLOAT32, FLASHC_DTYPE_FLOAT64};
    int64_t big = test_quick() ? 65 : 129;
    int n = 0;
    for (int t = 0; t < 4; ++t) {
        test_config c = shaped(all[t], 1, 2, 1, 64, 64, big, big);
        cfgs[n++] = c;
        c.options.causal = 1;
        c.alibi = 2;
        cfgs[n++] = c;
        c = base(all[t]);
        c.options.softcap = 1.2;
        c.input_scale = 2.0;
        c.options.window_left = 6;
        c.options.window_right = 1;
        cfgs[n++] = c;
        c = base(all[t]);
        c.options.dropout_p = 0.17;
        c.options.dropout_seed = 2026;
        cfgs[n++] = c;
        c = base(all[t]);
        c.d = c.dv = 128;
        c.seqlen_q = 65;
        c.seqlen_k = 97;
        c.nheads = 4;
        c.nheads_k = 1;
        c.batch = 1;
        c.with_dlse = 1;
        cfgs[n++] = c;
    }
    return n;
}

int grid_layouts(test_config *cfgs) {
    static const test_layout layouts[] = {TEST_LAYOUT_PADDED, TEST_LAYOUT_HEAD_MAJOR,
                                          TEST_LAYOUT_SEQ_MAJOR, TEST_LAYOUT_PACKED};
    static const flashc_dtype dtypes[] = {FLASHC_DTYPE_FLOAT32, FLASHC_DTYPE_BFLOAT16};
    int n = 0;
    for (int l = 0; l < 4; ++l) {
        for (int t = 0; t < 2; ++t) {
            test_config c = base(dtypes[t]);
            c.layout = layouts[l];
            c.d = c.dv = 32;
            c.seqlen_q = c.seqlen_k = 70;
            c.nheads = c.nheads_k = 4; /* packed: (b, s, 3, h, d) */
            c.options.causal = 1;
            c.alibi = 2;
            c.with_dlse = 1;
            cfgs[n++] = c;
            c.nheads_k = 2; /* GQA: packed (b, s, h + 2 hk, d) */
            c.options.causal = 0;
            c.options.window_left = 10;
            c.options.window_right = 3;
            c.options.dropout_p = 0.2;
            c.options.dropout_seed = 8;
            c.alibi = 0;
            c.options.softcap = 2.0;
            cfgs[n++] = c;
        }
    }
    return n;
}
