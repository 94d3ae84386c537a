/*
 * The C API against a hostile peer, from C (run under valgrind memcheck by tests/fuzz_capi_c.rs):
 *   fuzz_capi FD BYTES CASES SEED COM_WORD TABLE_WORDS COM_WORDS Q_WORD O_WORD RING_WORDS
 * FD holds a region the harness made: COM channel "c" at word COM_WORD (TABLE_WORDS words of table,
 * COM_WORDS in all) with the signals of SIGS below and group 10, rings "q" (reject) and "o" (overwrite)
 * at Q_WORD and O_WORD (RING_WORDS each). A second thread scribbles the live table, the signal slots
 * and the rings (valid values mutated: lengths and offsets off by a little or a lot, entries swapped,
 * counts changed, sequence and length words, ring indices and frame headers) while this one calls
 * every COM and queue function with buffers of exactly the size it claims (odd cases: with canary
 * bytes around them). Every few hundred cases the scribbler stops and restores the region: the COM
 * handle must work again. Exit 0 and "N cases, 0 findings" when every check held.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rtcell.h"

#define CANARY 0x5a
#define PAD 16

static const struct {
    Com_SignalIdType id;
    size_t len;
} SIGS[] = {{1, 8}, {2, 1}, {3, 13}, {5, 4}, {6, 8}, {7, 2}};
#define NSIGS (sizeof SIGS / sizeof SIGS[0])
#define DYN_ID 4
#define DYN_MAX 24
#define GROUP 10
#define FRAME_MAX 16

static _Atomic uint64_t *W;
static uint64_t *orig;
static size_t nwords, com_word, table_words, com_words, q_word, o_word, ring_words;
static atomic_int stop_req, pause_req, paused, running;
static uint64_t seed, cases_done, n_mutations;

#define FINDING(...)                                                                                  \
    do {                                                                                              \
        fprintf(stderr, "fuzz_capi: FINDING after %llu cases, seed %llu: ", (unsigned long long)cases_done, \
                (unsigned long long)seed);                                                            \
        fprintf(stderr, __VA_ARGS__);                                                                 \
        fprintf(stderr, " (last error: %s)\n", rtcell_last_error());                                 \
        abort();                                                                                      \
    } while (0)

static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t below(uint64_t *s, uint64_t n) { return n ? next(s) % n : 0; }

static uint64_t get(size_t k) { return atomic_load_explicit(&W[k], memory_order_relaxed); }
static void put(size_t k, uint64_t v) { atomic_store_explicit(&W[k], v, memory_order_relaxed); }

/* A 32-bit half mutated near a valid value or to a boundary. */
static uint64_t near32(uint64_t *s, uint64_t v) {
    static const int64_t deltas[] = {1, -1, 2, -2, 7, 8, -8, 9, 16, 64, -64, 4096};
    switch (below(s, 6)) {
    case 0: return 0;
    case 1: return 0xffffffffull;
    case 2: return 0x7fffffffull + below(s, 3);
    case 3: return (v * 2) & 0xffffffffull;
    case 4: return below(s, com_words + 64);
    default: return (uint64_t)((int64_t)v + deltas[below(s, sizeof deltas / sizeof deltas[0])]) & 0xffffffffull;
    }
}

/* A 64-bit word mutated near its valid (or current) value. */
static uint64_t near64(uint64_t *s, uint64_t v, size_t k) {
    switch (below(s, 9)) {
    case 0: return (v & 0xffffffff00000000ull) | near32(s, v & 0xffffffffull);
    case 1: return (v & 0xffffffffull) | near32(s, v >> 32) << 32;
    case 2: return v ^ (1ull << below(s, 64));
    case 3: return next(s);
    case 4: return orig[k];
    case 5: return v + 16 * (below(s, 8) + 1);
    case 6: return v - 16 * (below(s, 8) + 1);
    case 7: return (uint64_t)1 << 63 | below(s, 1024);
    default: return below(s, 3) == 0 ? 0 : ~0ull;
    }
}

static void mutate(uint64_t *s) {
    size_t k;
    uint64_t v;
    if (below(s, 2) == 0) { /* undo: a table word back to its valid value, so calls race a table in flux */
        k = below(s, 8) ? com_word + 16 + below(s, table_words - 16) : com_word;
        put(k, orig[k]);
        return;
    }
    switch (below(s, 12)) {
    case 10: case 11: { /* forge: a signal grown (its slot still inside the channel) with a value that long */
        size_t sig = below(s, (table_words - 16) / 2 - 1); /* the last entry is the group's */
        k = com_word + 16 + 2 * sig + 1;
        uint64_t off = orig[k] & 0xffffffffull, len = (orig[k] >> 32) + 1 + below(s, 40);
        put(k, off | len << 32);
        if ((orig[k - 1] >> 16 & 0xffff) == 0xffff && com_word + off + 2 + (len + 7) / 8 <= com_word + com_words) {
            size_t slot = com_word + off;
            put(slot + 1, len);
            put(slot, (get(slot) + 2) & ~1ull);
        }
        return;
    }
    case 0: case 1: case 2: case 3: /* a table entry: lengths, offsets, group, flags, id */
        k = com_word + 16 + below(s, table_words - 16);
        if (below(s, 5) == 0) { /* another entry's valid word */
            size_t other = com_word + 16 + below(s, table_words - 16);
            put(k, orig[other]);
            return;
        }
        put(k, near64(s, orig[k], k));
        return;
    case 4: /* the counts word */
        k = com_word;
        v = orig[k];
        put(k, below(s, 2) ? v + (below(s, 3) - 1) : v + ((below(s, 3) - 1) << 32));
        return;
    case 5: case 6: /* a signal or group slot: sequence and length words */
        k = com_word + table_words + below(s, com_words - table_words);
        v = get(k);
        put(k, below(s, 3) == 0 ? (v | 1) : near64(s, v, k));
        return;
    default: { /* a ring: control words or a frame header */
        size_t base = below(s, 2) ? q_word : o_word;
        k = base + (below(s, 2) ? below(s, 24) : 24 + 2 * below(s, (ring_words - 24) / 2) + below(s, 2));
        v = get(k);
        put(k, near64(s, v, k));
        return;
    }
    }
}

static void restore(void) {
    for (size_t k = com_word; k < com_word + table_words; k++) {
        if (k == com_word || k >= com_word + 16) put(k, orig[k]);
    }
    for (size_t k = 0; k < ring_words; k++) {
        put(q_word + k, orig[q_word + k]);
        put(o_word + k, orig[o_word + k]);
    }
}

static void *hostile(void *arg) {
    uint64_t s = seed ^ 0x5bd1e995ull;
    (void)arg;
    while (!atomic_load(&stop_req)) {
        if (atomic_load(&pause_req)) {
            restore();
            atomic_store(&paused, 1);
            while (atomic_load(&pause_req) && !atomic_load(&stop_req)) usleep(100);
            atomic_store(&paused, 0);
            continue;
        }
        mutate(&s);
        n_mutations++;
        if (below(&s, 16) == 0) sched_yield();
    }
    return NULL;
}

/* A buffer of n bytes for the library: exactly n bytes of heap (memcheck sees any access past it), or
 * with canaries around it. */
typedef struct {
    uint8_t *block, *p;
    size_t n;
    int guarded;
} buf_t;

static buf_t buf_new(size_t n, int guarded, uint8_t fill) {
    buf_t b = {0};
    b.n = n;
    b.guarded = guarded;
    if (guarded) {
        b.block = malloc(n + 2 * PAD);
        memset(b.block, CANARY, n + 2 * PAD);
        b.p = b.block + PAD;
    } else {
        b.block = malloc(n ? n : 1);
        b.p = b.block;
    }
    if (!b.block) FINDING("out of memory");
    memset(b.p, fill, n);
    return b;
}

static void buf_free(buf_t *b, const char *what) {
    if (b->guarded) {
        for (size_t i = 0; i < PAD; i++) {
            if (b->block[i] != CANARY || b->block[PAD + b->n + i] != CANARY)
                FINDING("%s wrote outside its %zu-byte buffer", what, b->n);
        }
    }
    free(b->block);
}

/* How the calls ended (coverage: the hostile table must make some refuse, the clean one succeed). */
static uint64_t n_ok, n_unavailable, n_other;

static int is(Std_ReturnType rc, Std_ReturnType a, Std_ReturnType b, Std_ReturnType c, Std_ReturnType d) {
    if ((rc & ~RTE_E_LOST_DATA) == E_OK) n_ok++;
    else if (rc == COM_SERVICE_NOT_AVAILABLE) n_unavailable++;
    else n_other++;
    return rc == a || rc == b || rc == c || rc == d;
}

static rtcell_region *region;
static rtcell_com *com;
/* Whether com was opened on the clean table (one opened mid-scribble holds what the peer wrote then, and
 * is reopened once the table is restored, as a program does on a lasting COM_SERVICE_NOT_AVAILABLE). */
static int com_clean;
static rtcell_queue *qtx, *qrx, *otx, *orx;

static void open_queues(void) {
    rtcell_queue_close(qtx); rtcell_queue_close(qrx); rtcell_queue_close(otx); rtcell_queue_close(orx);
    if (rtcell_queue_open(region, "q", &qtx) || rtcell_queue_open(region, "q", &qrx) ||
        rtcell_queue_open(region, "o", &otx) || rtcell_queue_open(region, "o", &orx))
        FINDING("a queue does not open on a restored ring");
}

/* The scribbler stopped and the region restored: the COM handle works again, the queues reopen. */
static void check_recovery(uint64_t *s) {
    if (atomic_load(&running)) {
        atomic_store(&pause_req, 1);
        while (!atomic_load(&paused)) usleep(50);
    } else {
        restore();
    }
    if (!com_clean) {
        rtcell_com_close(com);
        const char *name = "c";
        if (rtcell_com_open(region, &name, 1, &com) != E_OK) FINDING("rtcell_com_open on a restored table");
        rtcell_com_use(com);
        com_clean = 1;
    }
    uint64_t v = next(s), got = 0;
    if (Com_SendSignal(1, &v) != E_OK) FINDING("Com_SendSignal after the table was restored");
    if (Com_ReceiveSignal(1, &got) != E_OK || got != v) FINDING("Com_ReceiveSignal after the table was restored");
    open_queues();
    if (rtcell_queue_send(qtx, &v, sizeof v) != RTE_E_OK) FINDING("queue send on a restored ring");
    size_t len = 0;
    got = 0;
    if (rtcell_queue_receive(qrx, &got, sizeof got, &len) != RTE_E_OK || got != v || len != sizeof v)
        FINDING("queue receive on a restored ring");
    if (atomic_load(&running)) {
        atomic_store(&pause_req, 0);
        while (atomic_load(&paused)) usleep(50);
    }
}

static void one_case(uint64_t *s, int guarded) {
    size_t i = below(s, NSIGS), len = 0;
    uint8_t fresh = 0;
    Std_ReturnType rc;
    buf_t b;
    uint16_t dl;
    rtcell_queue *q;
    switch (below(s, 12)) {
    case 0:
        b = buf_new(SIGS[i].len, guarded, (uint8_t)next(s));
        rc = Com_SendSignal(SIGS[i].id, b.p);
        if (!is(rc, E_OK, COM_SERVICE_NOT_AVAILABLE, E_NOT_OK, E_OK)) FINDING("Com_SendSignal: 0x%02x", rc);
        buf_free(&b, "Com_SendSignal");
        break;
    case 1: case 2:
        b = buf_new(SIGS[i].len, guarded, 0xee);
        rc = Com_ReceiveSignal(SIGS[i].id, b.p);
        if (!is(rc, E_OK, COM_SERVICE_NOT_AVAILABLE, E_NOT_OK, COM_BUSY)) FINDING("Com_ReceiveSignal: 0x%02x", rc);
        buf_free(&b, "Com_ReceiveSignal");
        break;
    case 3:
        b = buf_new(below(s, DYN_MAX + 8), guarded, (uint8_t)next(s));
        rc = Com_SendDynSignal(DYN_ID, b.n ? b.p : NULL, (uint16_t)b.n);
        if (!is(rc, E_OK, COM_SERVICE_NOT_AVAILABLE, E_NOT_OK, E_OK)) FINDING("Com_SendDynSignal: 0x%02x", rc);
        buf_free(&b, "Com_SendDynSignal");
        break;
    case 4:
        b = buf_new(below(s, DYN_MAX + 8), guarded, 0xee);
        dl = (uint16_t)b.n;
        rc = Com_ReceiveDynSignal(DYN_ID, b.p, &dl);
        if (!is(rc, E_OK, COM_SERVICE_NOT_AVAILABLE, E_NOT_OK, COM_BUSY)) FINDING("Com_ReceiveDynSignal: 0x%02x", rc);
        if (rc == E_OK && dl > b.n) FINDING("Com_ReceiveDynSignal: length %u for a %zu-byte buffer", dl, b.n);
        buf_free(&b, "Com_ReceiveDynSignal");
        break;
    case 5:
        b = buf_new(below(s, 32), guarded, 0xee);
        rc = rtcell_com_receive_signal(com, below(s, 2) ? SIGS[i].id : DYN_ID, b.p, b.n, &len, &fresh);
        if (!is(rc, E_OK, COM_SERVICE_NOT_AVAILABLE, E_NOT_OK, COM_BUSY)) FINDING("rtcell_com_receive_signal: 0x%02x", rc);
        if (rc == E_OK && (len > b.n || fresh > RTCELL_FRESH_NEW)) FINDING("rtcell_com_receive_signal: length %zu > %zu", len, b.n);
        buf_free(&b, "rtcell_com_receive_signal");
        break;
    case 6:
        rc = below(s, 2) ? Com_SendSignalGroup(GROUP) : Com_ReceiveSignalGroup(GROUP);
        if (!is(rc, E_OK, COM_SERVICE_NOT_AVAILABLE, E_NOT_OK, COM_BUSY)) FINDING("group call: 0x%02x", rc);
        break;
    case 7: {
        size_t max = 0;
        uint8_t dyn = 0;
        rc = rtcell_com_signal_info(com, SIGS[i].id, &max, &dyn);
        if (rc == E_OK && (max != SIGS[i].len || dyn)) FINDING("signal_info: %zu bytes, not %zu", max, SIGS[i].len);
        break;
    }
    case 8: case 9:
        q = below(s, 2) ? qtx : otx;
        b = buf_new(below(s, FRAME_MAX + 4), guarded, (uint8_t)next(s));
        rc = rtcell_queue_send(q, b.n ? b.p : NULL, b.n);
        if (!is(rc, RTE_E_OK, RTE_E_LIMIT, E_NOT_OK, COM_SERVICE_NOT_AVAILABLE)) FINDING("rtcell_queue_send: 0x%02x", rc);
        buf_free(&b, "rtcell_queue_send");
        break;
    default:
        q = below(s, 2) ? qrx : orx;
        b = buf_new(below(s, FRAME_MAX + 4), guarded, 0xee);
        rc = rtcell_queue_receive(q, b.n ? b.p : NULL, b.n, &len);
        if (!is(rc & ~RTE_E_LOST_DATA, RTE_E_OK, RTE_E_NO_DATA, E_NOT_OK, COM_SERVICE_NOT_AVAILABLE))
            FINDING("rtcell_queue_receive: 0x%02x", rc);
        if (rc == RTE_E_OK && len > b.n) FINDING("rtcell_queue_receive: length %zu > %zu", len, b.n);
        buf_free(&b, "rtcell_queue_receive");
        break;
    }
}

int main(int argc, char **argv) {
    if (rtcell_abi_version() != RTCELL_ABI_VERSION) {
        fprintf(stderr, "librtcell is of another API version than rtcell.h: rebuild it\n");
        return 2;
    }
    if (argc != 11) {
        fprintf(stderr, "usage: fuzz_capi FD BYTES CASES SEED COM_WORD TABLE_WORDS COM_WORDS Q_WORD O_WORD RING_WORDS\n");
        return 2;
    }
    int fd = atoi(argv[1]);
    size_t bytes = strtoull(argv[2], NULL, 10);
    uint64_t cases = strtoull(argv[3], NULL, 10);
    seed = strtoull(argv[4], NULL, 10);
    com_word = strtoull(argv[5], NULL, 10);
    table_words = strtoull(argv[6], NULL, 10);
    com_words = strtoull(argv[7], NULL, 10);
    q_word = strtoull(argv[8], NULL, 10);
    o_word = strtoull(argv[9], NULL, 10);
    ring_words = strtoull(argv[10], NULL, 10);
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) { perror("mmap"); return 2; }
    W = base;
    nwords = bytes / 8;
    orig = malloc(bytes);
    for (size_t k = 0; k < nwords; k++) orig[k] = get(k);
    if (rtcell_region_attach_memory(base, bytes, &region) != E_OK) { fprintf(stderr, "attach: %s\n", rtcell_last_error()); return 2; }
    uint64_t s = seed;
    check_recovery(&s); /* opens the COM context and the queues on the clean region */
    pthread_t t;
    atomic_store(&running, 1);
    if (pthread_create(&t, NULL, hostile, NULL) != 0) { fprintf(stderr, "pthread_create failed\n"); return 2; }
    for (cases_done = 0; cases_done < cases; cases_done++) {
        one_case(&s, (int)(cases_done & 1));
        if (cases_done % 512 == 511) check_recovery(&s);
        if (cases_done % 4096 == 4095) { /* a context opened while the table is being scribbled */
            rtcell_com_close(com);
            com = NULL;
            com_clean = 0;
            const char *name = "c";
            if (rtcell_com_open(region, &name, 1, &com) != E_OK) com = NULL;
            /* A table the peer rewrote before the open is what the context now holds (the AUTOSAR calls
             * carry no length): a program checks its signals' lengths after opening, as rtcell.h says. */
            for (size_t i = 0; com && i < NSIGS; i++) {
                size_t max = 0;
                uint8_t dyn = 1;
                if (rtcell_com_signal_info(com, SIGS[i].id, &max, &dyn) != E_OK || max != SIGS[i].len || dyn) {
                    rtcell_com_close(com);
                    com = NULL;
                }
            }
            if (com) rtcell_com_use(com); else check_recovery(&s);
        }
    }
    atomic_store(&stop_req, 1);
    pthread_join(t, NULL);
    atomic_store(&running, 0);
    check_recovery(&s);
    rtcell_queue_close(qtx); rtcell_queue_close(qrx); rtcell_queue_close(otx); rtcell_queue_close(orx);
    rtcell_com_close(com);
    rtcell_region_detach(region);
    free(orig);
    munmap(base, bytes);
    printf("fuzz_capi: calls ok %llu, refused as unavailable %llu, other codes %llu; %llu hostile writes\n",
           (unsigned long long)n_ok, (unsigned long long)n_unavailable, (unsigned long long)n_other,
           (unsigned long long)n_mutations);
    printf("fuzz_capi: %llu cases, 0 findings\n", (unsigned long long)cases_done);
    return 0;
}
