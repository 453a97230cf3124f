//! libFuzzer's inputs to [`profiler_fuzz::hostile_names::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::hostile_names::check(data));
