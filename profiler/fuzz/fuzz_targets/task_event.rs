//! libFuzzer's inputs to [`profiler_fuzz::task_event::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::task_event::check(data));
