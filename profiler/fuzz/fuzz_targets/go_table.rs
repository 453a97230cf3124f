//! libFuzzer's inputs to [`profiler_fuzz::go_table::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::go_table::check(data));
