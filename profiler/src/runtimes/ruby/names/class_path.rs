//! The path of a method's class ("Outer::Worker") and whether the method is a singleton's, as
//! `rb_profile_frame_classpath` has them (docs/ruby-layouts.md §4.5): a module's methods are
//! entered under the proxy class (ICLASS) that includes it, a class's own methods under its
//! singleton class, which is named after the object it is attached to. 3.3 keeps the path and
//! that object in fields of the class; 3.1 in hidden instance variables, looked up by their
//! names' IDs, which each process interns for itself.
use anyhow::{Context as _, Result, bail, ensure};

use super::{
    objects::{Heap, expect_type, flags, type_of, u64_at},
    symbols::{id_name_bytes, is_local},
};
use crate::runtimes::ruby::layout::{
    BASIC_KLASS, ClassLayout, FL_SINGLETON, ST_DELETED_HASH, ST_ENTRIES, ST_ENTRIES_BOUND, ST_ENTRIES_START,
    ST_ENTRY_BYTES, ST_ENTRY_POWER, ST_TABLE_BYTES, T_CLASS, T_ICLASS, T_MODULE,
};

/// Most entries of a 3.1 class's instance variables looked through.
pub(super) const MAX_IVARS: u64 = 1024;

/// A method's class, as a profile names it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ClassPath {
    pub path: String,
    /// The class is a singleton class: the method is `path.name`, not `path#name`.
    pub singleton: bool,
}

/// The path of `class` (a method entry's `defined_class` or `owner`), from the ID table at
/// `symbols`. A singleton class of an object that is no class or module has none here (Ruby
/// names it after the object's address).
pub(super) fn class_path(heap: &mut Heap<'_>, symbols: u64, class: u64) -> Result<ClassPath> {
    let header = heap.header(class)?;
    expect_type(class, &header, &[T_CLASS, T_MODULE, T_ICLASS])?;
    if type_of(&header) == T_ICLASS {
        let module = u64_at(&header, BASIC_KLASS);
        return Ok(ClassPath { path: path_of(heap, symbols, module)?, singleton: false });
    }
    if flags(&header) & FL_SINGLETON == 0 {
        return Ok(ClassPath { path: path_of(heap, symbols, class)?, singleton: false });
    }
    let attached = attached_object(heap, symbols, class)?;
    let path = path_of(heap, symbols, attached).context("the object of a singleton class")?;
    Ok(ClassPath { path, singleton: true })
}

/// The path of the class or module `class`.
fn path_of(heap: &mut Heap<'_>, symbols: u64, class: u64) -> Result<String> {
    let header = heap.header(class)?;
    expect_type(class, &header, &[T_CLASS, T_MODULE])?;
    let path = match heap.layout.class {
        ClassLayout::Fields { classpath, .. } => heap.word(class.wrapping_add(classpath))?,
        // A class named under an anonymous one has a temporary path only.
        ClassLayout::IvarTable { .. } => {
            hidden_ivar(heap, symbols, class, &[b"__classpath__", b"__tmp_classpath__"])?
                .with_context(|| format!("the class at {class:#x} has no path"))?
        }
    };
    heap.string(path).with_context(|| format!("the path of the class at {class:#x}"))
}

/// The object the singleton class `class` is attached to.
fn attached_object(heap: &mut Heap<'_>, symbols: u64, class: u64) -> Result<u64> {
    match heap.layout.class {
        ClassLayout::Fields { attached_object, .. } => heap.word(class.wrapping_add(attached_object)),
        ClassLayout::IvarTable { .. } => hidden_ivar(heap, symbols, class, &[b"__attached__"])?
            .with_context(|| format!("the singleton class at {class:#x} is attached to nothing")),
    }
}

/// 3.1: the value of the first of `names` that is a hidden instance variable of `class`.
fn hidden_ivar(heap: &mut Heap<'_>, symbols: u64, class: u64, names: &[&[u8]]) -> Result<Option<u64>> {
    let ClassLayout::IvarTable { ext, iv_tbl } = heap.layout.class else {
        bail!("this release keeps no class paths in instance variables");
    };
    let ext = heap.word(class.wrapping_add(ext))?;
    let table = heap.word(ext.wrapping_add(iv_tbl))?;
    if table == 0 {
        return Ok(None);
    }
    let entries =
        table_entries(heap, table).with_context(|| format!("the instance variables of {class:#x}"))?;
    // (rank in `names`, value) of the best found so far.
    let mut found: Option<(usize, u64)> = None;
    for entry in entries.as_chunks::<{ ST_ENTRY_BYTES as usize }>().0 {
        let (hash, key, value) = (u64_at(entry, 0), u64_at(entry, 8), u64_at(entry, 16));
        if hash == ST_DELETED_HASH || !is_local(key) {
            continue;
        }
        let name = id_name_bytes(heap, symbols, key)?;
        let rank = names.iter().position(|wanted| *wanted == name.as_slice());
        if let Some(rank) = rank.filter(|&rank| found.is_none_or(|(best, _)| rank < best)) {
            found = Some((rank, value));
        }
        if found.is_some_and(|(rank, _)| rank == 0) {
            break;
        }
    }
    Ok(found.map(|(_, value)| value))
}

/// The bytes of the live entries of the `st_table` at `table` ({hash, key, record} each), the
/// first [`MAX_IVARS`] of them.
fn table_entries(heap: &mut Heap<'_>, table: u64) -> Result<Vec<u8>> {
    let header: [u8; ST_TABLE_BYTES] = heap.array(table)?;
    let allocated = 1u64.checked_shl(u32::from(header[ST_ENTRY_POWER as usize])).unwrap_or(u64::MAX);
    let (start, bound) = (u64_at(&header, ST_ENTRIES_START), u64_at(&header, ST_ENTRIES_BOUND));
    ensure!(start <= bound && bound <= allocated, "entries {start}..{bound} of a table of {allocated}");
    let count = (bound - start).min(MAX_IVARS);
    let first = u64_at(&header, ST_ENTRIES).wrapping_add(start.wrapping_mul(ST_ENTRY_BYTES));
    heap.bytes(first, (count * ST_ENTRY_BYTES) as usize)
}
