//! What a CPython image (libpython, or an executable with the interpreter linked in) says of
//! itself, read once per module: its version, where `_PyRuntime` and `PyCode_Type` are, and which
//! of its code is the eval loop.
use std::ops::Range;

use object::{Object as _, ObjectSection as _, ObjectSymbol as _, SectionIndex, read::elf::ElfFile64};

use super::{
    debug_offsets,
    layout::{self, Layout, Version},
};
use crate::untrusted::ElfFacts;

/// A CPython image this profiler reads.
#[derive(Debug, Clone)]
pub struct Interpreter {
    pub layout: &'static Layout,
    /// Addresses as the file states them (add the load bias).
    pub runtime_svma: u64,
    pub code_type_svma: u64,
    pub unicode_type_svma: u64,
    /// The eval loop (`_PyEval_EvalFrameDefault`, and its `.cold` part where the symbol table
    /// names one), as file offsets: the native frames the Python frames replace.
    pub eval_loop: Vec<Range<u64>>,
}

/// What an image is, as far as Python goes.
#[derive(Debug, Clone)]
pub enum Image {
    /// Not a CPython interpreter.
    NotPython,
    /// A CPython this profiler does not read: what it is, for the run summary
    /// ("CPython 3.14", "CPython 3.13 free-threaded").
    Unsupported(String),
    Supported(Interpreter),
}

impl Image {
    /// Reads the image of the file named `file_name`.
    pub fn read(file_name: &str, image: &[u8], facts: &ElfFacts) -> Self {
        let Ok(elf) = ElfFile64::<object::Endianness>::parse(image) else { return Self::NotPython };
        let exported = |name: &str| {
            elf.dynamic_symbols().find(|symbol| {
                symbol.name() == Ok(name) && !symbol.is_undefined() && symbol.section_index().is_some()
            })
        };
        let (Some(runtime), Some(code_type), Some(unicode_type)) =
            (exported("_PyRuntime"), exported("PyCode_Type"), exported("PyUnicode_Type"))
        else {
            return Self::NotPython;
        };
        let named = NamedVersion::of(file_name);
        let version = exported("Py_Version")
            .and_then(|symbol| bytes_at(&elf, symbol.address(), symbol.section_index()?, 4))
            .map(|bytes| Version(bytes[2]))
            .or(named.map(|named| named.version));
        let Some(version) = version else {
            return Self::Unsupported("CPython of an unknown version".into());
        };
        if named.is_some_and(|named| named.free_threaded) {
            return Self::Unsupported(format!("CPython {version} free-threaded"));
        }
        if named.is_some_and(|named| named.debug) {
            return Self::Unsupported(format!("CPython {version} debug build"));
        }
        let Some(layout) = layout::layout(version) else {
            return Self::Unsupported(format!("CPython {version}"));
        };
        if version >= Version(13) {
            let own = runtime.section_index().and_then(|section| {
                let end = debug_offsets::BYTES.min(usize::try_from(runtime.size()).ok()?);
                bytes_at(&elf, runtime.address(), section, end)
            });
            if let Err(disagreement) = debug_offsets::check(layout, own.unwrap_or_default()) {
                return Self::Unsupported(format!("CPython {version} ({disagreement})"));
            }
        }
        Self::Supported(Interpreter {
            layout,
            runtime_svma: runtime.address(),
            code_type_svma: code_type.address(),
            unicode_type_svma: unicode_type.address(),
            eval_loop: eval_loop(&elf, facts),
        })
    }
}

/// The version and ABI flags a file name says (`libpython3.12.so.1.0`, `python3.11`,
/// `libpython3.13t.so`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NamedVersion {
    version: Version,
    free_threaded: bool,
    debug: bool,
}

impl NamedVersion {
    fn of(file_name: &str) -> Option<Self> {
        let (_, after) = file_name.split_once("python3.")?;
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let minor = after[..digits].parse().ok()?;
        let flags: &str = after[digits..].split('.').next().unwrap_or("");
        Some(Self { version: Version(minor), free_threaded: flags.contains('t'), debug: flags.contains('d') })
    }
}

/// The `len` bytes at `svma` in its section's data.
fn bytes_at<'data>(
    elf: &ElfFile64<'data, object::Endianness>,
    svma: u64,
    section: SectionIndex,
    len: usize,
) -> Option<&'data [u8]> {
    let section = elf.section_by_index(section).ok()?;
    let data = section.data().ok()?;
    let at = usize::try_from(svma.checked_sub(section.address())?).ok()?;
    data.get(at..at.checked_add(len)?)
}

/// The file ranges of the eval loop's code, from the dynamic and the full symbol tables.
fn eval_loop(elf: &ElfFile64<'_, object::Endianness>, facts: &ElfFacts) -> Vec<Range<u64>> {
    let is_eval = |name: &str| name == "_PyEval_EvalFrameDefault" || name == "_PyEval_EvalFrameDefault.cold";
    let mut ranges: Vec<Range<u64>> = elf
        .dynamic_symbols()
        .chain(elf.symbols())
        .filter(|symbol| symbol.name().is_ok_and(is_eval) && symbol.size() > 0)
        .filter_map(|symbol| {
            let start = file_offset(facts, symbol.address())?;
            Some(start..start.checked_add(symbol.size())?)
        })
        .collect();
    ranges.sort_unstable_by_key(|range| (range.start, range.end));
    ranges.dedup();
    ranges
}

/// The file offset of an address the file states, through its load segments.
fn file_offset(facts: &ElfFacts, svma: u64) -> Option<u64> {
    facts
        .segments
        .iter()
        .find(|s| (s.svma..s.svma.saturating_add(s.file_size)).contains(&svma))
        .map(|s| svma - s.svma + s.file_offset)
}

/// The load bias of a module mapped at `start` from file offset `offset`: what its stated
/// addresses are moved by.
pub fn load_bias(facts: &ElfFacts, start: u64, offset: u64, len: u64) -> Option<u64> {
    let segment = facts
        .segments
        .iter()
        .find(|s| s.file_size > 0 && (offset..offset.saturating_add(len)).contains(&s.file_offset))?;
    let address_of_segment = start.checked_add(segment.file_offset - offset)?;
    Some(address_of_segment.wrapping_sub(segment.svma))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_say_version_and_build() {
        let named = |name| NamedVersion::of(name).map(|n| (n.version.0, n.free_threaded, n.debug));
        assert_eq!(named("libpython3.12.so.1.0"), Some((12, false, false)));
        assert_eq!(named("python3.11"), Some((11, false, false)));
        assert_eq!(named("libpython3.13t.so.1.0"), Some((13, true, false)));
        assert_eq!(named("python3.13d"), Some((13, false, true)));
        assert_eq!(named("python3"), None);
        assert_eq!(named("libc.so.6"), None);
    }
}
