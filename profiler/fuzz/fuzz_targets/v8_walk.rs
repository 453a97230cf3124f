//! libFuzzer's inputs to [`profiler_fuzz::v8_walk::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::v8_walk::check(data));
