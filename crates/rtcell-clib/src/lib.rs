//! librtcell for C: every `extern "C"` function of `rtcell-capi` (declared in `include/rtcell.h`),
//! exported from a static and a shared library.

pub use rtcell_capi::*;
