//! V8's heap and a stack of any bytes, walked and named: the walk ends within its depth, on a
//! stack pointer that only grows, no read is larger than the bounds, names are bounded, and
//! every frame stepped is named or left out, never a panic.

use profiler::stages::{
    Frame, StackSnapshot,
    v8::{MAX_NAME, MAX_SOURCE, fixture},
};

/// Where the fuzzed bytes are: the heap and the stack all at once; the builtins are its first
/// half, JIT code the rest.
const BASE: u64 = 0x10_0000;
/// Largest read the walk may make (a script's source, two bytes a character, at most).
const MAX_READ: usize = 2 * MAX_SOURCE as usize;

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    // The leaf's pc and frame pointer, and the layout (V8 11.3's or 13.6's); then the memory.
    let Some((head, bytes)) = data.split_first_chunk::<17>() else { return };
    let word = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap());
    let end = BASE + bytes.len() as u64;
    let layout = fixture::node20_layout(head[16] & 1 == 1);
    let builtins = BASE..BASE + bytes.len() as u64 / 2;
    let mut v8 = fixture::process(
        layout,
        builtins,
        0..0x1000,
        Box::new(super::memory_at(BASE, bytes.to_vec(), MAX_READ)),
    );
    let stack = StackSnapshot::new(BASE, bytes, false);
    let leaf = [BASE + word(0) % (bytes.len() as u64 + 1), BASE, word(8)];
    let walked = fixture::walk(&mut v8, leaf, &stack, &mut |addr| (BASE..end).contains(&addr), 64);
    assert!(walked.steps.len() <= 64);
    assert!(walked.frames.len() <= 64);
    for frame in &walked.frames {
        if let Frame::Runtime { function, line } = frame {
            // Made printable: a character escaped as `\u{10ffff}` at most.
            let symbol = walked.functions.symbol(*function, *line);
            assert!(symbol.name.chars().count() <= 10 * MAX_NAME);
        }
    }
}
