//! A JVM's code cache, metadata and stack of any bytes, walked and named: the walk ends within
//! its depth, on a stack pointer that only grows, no read is larger than the bounds, and every
//! frame stepped is named or left out, never a panic.

use profiler::stages::{
    StackSnapshot,
    hotspot::{
        BlobKind, Heap,
        fixture::{self, jdk17_layout, jdk25_layout},
    },
};

/// Where the fuzzed bytes are: the code heap, its segment map and the stack all at once.
const BASE: u64 = 0x10_0000;
/// Blob names the fuzzed headers can point at.
const NMETHOD_NAME: u64 = BASE;
const INTERPRETER_NAME: u64 = BASE + 8;
/// Largest read the walk may make (an nmethod's debug information, at most).
const MAX_READ: usize = 1 << 20;

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    // The leaf's pc and frame pointer, the segment size and layout (JDK 25's or 17's), where the
    // heap ends; then the memory.
    let Some((head, bytes)) = data.split_first_chunk::<18>() else { return };
    let word = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap());
    // The heap ends within the memory or just past it: headers cut by its end are read.
    let code = BASE..(BASE + bytes.len() as u64 + 1).saturating_sub(u64::from(head[17]));
    if code.is_empty() {
        return;
    }
    let heap = Heap { code: code.clone(), segmap: BASE, log2_segment: 4 + u32::from(head[16] % 13) };
    let layout = if head[16] & 0x80 == 0 { jdk25_layout() } else { jdk17_layout() };
    let kinds = [(NMETHOD_NAME, BlobKind::Nmethod), (INTERPRETER_NAME, BlobKind::Interpreter)];
    let mut jvm =
        fixture::jvm(layout, heap, &kinds, Box::new(super::memory_at(BASE, bytes.to_vec(), MAX_READ)));
    let stack = StackSnapshot::new(BASE, bytes, false);
    let leaf = [BASE + word(0) % (bytes.len() as u64 + 1), BASE, word(8), word(8) ^ word(0)];
    let walked = fixture::walk(&mut jvm, leaf, &stack, &mut |addr| code.contains(&addr), 64);
    assert!(walked.steps.len() <= 64);
    assert!(walked.frames.len() <= 64 * 64, "at most 64 scopes per frame");
}
