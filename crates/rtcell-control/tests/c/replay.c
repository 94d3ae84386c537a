/* Steps the C controller of examples/c-controller over "r y" lines from stdin and prints each output's
 * bits in hex. A line "reset" calls model_initialize(). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "model.h"

int main(void) {
    char line[256];
    model_initialize();
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "reset", 5) == 0) {
            model_initialize();
            continue;
        }
        double r, y;
        if (sscanf(line, "%la %la", &r, &y) != 2) {
            fprintf(stderr, "bad line: %s", line);
            return 2;
        }
        rtU.r = r;
        rtU.y = y;
        model_step();
        uint64_t bits;
        memcpy(&bits, &rtY.u, sizeof bits);
        printf("%016" PRIx64 "\n", bits);
    }
    return 0;
}
