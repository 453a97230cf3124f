//! The names of IDs (methods' names, hidden instance variables' keys), from the table Ruby
//! interns them in, `ruby_global_symbols` (docs/ruby-layouts.md §4.4). A lookup is a fixed
//! number of reads, each index checked against the length the target gives.
use anyhow::{Context as _, Result, ensure};

use super::objects::Heap;
use crate::runtimes::ruby::layout::{
    ID_ENTRY_SIZE, ID_ENTRY_UNIT, ID_SCOPE_MASK, ID_SCOPE_SHIFT, LAST_OP_ID, SYMBOLS_IDS, SYMBOLS_LAST_ID,
};

/// The name of `id`, from the table at `symbols` (the address of `ruby_global_symbols`).
pub(super) fn id_name(heap: &mut Heap<'_>, symbols: u64, id: u64) -> Result<String> {
    let name = name_string(heap, symbols, id)?;
    heap.string(name).with_context(|| format!("the name of ID {id:#x}"))
}

/// The bytes of the name of `id` (cut as strings are), from the table at `symbols`.
pub(super) fn id_name_bytes(heap: &mut Heap<'_>, symbols: u64, id: u64) -> Result<Vec<u8>> {
    let name = name_string(heap, symbols, id)?;
    let (bytes, _) = heap.string_bytes(name).with_context(|| format!("the name of ID {id:#x}"))?;
    Ok(bytes)
}

/// Whether `id` is of a local name (no `@`, `$`, capital or `=`), as Ruby's hidden instance
/// variables are: the others need not be looked up to be told apart from them.
pub(super) fn is_local(id: u64) -> bool {
    id > LAST_OP_ID && id & ID_SCOPE_MASK == 0
}

/// The String that names `id`: `ids[serial / 512][serial % 512 * 2]`.
fn name_string(heap: &mut Heap<'_>, symbols: u64, id: u64) -> Result<u64> {
    let serial = if id > LAST_OP_ID { id >> ID_SCOPE_SHIFT } else { id };
    let last_id = u32::from_le_bytes(heap.array(symbols.wrapping_add(SYMBOLS_LAST_ID))?);
    ensure!(serial != 0 && serial <= u64::from(last_id), "ID {id:#x} is not among the {last_id} interned");
    let ids = heap.word(symbols.wrapping_add(SYMBOLS_IDS))?;
    let chunk =
        heap.array_entry(ids, serial / ID_ENTRY_UNIT).with_context(|| format!("the IDs of {id:#x}"))?;
    heap.array_entry(chunk, serial % ID_ENTRY_UNIT * ID_ENTRY_SIZE)
        .with_context(|| format!("the entry of ID {id:#x}"))
}
