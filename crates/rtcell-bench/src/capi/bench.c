/* The C side of `rtcell bench capi`: the example controller's step behind a call, and both ends of a
 * signal ping-pong through the AUTOSAR names of the C API (Com_SendSignal / Com_ReceiveSignal), each on
 * its thread's current COM context. Compiled into rtcell by crates/rtcell-bench/build.rs. */
#include <stdint.h>
#include <x86intrin.h>

#include "model.h"
#include "rtcell.h"

/* Signal ids of the ping-pong region (see capi.rs). */
#define PING 1u
#define PONG 2u

static inline uint64_t ticks(void) {
    _mm_lfence();
    uint64_t t = __rdtsc();
    _mm_lfence();
    return t;
}

double rtcell_bench_c_step(double r, double y) {
    rtU.r = r;
    rtU.y = y;
    model_step();
    return rtY.u;
}

void rtcell_bench_c_reset(void) { model_initialize(); }


/* Echoes every new PING value on PONG until it reads the value `last`; 2 once the TSC passes
 * `give_up` (the peer is gone or starved). */
int rtcell_bench_c_echo(uint64_t last, uint64_t give_up) {
    uint64_t seen = 0, v = 0, polls = 0;
    Std_ReturnType rc;
    for (;;) {
        if ((++polls & 0xfff) == 0 && ticks() > give_up) return 2;
        rc = Com_ReceiveSignal(PING, &v);
        if (rc == COM_BUSY) continue; /* the pinger was preempted mid-write: read again */
        if (rc != E_OK) return 1;
        if (v != seen) {
            seen = v;
            if (Com_SendSignal(PONG, &v) != E_OK) return 1;
            if (v == last) return 0;
        } else {
            _mm_pause();
        }
    }
}

/* Sends PING values first, first + 1, ... (n of them), each after the echo of the previous one, and
 * stores each round trip in TSC ticks. */
int rtcell_bench_c_ping(uint64_t first, uint64_t n, uint64_t *rtt, uint64_t give_up) {
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = first + i, back = 0, polls = 0;
        uint64_t t0 = ticks();
        if (Com_SendSignal(PING, &v) != E_OK) return 1;
        do {
            if ((++polls & 0xfff) == 0 && ticks() > give_up) return 2;
            Std_ReturnType rc = Com_ReceiveSignal(PONG, &back);
            if (rc != E_OK && rc != COM_BUSY) return 1;
        } while (back != v);
        rtt[i] = ticks() - t0;
    }
    return 0;
}
