//! libFuzzer's inputs to [`profiler_fuzz::ruby_names::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::ruby_names::check(data));
