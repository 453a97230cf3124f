//! libFuzzer's inputs to [`profiler_fuzz::hotspot_walk::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::hotspot_walk::check(data));
