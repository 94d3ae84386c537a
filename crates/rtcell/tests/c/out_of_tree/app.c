/* A program built out of tree against an installed rtcell SDK: attaches to the named region given on the
 * command line, sends signal 1 of COM channel "io" and reads it back. Prints "ok <value>". */
#include <stdio.h>

#include <rtcell.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s REGION_NAME\n", argv[0]);
        return 2;
    }
    rtcell_region *r = NULL;
    rtcell_com *c = NULL;
    const char *channels[] = {"io"};
    if (rtcell_region_attach_name(argv[1], &r) != E_OK || rtcell_com_open(r, channels, 1, &c) != E_OK ||
        rtcell_com_use(c) != E_OK) {
        fprintf(stderr, "attach: %s\n", rtcell_last_error());
        return 1;
    }
    double v = 42.5, back = 0;
    if (Com_SendSignal(1, &v) != E_OK || Com_ReceiveSignal(1, &back) != E_OK) {
        fprintf(stderr, "signal: %s\n", rtcell_last_error());
        return 1;
    }
    printf("ok %.1f\n", back);
    rtcell_com_close(c);
    rtcell_region_detach(r);
    return back == 42.5 ? 0 : 1;
}
