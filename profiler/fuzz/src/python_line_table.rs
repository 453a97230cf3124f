//! Python line tables of any bytes, in every format, decoded and looked up at any offset: a line
//! or none, never a panic or a runaway; a frame before its first instruction is on the first
//! line; the decoded lines no larger than the table.

use profiler::stages::python::{LineTable, Lines};

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    let Some((head, table)) = data.split_first_chunk::<12>() else { return };
    let first_line = u32::from_le_bytes(head[..4].try_into().unwrap());
    let offset = i64::from_le_bytes(head[4..].try_into().unwrap());
    // The offset as given, and one likely to fall inside the table.
    let inside = offset.unsigned_abs() % (table.len() as u64 * 4 + 1);
    for format in [LineTable::Lnotab, LineTable::Pep626, LineTable::Pep657] {
        let lines = Lines::decode(format, table);
        for offset in [offset, inside as i64, i64::MAX] {
            let _ = lines.line(first_line, offset);
        }
        assert_eq!(lines.line(first_line, -1), Some(first_line));
        // Never more runs than entries: a table decodes into no more than it was.
        assert!(lines.size() <= std::mem::size_of::<Lines>() + 8 * (table.len() + 2));
    }
}
