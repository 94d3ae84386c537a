# rtcell: CMake toolchain file for kvm cell payloads written in C (the flags of payload.mk).
#
#   cmake -S . -B build-payload -DCMAKE_TOOLCHAIN_FILE=<SDK>/share/rtcell/payload-toolchain.cmake
#
# and in CMakeLists.txt, for each payload:
#
#   add_executable(ctrl.elf ctrl.c glue.c)
#   rtcell_payload(ctrl.elf STEP ctrl_step INIT ctrl_init)   # INIT is optional
#
# Every executable of such a build is a payload: freestanding, static, linked at 1 MiB with payload.ld
# against lib/rtcell/librtcell_payload.a. No C library, constructors or thread-local variables.

set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR x86_64)

get_filename_component(RTCELL_SDK "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
set(RTCELL_PAYLOAD_RUNTIME "${RTCELL_SDK}/lib/rtcell/librtcell_payload.a")
set(RTCELL_PAYLOAD_LDSCRIPT "${RTCELL_SDK}/share/rtcell/payload.ld")

if(NOT CMAKE_C_COMPILER)
  set(CMAKE_C_COMPILER gcc)
endif()

set(CMAKE_C_FLAGS_INIT "-ffreestanding -nostdlib -fno-pic -fno-pie -fno-stack-protector -mno-red-zone -O2 -ffp-contract=off -ffunction-sections -fdata-sections -fno-asynchronous-unwind-tables -fno-unwind-tables")
set(CMAKE_C_FLAGS_RELEASE_INIT "-O2 -DNDEBUG")
set(CMAKE_C_FLAGS_DEBUG_INIT "-O2 -g")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-nostdlib -static -no-pie -T ${RTCELL_PAYLOAD_LDSCRIPT} -Wl,--gc-sections -Wl,--build-id=none -Wl,--undefined=_start")
set(CMAKE_C_STANDARD_INCLUDE_DIRECTORIES "${RTCELL_SDK}/include")
set(CMAKE_C_STANDARD_LIBRARIES "${RTCELL_PAYLOAD_RUNTIME} -lgcc")
# The compiler check cannot link a payload without its entry functions: check it with a library.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

# Maps the payload's entry functions (void f(void)) to the names the runtime calls.
function(rtcell_payload target)
  cmake_parse_arguments(RTCELL "" "STEP;INIT" "" ${ARGN})
  if(NOT RTCELL_STEP)
    message(FATAL_ERROR "rtcell_payload(${target}): give STEP <name of the C step function>")
  endif()
  if(NOT RTCELL_STEP STREQUAL "rtcell_cell_step")
    target_link_options(${target} PRIVATE "LINKER:--defsym=rtcell_cell_step=${RTCELL_STEP}")
  endif()
  if(NOT RTCELL_INIT)
    target_link_options(${target} PRIVATE "LINKER:--defsym=rtcell_cell_init=rtcell_payload_no_init")
  elseif(NOT RTCELL_INIT STREQUAL "rtcell_cell_init")
    target_link_options(${target} PRIVATE "LINKER:--defsym=rtcell_cell_init=${RTCELL_INIT}")
  endif()
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${RTCELL_PAYLOAD_LDSCRIPT}" "${RTCELL_PAYLOAD_RUNTIME}")
endfunction()
