//! jitdump files of any bytes, read in pieces of any sizes: events or a refusal, never a panic,
//! never more than a record's bounded part kept pending, and the same events whatever the
//! pieces.

use profiler::stages::jitdump::{JitDump, MAX_PENDING};

/// Everything the dump says, read in pieces of `piece` bytes.
fn events(file: &[u8], piece: usize) -> (Vec<String>, Option<&'static str>) {
    let mut dump = JitDump::default();
    let mut seen = Vec::new();
    for chunk in file.chunks(piece) {
        dump.append(chunk, &mut |event| seen.push(format!("{event:?}")));
        assert!(dump.pending() <= MAX_PENDING, "{} bytes pending", dump.pending());
    }
    (seen, dump.refused())
}

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    let Some((&piece, file)) = data.split_first() else { return };
    let whole = events(file, file.len().max(1));
    assert_eq!(events(file, usize::from(piece).max(1)), whole, "the pieces change nothing");
}
