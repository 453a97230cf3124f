//! libFuzzer's inputs to [`profiler_fuzz::proc_text::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::proc_text::check(data));
