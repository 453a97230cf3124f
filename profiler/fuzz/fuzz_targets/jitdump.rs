//! libFuzzer's inputs to [`profiler_fuzz::jitdump::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::jitdump::check(data));
