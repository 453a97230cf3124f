//! libFuzzer's inputs to [`profiler_fuzz::python_line_table::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::python_line_table::check(data));
