/* The basic types Embedded Coder's generated code uses (a minimal rtwtypes.h). */
#ifndef RTWTYPES_H
#define RTWTYPES_H

#include <stdint.h>

typedef double real_T;
typedef float real32_T;
typedef int32_t int32_T;
typedef uint32_t uint32_T;
typedef uint8_t uint8_T;
typedef uint8_t boolean_T;

#endif /* RTWTYPES_H */
