//! What each fuzz target checks of one input, one module per target (`fuzz_targets/TARGET.rs`
//! hands libFuzzer's inputs to `TARGET::check`). The profiler's test `fuzz_seeds` runs the same
//! checks on the committed seeds (`seeds/TARGET`) with every `cargo xtask test`; the fuzzers
//! explore from them with `cargo xtask fuzz`.
pub mod decode_record;
pub mod elf_file;
pub mod hostile_names;
pub mod hotspot_walk;
pub mod jitdump;
pub mod proc_text;
pub mod python_code_object;
pub mod python_line_table;
pub mod raw_recording;
pub mod task_event;
pub mod unwind_stack;
pub mod v8_walk;
