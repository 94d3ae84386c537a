/*
 * Every function of rtcell.h, used right and misused, against a region the test harness made:
 *   capi_test REGION_NAME FD OTHER_VERSION_NAME CORRUPT_NAME
 * The region holds COM channel "tx.com" (signal 1: float64; 2: dynamic, up to 16 bytes; group 10 of
 * signals 3: uint32 and 4: float64), COM channel "dup.com" (signal 1 again), ring "q" (4 frames of at
 * most 32 bytes) and signal channel "plain". Exit 0 when every check holds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "rtcell.h"

static int checks;

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        checks++;                                                                                \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
                    rtcell_last_error());                                                        \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

#define CODE(call, want)                                                                          \
    do {                                                                                          \
        Std_ReturnType got_ = (call);                                                             \
        checks++;                                                                                 \
        if (got_ != (want)) {                                                                     \
            fprintf(stderr, "%s:%d: %s returned 0x%02x, expected 0x%02x (last error: %s)\n", __FILE__, \
                    __LINE__, #call, got_, (unsigned)(want), rtcell_last_error());                \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static void test_regions(const char *name, int fd, const char *other_version, const char *corrupt) {
    rtcell_region *r = NULL;
    CHECK(rtcell_abi_version() == RTCELL_ABI_VERSION);
    CHECK(rtcell_layout_version() >= 1);
    CHECK(rtcell_last_error() != NULL);
    CODE(rtcell_region_attach_name(NULL, &r), E_NOT_OK);
    CODE(rtcell_region_attach_name(name, NULL), E_NOT_OK);
    CODE(rtcell_region_attach_name("no-such-region", &r), COM_SERVICE_NOT_AVAILABLE);
    CHECK(strlen(rtcell_last_error()) > 0);
    CODE(rtcell_region_attach_name("../etc/passwd", &r), COM_SERVICE_NOT_AVAILABLE);
    CODE(rtcell_region_attach_name(other_version, &r), COM_SERVICE_NOT_AVAILABLE);
    CHECK(strstr(rtcell_last_error(), "version") != NULL);
    CODE(rtcell_region_attach_name(corrupt, &r), COM_SERVICE_NOT_AVAILABLE);
    CODE(rtcell_region_attach_fd(-1, &r), E_NOT_OK);
    CODE(rtcell_region_attach_fd(9999, &r), COM_SERVICE_NOT_AVAILABLE);
    CODE(rtcell_region_attach_fd(fd, NULL), E_NOT_OK);
    CODE(rtcell_region_attach_fd(fd, &r), E_OK);
    CHECK(r != NULL);
    rtcell_region_detach(r);
    rtcell_region_detach(NULL);

    static uint64_t words[64];
    CODE(rtcell_region_attach_memory(NULL, 4096, &r), E_NOT_OK);
    CODE(rtcell_region_attach_memory((char *)words + 1, 256, &r), E_NOT_OK);
    CODE(rtcell_region_attach_memory(words, 4, &r), E_NOT_OK);
    CODE(rtcell_region_attach_memory(words, sizeof words, &r), COM_SERVICE_NOT_AVAILABLE); /* zeros: no magic */
    CODE(rtcell_region_attach_memory(words, sizeof words, NULL), E_NOT_OK);
}

static void test_com(rtcell_region *r) {
    rtcell_com *c = NULL;
    const char *tx[] = {"tx.com"};
    const char *both[] = {"tx.com", "dup.com"};
    const char *ring[] = {"q"};
    const char *missing[] = {"nope"};
    const char *null_name[] = {NULL};
    CODE(rtcell_com_open(NULL, tx, 1, &c), E_NOT_OK);
    CODE(rtcell_com_open(r, tx, 1, NULL), E_NOT_OK);
    CODE(rtcell_com_open(r, NULL, 1, &c), E_NOT_OK);
    CODE(rtcell_com_open(r, null_name, 1, &c), E_NOT_OK);
    CODE(rtcell_com_open(r, missing, 1, &c), E_NOT_OK);
    CODE(rtcell_com_open(r, ring, 1, &c), E_NOT_OK);
    CHECK(strstr(rtcell_last_error(), "not a COM channel") != NULL);
    CODE(rtcell_com_open(r, both, 2, &c), E_NOT_OK); /* signal id 1 twice */
    CODE(rtcell_com_open(r, tx, 1, &c), E_OK);

    /* Explicit handle: a fixed float64. */
    double v = 3.25, got = 0;
    size_t len = 99;
    uint8_t fresh = 99;
    CODE(rtcell_com_receive_signal(c, 1, &got, sizeof got, &len, &fresh), E_OK);
    CHECK(fresh == RTCELL_FRESH_NEVER && got == 0.0);
    CODE(rtcell_com_send_signal(NULL, 1, &v, sizeof v), E_NOT_OK);
    CODE(rtcell_com_send_signal(c, 1, NULL, sizeof v), E_NOT_OK);
    CODE(rtcell_com_send_signal(c, 1, &v, 4), E_NOT_OK);     /* fixed length is 8 */
    CODE(rtcell_com_send_signal(c, 1, &v, 16), E_NOT_OK);
    CODE(rtcell_com_send_signal(c, 77, &v, sizeof v), E_NOT_OK); /* unknown id */
    CODE(rtcell_com_send_signal(c, 1, &v, sizeof v), E_OK);
    CODE(rtcell_com_receive_signal(c, 1, &got, sizeof got, &len, &fresh), E_OK);
    CHECK(got == 3.25 && len == 8 && fresh == RTCELL_FRESH_NEW);
    CODE(rtcell_com_receive_signal(c, 1, &got, sizeof got, NULL, &fresh), E_OK);
    CHECK(fresh == RTCELL_FRESH_OLD);
    char small[4] = {0x55, 0x55, 0x55, 0x55};
    CODE(rtcell_com_receive_signal(c, 1, small, sizeof small, &len, NULL), E_NOT_OK); /* buffer too short */
    CHECK(small[0] == 0x55 && small[3] == 0x55);                                     /* and untouched */
    CODE(rtcell_com_receive_signal(c, 1, NULL, 8, NULL, NULL), E_NOT_OK);
    CODE(rtcell_com_receive_signal(c, 77, &got, sizeof got, NULL, NULL), E_NOT_OK);

    /* Signal info. */
    size_t max = 0;
    uint8_t dyn = 9;
    CODE(rtcell_com_signal_info(c, 2, &max, &dyn), E_OK);
    CHECK(max == 16 && dyn == 1);
    CODE(rtcell_com_signal_info(c, 1, &max, &dyn), E_OK);
    CHECK(max == 8 && dyn == 0);
    CODE(rtcell_com_signal_info(c, 77, &max, &dyn), E_NOT_OK);
    CODE(rtcell_com_signal_info(NULL, 1, &max, &dyn), E_NOT_OK);

    /* Dynamic length, every length 0..16 and one too many. */
    uint8_t blob[17], back[16];
    for (int i = 0; i < 17; i++) blob[i] = (uint8_t)(i + 1);
    for (size_t n = 0; n <= 16; n++) {
        CODE(rtcell_com_send_signal(c, 2, blob, n), E_OK);
        memset(back, 0, sizeof back);
        CODE(rtcell_com_receive_signal(c, 2, back, sizeof back, &len, NULL), E_OK);
        CHECK(len == n && memcmp(back, blob, n) == 0);
    }
    CODE(rtcell_com_send_signal(c, 2, blob, 17), E_NOT_OK);
    CODE(rtcell_com_send_signal(c, 2, NULL, 0), E_OK); /* zero bytes need no buffer */

    /* Groups through the explicit handle. */
    uint32_t seq = 7;
    double u = -1.5;
    CODE(rtcell_com_send_signal(c, 3, &seq, sizeof seq), E_OK);
    CODE(rtcell_com_send_signal(c, 4, &u, sizeof u), E_OK);
    CODE(rtcell_com_receive_signal(c, 3, &seq, sizeof seq, NULL, NULL), E_NOT_OK); /* group not received yet */
    CODE(rtcell_com_send_signal_group(c, 10), E_OK);
    CODE(rtcell_com_send_signal_group(c, 99), E_NOT_OK);
    CODE(rtcell_com_receive_signal_group(c, 10), E_OK);
    CODE(rtcell_com_receive_signal_group(c, 99), E_NOT_OK);
    CODE(rtcell_com_receive_signal_group(NULL, 10), E_NOT_OK);
    uint32_t seq_back = 0;
    double u_back = 0;
    CODE(rtcell_com_receive_signal(c, 3, &seq_back, sizeof seq_back, &len, &fresh), E_OK);
    CHECK(seq_back == 7 && len == 4 && fresh == RTCELL_FRESH_NEW);
    CODE(rtcell_com_receive_signal(c, 4, &u_back, sizeof u_back, NULL, NULL), E_OK);
    CHECK(u_back == -1.5);

    /* Blocking receive: a value not read yet returns at once; then a timeout. */
    v = 4.5;
    CODE(rtcell_com_send_signal(c, 1, &v, sizeof v), E_OK);
    CODE(rtcell_com_receive_signal_timeout(c, 1, &got, sizeof got, &len, 1000000), E_OK);
    CHECK(got == 4.5 && len == 8);
    CODE(rtcell_com_receive_signal_timeout(c, 1, &got, sizeof got, &len, 2000000), RTE_E_NO_DATA);
    CODE(rtcell_com_receive_signal_timeout(c, 4, &got, sizeof got, &len, 1000), E_NOT_OK); /* a member */
    CODE(rtcell_com_receive_signal_timeout(NULL, 1, &got, sizeof got, &len, 1000), E_NOT_OK);

    /* The AUTOSAR names need a current context. */
    CODE(rtcell_com_use(NULL), E_OK);
    CODE(Com_SendSignal(1, &v), COM_SERVICE_NOT_AVAILABLE);
    CODE(Com_ReceiveSignal(1, &got), COM_SERVICE_NOT_AVAILABLE);
    CODE(Com_SendSignalGroup(10), COM_SERVICE_NOT_AVAILABLE);
    CODE(Com_ReceiveSignalGroup(10), COM_SERVICE_NOT_AVAILABLE);
    CHECK(rtcell_cell_region() == NULL);
    CODE(rtcell_com_use(c), E_OK);
    CHECK(rtcell_cell_region() == r);
    v = 6.0;
    CODE(Com_SendSignal(1, &v), E_OK);
    CODE(Com_ReceiveSignal(1, &got), E_OK);
    CHECK(got == 6.0);
    CODE(Com_SendSignal(1, NULL), E_NOT_OK);
    CODE(Com_ReceiveSignal(1, NULL), E_NOT_OK);
    CODE(Com_SendSignal(77, &v), E_NOT_OK);
    CODE(Com_SendSignal(2, blob), E_NOT_OK);     /* dynamic: needs the Dyn variant */
    CODE(Com_ReceiveSignal(2, back), E_NOT_OK);
    CODE(Com_SendDynSignal(2, blob, 5), E_OK);
    uint16_t dlen = sizeof back;
    CODE(Com_ReceiveDynSignal(2, back, &dlen), E_OK);
    CHECK(dlen == 5 && memcmp(back, blob, 5) == 0);
    dlen = 2;
    CODE(Com_ReceiveDynSignal(2, back, &dlen), E_NOT_OK); /* 5 bytes do not fit in 2 */
    CODE(Com_ReceiveDynSignal(2, back, NULL), E_NOT_OK);
    CODE(Com_SendDynSignal(2, blob, 17), E_NOT_OK);
    CODE(Com_SendDynSignal(1, &v, 8), E_NOT_OK); /* fixed: needs Com_SendSignal */
    dlen = 8;
    CODE(Com_ReceiveDynSignal(1, &got, &dlen), E_NOT_OK);
    seq = 8;
    u = 2.5;
    CODE(Com_SendSignal(3, &seq), E_OK);
    CODE(Com_SendSignal(4, &u), E_OK);
    CODE(Com_SendSignalGroup(10), E_OK);
    CODE(Com_ReceiveSignalGroup(10), E_OK);
    CODE(Com_ReceiveSignal(3, &seq_back), E_OK);
    CODE(Com_ReceiveSignal(4, &u_back), E_OK);
    CHECK(seq_back == 8 && u_back == 2.5);
    CODE(Com_SendSignalGroup(99), E_NOT_OK);
    CODE(Com_ReceiveSignalGroup(99), E_NOT_OK);

    rtcell_com_counters k;
    CODE(rtcell_com_get_counters(c, &k), E_OK);
    CHECK(k.sent > 20 && k.received > 20 && k.received_new > 10 && k.errors > 10 && k.busy == 0);
    CODE(rtcell_com_get_counters(c, NULL), E_NOT_OK);
    CODE(rtcell_com_get_counters(NULL, &k), E_NOT_OK);
    rtcell_com_close(c);
    CODE(Com_SendSignal(1, &v), COM_SERVICE_NOT_AVAILABLE); /* closing the current context unbinds it */
    rtcell_com_close(NULL);

    /* Every COM channel of the region (count 0) clashes on id 1 too. */
    CODE(rtcell_com_open(r, NULL, 0, &c), E_NOT_OK);
}

static void test_queue(rtcell_region *r) {
    rtcell_queue *q = NULL;
    CODE(rtcell_queue_open(NULL, "q", &q), E_NOT_OK);
    CODE(rtcell_queue_open(r, NULL, &q), E_NOT_OK);
    CODE(rtcell_queue_open(r, "q", NULL), E_NOT_OK);
    CODE(rtcell_queue_open(r, "nope", &q), E_NOT_OK);
    CODE(rtcell_queue_open(r, "tx.com", &q), E_NOT_OK);
    CODE(rtcell_queue_open(r, "q", &q), RTE_E_OK);

    char buf[32];
    size_t len = 0;
    CODE(rtcell_queue_receive(q, buf, sizeof buf, &len), RTE_E_NO_DATA);
    CODE(rtcell_queue_receive_timeout(q, buf, sizeof buf, &len, 1000000), RTE_E_NO_DATA);
    CODE(rtcell_queue_send(q, "hello", 5), RTE_E_OK);
    CODE(rtcell_queue_receive(q, buf, 2, &len), E_NOT_OK); /* too small: stays queued, length reported */
    CHECK(len == 5);
    CODE(rtcell_queue_receive_timeout(q, buf, sizeof buf, &len, 1000000), RTE_E_OK);
    CHECK(len == 5 && memcmp(buf, "hello", 5) == 0);
    char big[33] = {0};
    CODE(rtcell_queue_send(q, big, sizeof big), E_NOT_OK);
    CODE(rtcell_queue_send(q, NULL, 4), E_NOT_OK);
    CODE(rtcell_queue_send(NULL, "x", 1), E_NOT_OK);
    CODE(rtcell_queue_receive(NULL, buf, sizeof buf, &len), E_NOT_OK);
    CODE(rtcell_queue_receive(q, NULL, 8, &len), E_NOT_OK);

    /* Fill it until it refuses: a refused message was never queued, so nothing queued was lost. */
    int sent = 0;
    for (int i = 0; i < 64; i++) {
        Std_ReturnType rc = rtcell_queue_send(q, &i, sizeof i);
        if (rc == RTE_E_LIMIT) break;
        CHECK(rc == RTE_E_OK);
        sent++;
    }
    CHECK(sent >= 1 && sent < 64);
    CODE(rtcell_queue_send(q, &sent, sizeof sent), RTE_E_LIMIT);
    int first = -1;
    CODE(rtcell_queue_receive(q, &first, sizeof first, &len), RTE_E_OK);
    CHECK(first == 0 && len == sizeof first);
    for (int i = 1; i < sent; i++) {
        int x = -1;
        CODE(rtcell_queue_receive(q, &x, sizeof x, &len), RTE_E_OK);
        CHECK(x == i);
    }
    rtcell_queue_counters k;
    CODE(rtcell_queue_get_counters(q, &k), RTE_E_OK);
    CHECK(k.sent == (uint64_t)sent + 1 && k.received == (uint64_t)sent + 1 && k.lost == 0 && k.refused >= 2 &&
          k.queued == 0);
    CODE(rtcell_queue_get_counters(q, NULL), E_NOT_OK);
    CODE(rtcell_queue_get_counters(NULL, &k), E_NOT_OK);
    rtcell_queue_close(q);
    rtcell_queue_close(NULL);
}

static void test_cell_attach(int fd) {
    /* The runner's call: a region in memory plus its COM channels, current at once. */
    const char *tx[] = {"tx.com"};
    const char *missing[] = {"nope"};
    CODE(rtcell_com_use(NULL), E_OK);
    CODE(rtcell_cell_attach(NULL, 4096, tx, 1), E_NOT_OK);
    CHECK(rtcell_cell_region() == NULL);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    void *base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(base != MAP_FAILED);
    CODE(rtcell_cell_attach(base, (size_t)st.st_size, missing, 1), E_NOT_OK);
    CHECK(rtcell_cell_region() == NULL);
    CODE(rtcell_cell_attach(base, (size_t)st.st_size, tx, 1), E_OK);
    CHECK(rtcell_cell_region() != NULL);
    double v = 9.0, got = 0;
    CODE(Com_SendSignal(1, &v), E_OK);
    CODE(Com_ReceiveSignal(1, &got), E_OK);
    CHECK(got == 9.0);
    /* Again on the same thread: the first binding is released, the new one current. */
    CODE(rtcell_cell_attach(base, (size_t)st.st_size, tx, 1), E_OK);
    CODE(Com_ReceiveSignal(1, &got), E_OK);
    CHECK(got == 9.0);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s REGION_NAME FD OTHER_VERSION_NAME CORRUPT_NAME\n", argv[0]);
        return 2;
    }
    test_regions(argv[1], atoi(argv[2]), argv[3], argv[4]);
    rtcell_region *r = NULL;
    CODE(rtcell_region_attach_name(argv[1], &r), E_OK);
    test_com(r);
    test_queue(r);
    test_cell_attach(atoi(argv[2]));
    rtcell_region_detach(r);
    printf("capi_test: %d checks passed\n", checks);
    return 0;
}
