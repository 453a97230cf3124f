//! libFuzzer's inputs to [`profiler_fuzz::unwind_stack::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::unwind_stack::check(data));
