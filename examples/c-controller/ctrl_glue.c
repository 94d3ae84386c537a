/* The runnable around the generated model, as an RTE would provide it: read the input group, step the
 * model once per new sample, write the output group. rtcell calls ctrl_init() once and ctrl_step()
 * every period of the task, in a thread, process or kvm cell alike. */
#include "ctrl_com.h"
#include "model.h"
#include "rtcell.h"

/* The sequence number of the last sample answered (the master's start at 1). */
static uint32_T last_seq;

void ctrl_init(void) {
    model_initialize();
    last_seq = 0;
}

void ctrl_step(void) {
    uint32_T seq = 0;
    uint8_T reset = 0;
    real_T r = 0.0, y = 0.0;
    if (Com_ReceiveSignalGroup(ComConf_ComSignalGroup_ctrl_in) != E_OK) {
        return;
    }
    if (Com_ReceiveSignal(ComConf_ComSignal_in_seq, &seq) != E_OK || seq == last_seq) {
        return; /* no new sample since the last step */
    }
    if (Com_ReceiveSignal(ComConf_ComSignal_in_reset, &reset) != E_OK ||
        Com_ReceiveSignal(ComConf_ComSignal_in_r, &r) != E_OK || Com_ReceiveSignal(ComConf_ComSignal_in_y, &y) != E_OK) {
        return;
    }
    if (reset) {
        model_initialize();
    }
    rtU.r = r;
    rtU.y = y;
    model_step();
    last_seq = seq;
    (void)Com_SendSignal(ComConf_ComSignal_out_seq, &seq);
    (void)Com_SendSignal(ComConf_ComSignal_out_u, &rtY.u);
    (void)Com_SendSignalGroup(ComConf_ComSignalGroup_ctrl_out);
}
