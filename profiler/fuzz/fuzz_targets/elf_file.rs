//! libFuzzer's inputs to [`profiler_fuzz::elf_file::check`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| profiler_fuzz::elf_file::check(data));
