//! What each fuzz target checks of one input, one module per target (`fuzz_targets/TARGET.rs`
//! hands libFuzzer's inputs to `TARGET::check`). The profiler's test `fuzz_seeds` runs the same
//! checks on the committed seeds (`seeds/TARGET`) with every `cargo xtask test`; the fuzzers
//! explore from them with `cargo xtask fuzz`.
pub mod decode_record;
pub mod elf_file;
pub mod go_table;
pub mod hostile_names;
pub mod hotspot_walk;
pub mod jitdump;
pub mod perl_names;
pub mod proc_text;
pub mod python_code_object;
pub mod python_line_table;
pub mod raw_recording;
pub mod ruby_names;
pub mod task_event;
pub mod unwind_stack;
pub mod v8_walk;

/// Reads of a target's memory that holds `memory` from `base` on, and nothing else: a read past
/// it fails; a read of more than `max_read` bytes panics (the code fuzzed bounds every read).
fn memory_at(base: u64, memory: Vec<u8>, max_read: usize) -> impl FnMut(u64, &mut [u8]) -> bool + 'static {
    move |addr, buffer| {
        assert!(buffer.len() <= max_read, "a read of {} bytes", buffer.len());
        let start = addr.checked_sub(base).and_then(|start| usize::try_from(start).ok());
        let piece = start.and_then(|start| memory.get(start..start.checked_add(buffer.len())?));
        piece.map(|piece| buffer.copy_from_slice(piece)).is_some()
    }
}
