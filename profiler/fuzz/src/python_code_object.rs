//! Python code objects in memory of any bytes, for every version: a code object or an error,
//! never a panic, never a read longer than the line-table bound, names and file names within
//! theirs, and any instruction offset a line or none.

use profiler::stages::python::{
    LineTables, MAX_FILE_CHARS, MAX_LINE_TABLE_BYTES, MAX_NAME_CHARS, OB_TYPE, Types, instruction_offset,
    layouts, read,
};

/// Where the fuzzed bytes are in the target's address space: low, so that pointers into them
/// are easy to come by.
const BASE: u64 = 0x1000;

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    // A version, the address of the str type, an instruction; then the memory, the code object
    // at its start.
    let Some((head, memory)) = data.split_first_chunk::<17>() else { return };
    let layout = &layouts()[usize::from(head[0]) % layouts().len()];
    let word = |bytes: &[u8]| bytes.try_into().map(u64::from_le_bytes).unwrap_or(0);
    let field = |offset: u32| memory.get(offset as usize..offset as usize + 8).map_or(0, word);
    // The code object's own type and first line half the time, so that the reader goes on to
    // the strings and the table.
    let matching = head[0] & 0x80 == 0;
    let types = Types { code: if matching { field(OB_TYPE) } else { 1 }, unicode: word(&head[1..9]) };
    let first_line = if matching { field(layout.code.first_line) as u32 } else { 1 };
    let mut read_from_memory = super::memory_at(BASE, memory.to_vec(), MAX_LINE_TABLE_BYTES as usize);
    let tables = &mut LineTables::default();
    let Ok(code) = read(&mut read_from_memory, layout, &types, BASE, first_line, tables) else { return };
    assert!(code.name.chars().count() <= MAX_NAME_CHARS);
    assert!(code.file.chars().count() <= MAX_FILE_CHARS);
    let instr = word(&head[9..17]);
    for offset in [instruction_offset(layout, BASE, instr), -1, 0, 1, 2, 100] {
        let _ = code.line(offset);
    }
}
