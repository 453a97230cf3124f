//! libFuzzer's inputs to [`profiler_fuzz::decode_record::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::decode_record::check(data));
