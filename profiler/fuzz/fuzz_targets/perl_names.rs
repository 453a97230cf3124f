//! libFuzzer's inputs to [`profiler_fuzz::perl_names::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::perl_names::check(data));
