//! Python line tables of any bytes, in every format, at any offset: a line or none, never a
//! panic or a runaway; a frame before its first instruction is on the first line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiler::stages::python::{layout::LineTable, line_table::line};

fuzz_target!(|data: &[u8]| {
    let Some((head, table)) = data.split_first_chunk::<12>() else { return };
    let first_line = u32::from_le_bytes(head[..4].try_into().unwrap());
    let offset = i64::from_le_bytes(head[4..].try_into().unwrap());
    // The offset as given, and one likely to fall inside the table.
    let inside = offset.unsigned_abs() % (table.len() as u64 * 4 + 1);
    for format in [LineTable::Lnotab, LineTable::Pep626, LineTable::Pep657] {
        for offset in [offset, inside as i64, i64::MAX] {
            let _ = line(format, table, first_line, offset);
        }
        assert_eq!(line(format, table, first_line, -1), Some(first_line));
    }
});
