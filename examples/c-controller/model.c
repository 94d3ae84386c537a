/* The controller's step: a dense state-space update in the operation order
 * crates/rtcell-control/src/controller.rs calls normative, so the outputs are the Rust f64 step's bit
 * for bit. Each state's sum starts at +0.0 and adds A[i][j] * x[j] for j = 0 .. NX-1, then B w, in that
 * order; the update runs MODEL_BLOCK rows at a time over the column-blocked copy of A (model_At), so a
 * block's independent sums sit side by side in registers and the compiler packs pairs of them into
 * SIMD instructions (the Rust step does the same; GCC does so at -O2, its -O3 vectoriser does worse). Compile with -ffp-contract=off (no fused multiply-add). No C library. */
#include "model.h"

#if MODEL_BLOCK != 16
#error "model_step is written for blocks of 16 rows: regenerate model_data with MODEL_BLOCK 16"
#endif

ExtU rtU;
ExtY rtY;
DW rtDW;

void model_initialize(void) {
    int i;
    for (i = 0; i < MODEL_NX; i++) {
        rtDW.x[i] = 0.0;
        rtDW.xn[i] = 0.0;
    }
    rtU.r = 0.0;
    rtU.y = 0.0;
    rtY.u = 0.0;
}

void model_step(void) {
    int b, i, j, k;
    real_T acc;
    const real_T r = rtU.r;
    const real_T y = rtU.y;
    /* Output: u = C x + D w. */
    acc = 0.0;
    for (j = 0; j < MODEL_NX; j++) {
        acc = acc + model_C[j] * rtDW.x[j];
    }
    acc = acc + model_D[0] * r;
    acc = acc + model_D[1] * y;
    rtY.u = acc;
    /* Update: x = A x + B w, MODEL_BLOCK rows at a time. */
    for (b = 0; b < MODEL_NBLOCKS; b++) {
        /* One accumulator per row of the block, as separate variables so they stay in registers. */
        real_T s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, s5 = 0.0, s6 = 0.0, s7 = 0.0, s8 = 0.0, s9 = 0.0, s10 = 0.0, s11 = 0.0, s12 = 0.0, s13 = 0.0, s14 = 0.0, s15 = 0.0;
        for (j = 0; j < MODEL_NX; j++) {
            const real_T xj = rtDW.x[j];
            const real_T *col = model_At[b][j];
            s0 = s0 + col[0] * xj;
            s1 = s1 + col[1] * xj;
            s2 = s2 + col[2] * xj;
            s3 = s3 + col[3] * xj;
            s4 = s4 + col[4] * xj;
            s5 = s5 + col[5] * xj;
            s6 = s6 + col[6] * xj;
            s7 = s7 + col[7] * xj;
            s8 = s8 + col[8] * xj;
            s9 = s9 + col[9] * xj;
            s10 = s10 + col[10] * xj;
            s11 = s11 + col[11] * xj;
            s12 = s12 + col[12] * xj;
            s13 = s13 + col[13] * xj;
            s14 = s14 + col[14] * xj;
            s15 = s15 + col[15] * xj;
        }
        {
            const real_T sum[MODEL_BLOCK] = {s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15};
            for (k = 0; k < MODEL_BLOCK && b * MODEL_BLOCK + k < MODEL_NX; k++) {
                i = b * MODEL_BLOCK + k;
                acc = sum[k];
                acc = acc + model_B[i][0] * r;
                acc = acc + model_B[i][1] * y;
                rtDW.xn[i] = acc;
            }
        }
    }
    for (i = 0; i < MODEL_NX; i++) {
        rtDW.x[i] = rtDW.xn[i];
    }
}
