# rtcell: build a kvm cell payload from freestanding C sources.
#
#   make -f $(SDK)/share/rtcell/payload.mk SRC=dir STEP=ctrl_step [INIT=ctrl_init] OUT=ctrl.elf \
#        [CFLAGS_EXTRA=...] [LDFLAGS_EXTRA=...] [CC=gcc]
#
# Compiles every *.c in SRC (not its subdirectories) freestanding, and links them statically with the
# payload runtime (lib/rtcell/librtcell_payload.a) and the payload linker script into OUT, a static ELF
# that a kvm cell runs: `payload = "path/to/ctrl.elf"` in a scenario.
#
# The runtime's _start attaches the C API to the cell's COM channels, calls INIT once and STEP every
# period (arguments com=, period_ns= of the cell). STEP is required; without INIT nothing is called
# before the first step. Both are `void f(void)`; a source may also define rtcell_cell_init and
# rtcell_cell_step itself (then give STEP=rtcell_cell_step, INIT=rtcell_cell_init).
#
# What a payload cannot have: a C library (no printf, malloc, ...; the C API, memcpy, memset, memmove
# and memcmp are there), thread-local variables, constructors/destructors (refused at link time: call
# the code from INIT), more than ~900 KiB of code and data with the default 2 MiB of guest RAM.
#
# Objects and dependency files go to OBJDIR (default: OUT.d/). `make -f ... OUT=x.elf clean` removes
# them and OUT.

RTCELL_PAYLOAD_MK := $(abspath $(lastword $(MAKEFILE_LIST)))
SDK ?= $(abspath $(dir $(RTCELL_PAYLOAD_MK))/../..)

ifeq ($(origin CC),default)
CC := gcc
endif
SRC ?= .
OUT ?= payload.elf
STEP ?=
INIT ?=
OBJDIR ?= $(OUT).d
CFLAGS_EXTRA ?=
LDFLAGS_EXTRA ?=

RTCELL_RUNTIME := $(SDK)/lib/rtcell/librtcell_payload.a
RTCELL_LDSCRIPT := $(SDK)/share/rtcell/payload.ld

# Freestanding, static, non-PIC code for 64-bit ring 3. No red zone, no stack protector (no C library
# provides __stack_chk_fail), no FMA contraction (results bit-exact with the same code on the host).
RTCELL_CFLAGS := -ffreestanding -nostdlib -fno-pic -fno-pie -fno-stack-protector -mno-red-zone -O2 \
    -ffp-contract=off -ffunction-sections -fdata-sections -fno-asynchronous-unwind-tables \
    -fno-unwind-tables -I$(SDK)/include
RTCELL_LDFLAGS := -nostdlib -static -no-pie -T $(RTCELL_LDSCRIPT) -Wl,--gc-sections -Wl,--build-id=none \
    -Wl,--undefined=_start

ifneq ($(filter-out clean,$(or $(MAKECMDGOALS),all)),)
SOURCES := $(sort $(wildcard $(SRC)/*.c))
ifeq ($(SOURCES),)
$(error payload.mk: no .c files in SRC=$(SRC) (give SRC=<directory of the payload's C sources>))
endif
ifeq ($(strip $(STEP)),)
$(error payload.mk: STEP is not set (give STEP=<name of the C step function, void f(void)>))
endif
ifeq ($(wildcard $(RTCELL_RUNTIME)),)
$(error payload.mk: $(RTCELL_RUNTIME) not found: install the SDK with `rtcell sdk payload-kit --prefix P` or scripts/install-sdk, then give SDK=P)
endif
ifeq ($(wildcard $(SDK)/include/rtcell.h),)
$(error payload.mk: $(SDK)/include/rtcell.h not found: the SDK at $(SDK) is incomplete (scripts/install-sdk installs it))
endif
endif

OBJS := $(patsubst $(SRC)/%.c,$(OBJDIR)/%.o,$(SOURCES))

RTCELL_DEFSYMS :=
ifneq ($(STEP),rtcell_cell_step)
RTCELL_DEFSYMS += -Wl,--defsym=rtcell_cell_step=$(STEP)
endif
ifeq ($(strip $(INIT)),)
RTCELL_DEFSYMS += -Wl,--defsym=rtcell_cell_init=rtcell_payload_no_init
else ifneq ($(INIT),rtcell_cell_init)
RTCELL_DEFSYMS += -Wl,--defsym=rtcell_cell_init=$(INIT)
endif

.PHONY: all clean
.DEFAULT_GOAL := all

all: $(OUT)

$(OUT): $(OBJS) $(RTCELL_RUNTIME) $(RTCELL_LDSCRIPT)
	$(CC) $(RTCELL_LDFLAGS) $(RTCELL_DEFSYMS) $(LDFLAGS_EXTRA) -o $@ $(OBJS) $(RTCELL_RUNTIME) -lgcc

$(OBJDIR)/%.o: $(SRC)/%.c
	@mkdir -p $(OBJDIR)
	$(CC) $(RTCELL_CFLAGS) $(CFLAGS_EXTRA) -MMD -MP -c -o $@ $<

clean:
	rm -rf $(OBJDIR) $(OUT)

-include $(OBJS:.o=.d)
