/* The internal-model controller of rtcell's control benchmark (seed 000: an integrator, 20 resonators at
 * 10 Hz x k and a proportional stabiliser; 41 states, sampled at 10 kHz), laid out the way Simulink
 * Embedded Coder generates a model: external inputs rtU, outputs rtY, states in rtDW,
 * model_initialize() and model_step(). */
#ifndef MODEL_H
#define MODEL_H

#include "model_data.h"
#include "rtwtypes.h"

/* External inputs (root inport signals). */
typedef struct {
    real_T r; /* reference position, rad */
    real_T y; /* measured position, rad */
} ExtU;

/* External outputs (root outport signals). */
typedef struct {
    real_T u; /* motor voltage, V */
} ExtY;

/* Block states (default storage). */
typedef struct {
    real_T x[MODEL_NX];
    real_T xn[MODEL_NX];
} DW;

extern ExtU rtU;
extern ExtY rtY;
extern DW rtDW;

void model_initialize(void);
void model_step(void);

#endif /* MODEL_H */
