//! libFuzzer's inputs to [`profiler_fuzz::raw_recording::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::raw_recording::check(data));
