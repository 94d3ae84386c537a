/* COM configuration of the controller cell (as an AUTOSAR COM generator emits it): the ids of
 * examples/c-offload.toml's channels ctrl.in and ctrl.out. */
#ifndef CTRL_COM_H
#define CTRL_COM_H

/* ctrl.in: master -> controller, one sample per master cycle. */
#define ComConf_ComSignalGroup_ctrl_in 1u
#define ComConf_ComSignal_in_seq 1u   /* uint32 */
#define ComConf_ComSignal_in_reset 2u /* uint8 */
#define ComConf_ComSignal_in_r 3u     /* float64 */
#define ComConf_ComSignal_in_y 4u     /* float64 */

/* ctrl.out: controller -> master. */
#define ComConf_ComSignalGroup_ctrl_out 2u
#define ComConf_ComSignal_out_seq 10u /* uint32 */
#define ComConf_ComSignal_out_u 11u   /* float64 */

#endif /* CTRL_COM_H */
