/*
 * rtcell.h: the C API of rtcell channels (AUTOSAR-COM-style signals and signal groups, RTE-style queues).
 * Generated from crates/rtcell-capi by cbindgen; do not edit (refresh: RTCELL_BLESS=1 cargo test -p rtcell-capi --test header).
 */

#ifndef RTCELL_H
#define RTCELL_H

#include <stddef.h>
#include <stdint.h>

/*
 Freshness of a received value: the signal was never written (the buffer holds zeros).
 */
#define RTCELL_FRESH_NEVER 0

/*
 Freshness: the value was read before by this handle.
 */
#define RTCELL_FRESH_OLD 1

/*
 Freshness: a value this handle had not read.
 */
#define RTCELL_FRESH_NEW 2

/*
 Version of this API (`rtcell_abi_version()`). 2: `rtcell_queue_counters` gained `refused`.
 */
#define RTCELL_ABI_VERSION 2

/*
 Most COM channels one context binds.
 */
#define RTCELL_MAX_COM_CHANNELS 8

/*
 A COM context (opaque to C).
 */
typedef struct rtcell_com rtcell_com;

/*
 A queue handle (opaque to C): one side of one ring; a ring has one sender and one receiver.
 */
typedef struct rtcell_queue rtcell_queue;

/*
 An attached region (opaque to C).
 */
typedef struct rtcell_region rtcell_region;

/*
 AUTOSAR `Std_ReturnType`.
 */
typedef uint8_t Std_ReturnType;

/*
 AUTOSAR `Com_SignalIdType`.
 */
typedef uint16_t Com_SignalIdType;

/*
 AUTOSAR `Com_SignalGroupIdType`.
 */
typedef uint16_t Com_SignalGroupIdType;

/*
 What this handle's calls did (not shared: the peer's calls are its own).
 */
typedef struct rtcell_com_counters {
  /*
   Signals and signal groups sent.
   */
  uint64_t sent;
  /*
   Signals and signal groups received (new or not).
   */
  uint64_t received;
  /*
   Of those, values this handle had not read before.
   */
  uint64_t received_new;
  /*
   Calls that failed.
   */
  uint64_t errors;
  /*
   Calls that found the sender mid-update on every retry (`COM_BUSY`).
   */
  uint64_t busy;
} rtcell_com_counters;

/*
 The ring's shared counters.
 */
typedef struct rtcell_queue_counters {
  /*
   Messages the sender put in.
   */
  uint64_t sent;
  /*
   Messages the receiver took out.
   */
  uint64_t received;
  /*
   Messages that were queued and then lost before the receiver took them (overwritten by the sender).
   */
  uint64_t lost;
  /*
   Messages waiting now (approximate while both sides run).
   */
  uint64_t queued;
  /*
   Sends refused because the queue was full (`RTE_E_LIMIT`): never queued, so not lost.
   */
  uint64_t refused;
} rtcell_queue_counters;

/*
 The call succeeded.
 */
#define E_OK 0

/*
 Bad argument: a NULL pointer, a wrong length, an unknown id, a buffer too small.
 */
#define E_NOT_OK 1

/*
 The channel cannot be used: no context, a region of another layout version, a corrupt table.
 */
#define COM_SERVICE_NOT_AVAILABLE 128

/*
 The sender was mid-update on every retry; try again.
 */
#define COM_BUSY 129

/*
 RTE: success.
 */
#define RTE_E_OK 0

/*
 RTE: the queue is full; the message was not sent (counted as refused, never as lost).
 */
#define RTE_E_LIMIT 130

/*
 RTE: nothing was received (empty queue, or a timeout).
 */
#define RTE_E_NO_DATA 131

/*
 RTE overlay flag, or-ed onto `RTE_E_OK`: data was returned, but messages were lost before it.
 */
#define RTE_E_LOST_DATA 64

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/*
 The version of this API, `RTCELL_ABI_VERSION` of the library actually loaded.
 */
uint32_t rtcell_abi_version(void);

/*
 The region layout version this library reads; a region of another version is refused.
 */
uint32_t rtcell_layout_version(void);

/*
 Binds COM channels `channels[0..count]` of region `r` (`count` 0: every COM channel of the region)
 into one context; signal and group ids must be unique across them. `*out` gets the handle.

 Each channel's signal table is copied out of the region here and checked: every length and offset
 the context uses comes from that copy, never from the shared table again. Every call checks that
 the table entries it uses (and the channel's counts) in the region still equal the copy; while they
 do not (the peer changed them), the call returns COM_SERVICE_NOT_AVAILABLE, and calls work again
 once the table reads as the copy. The copy is what the region held at open: a program that cannot
 trust the region at that moment checks each signal with `rtcell_com_signal_info` against the length
 its own configuration fixes before it uses `Com_SendSignal` / `Com_ReceiveSignal` (which carry no
 length), or uses `rtcell_com_send_signal` / `rtcell_com_receive_signal`, bounded by its buffer.

 # Safety
 `r` a live region handle; `channels` NULL (with count 0) or `count` NUL-terminated strings; `out`
 NULL or writable.
 */
Std_ReturnType rtcell_com_open(struct rtcell_region *r,
                               const char *const *channels,
                               size_t count,
                               struct rtcell_com **out);

/*
 Releases a COM context (NULL is fine); if it is this thread's current one, the thread has none after.

 # Safety
 `c` NULL or a handle from `rtcell_com_open`, not used afterwards.
 */
void rtcell_com_close(struct rtcell_com *c);

/*
 Makes `c` the calling thread's current context, which the `Com_*` functions use (NULL: none).

 # Safety
 `c` NULL or a live handle, used by this thread only while current.
 */
Std_ReturnType rtcell_com_use(struct rtcell_com *c);

/*
 For cell runners: attaches the region at `base` (`len` bytes), binds COM channels
 `channels[0..count]` (0: all) and makes them the calling thread's current context, in one call. A
 second call on the same thread releases what the first made.

 # Safety
 As `rtcell_region_attach_memory` and `rtcell_com_open`.
 */
Std_ReturnType rtcell_cell_attach(void *base,
                                  size_t len,
                                  const char *const *channels,
                                  size_t count);

/*
 The region of the calling thread's current context, or NULL.
 */
struct rtcell_region *rtcell_cell_region(void);

/*
 Sends `len` bytes of signal `id` (a fixed-length signal takes exactly its length; a dynamic one up to
 its maximum). A group member's value is committed by `rtcell_com_send_signal_group`.

 # Safety
 `c` a live handle or NULL; `data` readable for `len` bytes (or NULL with len 0).
 */
Std_ReturnType rtcell_com_send_signal(struct rtcell_com *c,
                                      Com_SignalIdType id,
                                      const void *data,
                                      size_t len);

/*
 Receives signal `id` into `buf` (`buf_len` bytes, at least the value's length). `*len_out` gets the
 value's length, `*fresh_out` RTCELL_FRESH_NEVER / _OLD / _NEW (both may be NULL). A signal never
 written gives E_OK, length 0, RTCELL_FRESH_NEVER and `buf_len` zero bytes. A group member is
 read from the copy the last `rtcell_com_receive_signal_group` of its group made; after one that
 failed, E_NOT_OK until one succeeds (the copy may hold part of the refused value).

 # Safety
 `c` a live handle or NULL; `buf` writable for `buf_len` bytes; `len_out`, `fresh_out` NULL or writable.
 */
Std_ReturnType rtcell_com_receive_signal(struct rtcell_com *c,
                                         Com_SignalIdType id,
                                         void *buf,
                                         size_t buf_len,
                                         size_t *len_out,
                                         uint8_t *fresh_out);

/*
 Commits every member of group `id` sent since the last commit as one value.

 # Safety
 `c` a live handle or NULL.
 */
Std_ReturnType rtcell_com_send_signal_group(struct rtcell_com *c, Com_SignalGroupIdType id);

/*
 Copies group `id`'s current value, so its members read consistently with `rtcell_com_receive_signal`.

 # Safety
 `c` a live handle or NULL.
 */
Std_ReturnType rtcell_com_receive_signal_group(struct rtcell_com *c,
                                               Com_SignalGroupIdType id);

/*
 Waits (sleeping on a futex, no busy loop) until standalone signal `id` has a value this handle has not
 read, or `timeout_ns` passes (`RTE_E_NO_DATA`). For sides that may sleep; not in a payload.

 # Safety
 As `rtcell_com_receive_signal`.
 */
Std_ReturnType rtcell_com_receive_signal_timeout(struct rtcell_com *c,
                                                 Com_SignalIdType id,
                                                 void *buf,
                                                 size_t buf_len,
                                                 size_t *len_out,
                                                 uint64_t timeout_ns);

/*
 The maximum length of signal `id` and whether it is dynamic-length (1) or fixed (0).

 # Safety
 `c` a live handle or NULL; `max_len`, `dynamic` NULL or writable.
 */
Std_ReturnType rtcell_com_signal_info(struct rtcell_com *c,
                                      Com_SignalIdType id,
                                      size_t *max_len,
                                      uint8_t *dynamic);

/*
 This handle's counters.

 # Safety
 `c` a live handle or NULL; `out` NULL or writable.
 */
Std_ReturnType rtcell_com_get_counters(struct rtcell_com *c, struct rtcell_com_counters *out);

/*
 AUTOSAR: sends signal `id` from `data` (exactly the signal's length, as fixed at `rtcell_com_open`,
 is read). COM_SERVICE_NOT_AVAILABLE (nothing read) while the channel's table differs from the one
 read at open.

 # Safety
 `data` readable for the signal's length.
 */
Std_ReturnType Com_SendSignal(Com_SignalIdType id, const void *data);

/*
 AUTOSAR: receives signal `id` into `data` (exactly the signal's length, as fixed at
 `rtcell_com_open`, is written). A signal never written gives zeros and E_OK (its initial value).
 COM_SERVICE_NOT_AVAILABLE (nothing written) while the channel's table differs from the one read at
 open; COM_SERVICE_NOT_AVAILABLE too for a value shorter than the signal's length (the peer wrote it
 so; `data` then holds no valid value).

 # Safety
 `data` writable for the signal's length.
 */
Std_ReturnType Com_ReceiveSignal(Com_SignalIdType id, void *data);

/*
 AUTOSAR: sends `length` bytes of dynamic-length signal `id`.

 # Safety
 `data` readable for `length` bytes.
 */
Std_ReturnType Com_SendDynSignal(Com_SignalIdType id, const void *data, uint16_t length);

/*
 AUTOSAR: receives dynamic-length signal `id`; `*length` is the buffer's size on entry and the value's
 length on return. A buffer shorter than the value is E_NOT_OK (nothing is written past it).

 # Safety
 `length` NULL or writable; `data` writable for `*length` bytes.
 */
Std_ReturnType Com_ReceiveDynSignal(Com_SignalIdType id,
                                    void *data,
                                    uint16_t *length);

/*
 AUTOSAR: commits signal group `id` (its members sent with Com_SendSignal) as one value.
 */
Std_ReturnType Com_SendSignalGroup(Com_SignalGroupIdType id);

/*
 AUTOSAR: copies signal group `id`'s value, for its members' Com_ReceiveSignal.
 */
Std_ReturnType Com_ReceiveSignalGroup(Com_SignalGroupIdType id);

/*
 Why the last failing call on this thread failed: a NUL-terminated message, never NULL, "" when none.
 Valid until the next failing call on the same thread.
 */
const char *rtcell_last_error(void);

/*
 Opens ring channel `ring` of region `r` as a queue. `*out` gets the handle.

 # Safety
 `r` a live region handle or NULL; `ring` NULL or NUL-terminated; `out` NULL or writable.
 */
Std_ReturnType rtcell_queue_open(struct rtcell_region *r,
                                 const char *ring,
                                 struct rtcell_queue **out);

/*
 Releases a queue handle (NULL is fine).

 # Safety
 `q` NULL or a handle from `rtcell_queue_open`, not used afterwards.
 */
void rtcell_queue_close(struct rtcell_queue *q);

/*
 Queues `len` bytes (at most the ring's frame size). RTE_E_OK, RTE_E_LIMIT when full (the message is
 not queued; it is counted as refused, and the receiver is not told of a loss), E_NOT_OK for bad
 arguments or a message too long.

 # Safety
 `q` a live handle or NULL; `data` readable for `len` bytes (or NULL with len 0).
 */
Std_ReturnType rtcell_queue_send(struct rtcell_queue *q, const void *data, size_t len);

/*
 Takes the oldest message into `buf`. RTE_E_OK (or-ed with RTE_E_LOST_DATA when messages were lost
 since the last receive), RTE_E_NO_DATA when empty, E_NOT_OK when `buf_len` is shorter than the message
 (which stays queued; `*len_out` then says how long it is).

 # Safety
 `q` a live handle or NULL; `buf` writable for `buf_len` bytes; `len_out` NULL or writable.
 */
Std_ReturnType rtcell_queue_receive(struct rtcell_queue *q,
                                    void *buf,
                                    size_t buf_len,
                                    size_t *len_out);

/*
 As `rtcell_queue_receive`, but waits up to `timeout_ns` for a message (futex when the ring was
 created with notify, else short sleeps). Not in a payload.

 # Safety
 As `rtcell_queue_receive`.
 */
Std_ReturnType rtcell_queue_receive_timeout(struct rtcell_queue *q,
                                            void *buf,
                                            size_t buf_len,
                                            size_t *len_out,
                                            uint64_t timeout_ns);

/*
 The ring's counters (shared by both sides).

 # Safety
 `q` a live handle or NULL; `out` NULL or writable.
 */
Std_ReturnType rtcell_queue_get_counters(struct rtcell_queue *q, struct rtcell_queue_counters *out);

/*
 Attaches to the region at `base` (8-byte aligned, `len` bytes), mapped by someone else who keeps it
 mapped while the handle is in use. `*out` gets the handle; `rtcell_region_detach` releases it.

 # Safety
 `base..base+len` must be mapped read-write for the life of the handle; `out` NULL or writable.
 */
Std_ReturnType rtcell_region_attach_memory(void *base, size_t len, struct rtcell_region **out);

/*
 Attaches to the named region `/dev/shm/rtcell-NAME` that an rtcell process created.

 A region whose file can shrink (a /dev/shm file; not a sealed memfd) is guarded: if another process
 truncates the file, the next access of this process gives it its size back (the cut part reads as
 zeros, and the region then fails its checks) instead of the process dying of SIGBUS. For that,
 librtcell installs a SIGBUS handler once, chained to the handler installed before it; a fault
 anywhere else goes to that handler, or ends the process as it would have. At most 64 such regions
 can be attached at once in a process.

 # Safety
 `name` NULL or a NUL-terminated string; `out` NULL or writable.
 */
Std_ReturnType rtcell_region_attach_name(const char *name, struct rtcell_region **out);

/*
 Attaches to the region in file descriptor `fd` (a memfd or shm file); the descriptor is duplicated,
 so the caller keeps and closes its own. A file that can shrink is guarded as in
 `rtcell_region_attach_name`.

 # Safety
 `out` NULL or writable.
 */
Std_ReturnType rtcell_region_attach_fd(int fd, struct rtcell_region **out);

/*
 Releases a region handle (NULL is fine). COM contexts and queues opened on it must be closed first.

 # Safety
 `r` NULL or a handle from an attach function, not used afterwards.
 */
void rtcell_region_detach(struct rtcell_region *r);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* RTCELL_H */
