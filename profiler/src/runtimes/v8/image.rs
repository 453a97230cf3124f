//! What a Node binary (or any file embedding V8) says of V8 without running: its `v8dbg_*`
//! debug metadata (constants the build wrote for post-mortem tools: class field offsets, type
//! tags, frame layout, stored as initialised 32-bit integers, or in `.bss` when zero), the
//! version V8 wrote into its read-only data, and where the embedded builtins are (the
//! `Builtins_*` symbols of its symbol table).
use std::{collections::HashMap, ops::Range};

use anyhow::{Context as _, Result, bail};
use object::{
    Object as _, ObjectSection as _, ObjectSegment as _, ObjectSymbol as _, SectionKind, read::elf::ElfFile64,
};

use super::layout::Layout;

/// Most `v8dbg_*` symbols taken (Node 20 exports 531).
const MAX_SYMBOLS: usize = 4096;
/// Longest version string looked for: `NN.NN.NNN.NN-node.NNN`.
const MAX_VERSION: usize = 24;

/// What is read of the file.
#[derive(Debug)]
pub struct Image {
    pub version: Version,
    /// The layout, or why there is none (said when a process running it is refused).
    pub layout: Result<Layout, String>,
    /// The embedded builtins' code, as offsets in the file (V8 may map them a second time, near
    /// its JIT code, and run that copy).
    pub builtins: Range<u64>,
}

/// V8's version (major, minor, build, patch), as written in the binary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32, pub u32);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Version(0, 0, 0, 0) => write!(f, "V8 of unknown version"),
            Version(major, minor, build, _) => write!(f, "V8 {major}.{minor}.{build}"),
        }
    }
}

impl Image {
    /// `None` when the file embeds no V8 (exports no `v8dbg_*` symbol and has no builtins).
    pub fn read(file: &[u8]) -> Result<Option<Self>> {
        // Not a 64-bit ELF file: not V8's.
        let Ok(elf) = ElfFile64::<object::Endianness>::parse(file) else { return Ok(None) };
        let symbols = v8dbg(&elf);
        let builtins = builtins(&elf);
        if symbols.is_empty() && builtins.is_none() {
            return Ok(None);
        }
        let version = version(&elf).unwrap_or_default();
        let Some(builtins) = builtins else {
            bail!(
                "{version}: JavaScript frames not read: its symbol table names none of its embedded builtins"
            );
        };
        let builtins = elf
            .segments()
            .find_map(|segment| {
                let (offset, size) = segment.file_range();
                let start = builtins.start.checked_sub(segment.address())?;
                let end = builtins.end.checked_sub(segment.address())?;
                if end > size {
                    return None;
                }
                // A segment's file offset is the file's word: near the top, the sum wraps.
                Some(offset.checked_add(start)?..offset.checked_add(end)?)
            })
            .with_context(|| {
                format!("{version}: JavaScript frames not read: its builtins are in none of its segments")
            })?;
        let layout = if symbols.is_empty() {
            Err("it exports none of V8's v8dbg_* debug metadata".to_owned())
        } else {
            Layout::new(&symbols, version).map_err(|why| format!("{why:#}"))
        };
        Ok(Some(Self { version, layout, builtins }))
    }
}

/// The `v8dbg_*` dynamic symbols (without the prefix) and their 32-bit values.
fn v8dbg(elf: &ElfFile64<'_, object::Endianness>) -> HashMap<String, i64> {
    let mut symbols = HashMap::new();
    for symbol in elf.dynamic_symbols() {
        let Some(name) = symbol.name().ok().and_then(|name| name.strip_prefix("v8dbg_")) else { continue };
        if symbols.len() >= MAX_SYMBOLS {
            break;
        }
        let Some(section) = symbol.section_index().and_then(|index| elf.section_by_index(index).ok()) else {
            continue;
        };
        let value = if section.kind() == SectionKind::UninitializedData {
            Some(0)
        } else {
            section
                .data_range(symbol.address(), 4)
                .ok()
                .flatten()
                .map(|bytes| i64::from(i32::from_le_bytes(bytes.try_into().unwrap_or_default())))
        };
        if let Some(value) = value {
            symbols.insert(name.to_owned(), value);
        }
    }
    symbols
}

/// The extent of the `Builtins_*` functions of the symbol table.
fn builtins(elf: &ElfFile64<'_, object::Endianness>) -> Option<Range<u64>> {
    let mut extent: Option<Range<u64>> = None;
    for symbol in elf.symbols() {
        if symbol.size() == 0 || !symbol.name().is_ok_and(|name| name.starts_with("Builtins_")) {
            continue;
        }
        let (start, end) = (symbol.address(), symbol.address().checked_add(symbol.size())?);
        extent = Some(match extent {
            Some(known) => known.start.min(start)..known.end.max(end),
            None => start..end,
        });
    }
    extent.filter(|range| range.end - range.start < 1 << 30)
}

/// The version V8 writes into the binary as `MAJOR.MINOR.BUILD.PATCH-node.N` (Node's builds),
/// found in its read-only data.
fn version(elf: &ElfFile64<'_, object::Endianness>) -> Option<Version> {
    let rodata = elf.section_by_name(".rodata")?.data().ok()?;
    let marker = b"-node.";
    let mut from = 0;
    while let Some(at) = find(&rodata[from..], marker).map(|at| at + from) {
        from = at + marker.len();
        let start = at.saturating_sub(MAX_VERSION);
        let before = &rodata[start..at];
        let begin = before.iter().rposition(|&b| !(b.is_ascii_digit() || b == b'.')).map_or(0, |i| i + 1);
        let text = std::str::from_utf8(&before[begin..]).ok()?;
        let parts: Vec<u32> = text.split('.').map_while(|part| part.parse().ok()).collect();
        if let [major, minor, build, patch] = parts[..]
            && (8..100).contains(&major)
        {
            return Some(Version(major, minor, build, patch));
        }
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}
