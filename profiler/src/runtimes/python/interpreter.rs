//! What a CPython image (libpython, or an executable with the interpreter linked in) says of
//! itself, read once per module: its version, where `_PyRuntime` (3.6's `interp_head`) and
//! `PyCode_Type` are, and which of its code is the eval loop.
use std::ops::Range;

use object::{Object as _, ObjectSymbol as _, read::elf::ElfFile64};

use super::{
    debug_offsets,
    layout::{self, Layout, Root, Version},
};
use crate::{
    runtimes::{
        elf_code::{UnwindEntries, bytes_at, exported, file_offset},
        ranges::Ranges,
    },
    untrusted::ElfFacts,
};

/// A CPython image this profiler reads.
#[derive(Debug, Clone)]
pub struct Interpreter {
    /// The version's table, with what the image states of itself (3.13+) in place.
    pub layout: Layout,
    /// Addresses as the file states them (add the load bias). `runtime_svma` is the layout's
    /// [`Root`]: `_PyRuntime`, or 3.6's `interp_head`.
    pub runtime_svma: u64,
    pub code_type_svma: u64,
    pub unicode_type_svma: u64,
    /// The eval loop (`_PyEval_EvalFrameDefault`, and its `.cold` part where the symbol table
    /// names one), as file offsets: the native frames the Python frames replace.
    pub eval_loop: Ranges,
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
        let exported = |name: &str| exported(&elf, name);
        let (Some(code_type), Some(unicode_type)) = (exported("PyCode_Type"), exported("PyUnicode_Type"))
        else {
            return Self::NotPython;
        };
        if exported("PyUnicode_AsUTF8").is_none() {
            return Self::Unsupported("CPython 2".into());
        }
        let runtime = exported("_PyRuntime");
        // 3.6 has no `_PyRuntime`, but its interpreters' head.
        if runtime.is_none() && exported("PyInterpreterState_Head").is_none() {
            return Self::NotPython;
        }
        let version = match exported("Py_Version") {
            None => version_by_exports(|name| exported(name).is_some()),
            Some(symbol) => {
                match symbol.section_index().and_then(|section| bytes_at(&elf, symbol.address(), section, 4))
                {
                    Some(bytes) => Version(bytes[2]),
                    None => return Self::Unsupported("CPython of an unknown version".into()),
                }
            }
        };
        let named = NamedFlags::of(file_name);
        if named.is_some_and(|named| named.free_threaded) {
            return Self::Unsupported(format!("CPython {version} free-threaded"));
        }
        if named.is_some_and(|named| named.debug) {
            return Self::Unsupported(format!("CPython {version} debug build"));
        }
        let Some(layout) = layout::layout(version) else {
            return Self::Unsupported(format!("CPython {version}"));
        };
        let root = match (layout.root, &runtime) {
            (Root::Runtime, Some(runtime)) => runtime.address(),
            (Root::InterpreterHead, _) => match interpreter_head(&elf) {
                Some(address) => address,
                None => return Self::Unsupported(format!("CPython {version} without interp_head")),
            },
            (Root::Runtime, None) => {
                return Self::Unsupported(format!("CPython {version} without _PyRuntime"));
            }
        };
        let own = runtime.filter(|_| version >= Version(13)).and_then(|runtime| {
            let section = runtime.section_index()?;
            let end = debug_offsets::BYTES.min(usize::try_from(runtime.size()).ok()?);
            bytes_at(&elf, runtime.address(), section, end)
        });
        let layout = match debug_offsets::adopt(layout, own.unwrap_or_default()) {
            Ok(layout) => layout,
            Err(disagreement) => {
                let release = own.and_then(debug_offsets::release).unwrap_or_else(|| version.to_string());
                return Self::Unsupported(format!("CPython {release}: {disagreement}"));
            }
        };
        Self::Supported(Interpreter {
            layout,
            runtime_svma: root,
            code_type_svma: code_type.address(),
            unicode_type_svma: unicode_type.address(),
            eval_loop: eval_loop(&elf, facts),
        })
    }
}

/// 3.6's `interp_head`: by its name in the full symbol table, else from the code of the exported
/// `PyInterpreterState_Head`, which returns it (`mov interp_head(%rip), %rax; ret`).
fn interpreter_head(elf: &ElfFile64<'_, object::Endianness>) -> Option<u64> {
    if let Some(symbol) =
        elf.symbols().find(|symbol| symbol.name() == Ok("interp_head") && symbol.size() == 8)
    {
        return Some(symbol.address());
    }
    let function = elf.dynamic_symbols().find(|symbol| {
        symbol.name() == Ok("PyInterpreterState_Head") && symbol.kind() == object::SymbolKind::Text
    })?;
    let code = bytes_at(elf, function.address(), function.section_index()?, 8)?;
    interp_head_from_code(function.address(), code)
}

/// The address `PyInterpreterState_Head` at `address`, whose first bytes are `code`, loads its
/// result from: `48 8b 05 <rel32>` (`mov rel32(%rip), %rax`) then `c3` (`ret`), as GCC and
/// clang compile it; `None` for any other code.
fn interp_head_from_code(address: u64, code: &[u8]) -> Option<u64> {
    let [0x48, 0x8b, 0x05, a, b, c, d, 0xc3, ..] = *code else { return None };
    let displacement = i64::from(i32::from_le_bytes([a, b, c, d]));
    (address + 7).checked_add_signed(displacement)
}

/// The minor version of a CPython older than 3.11 (which states it in `Py_Version`), whatever its
/// file is called (a renamed interpreter, a server with it linked in), from the newest of the
/// functions each release added that it exports (`exports`).
fn version_by_exports(exports: impl Fn(&str) -> bool) -> Version {
    const ADDED: [(&str, u8); 4] =
        [("Py_IsNone", 10), ("PyFrame_GetCode", 9), ("PyCode_NewWithPosOnlyArgs", 8), ("_PyRuntime", 7)];
    let minor = ADDED.iter().find(|(name, _)| exports(name)).map_or(6, |&(_, minor)| minor);
    Version(minor)
}

/// The ABI flags a file name says (`libpython3.13t.so`, `python3.13d`), which builds of other
/// layouts carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NamedFlags {
    free_threaded: bool,
    debug: bool,
}

impl NamedFlags {
    fn of(file_name: &str) -> Option<Self> {
        let (_, after) = file_name.split_once("python3.")?;
        let flags = after.trim_start_matches(|c: char| c.is_ascii_digit()).split('.').next().unwrap_or("");
        Some(Self { free_threaded: flags.contains('t'), debug: flags.contains('d') })
    }
}

/// The file ranges of the eval loop's code, from the dynamic and the full symbol tables (read in
/// one pass: a pyenv libpython's full table has 15,000 symbols), and the parts of it the
/// compiler split off that no symbol names (see [`split_parts`]); the symbols' first.
fn eval_loop(elf: &ElfFile64<'_, object::Endianness>, facts: &ElfFacts) -> Ranges {
    let mut symbols: Vec<Range<u64>> = Vec::new();
    let mut function = None;
    for symbol in elf.dynamic_symbols().chain(elf.symbols()) {
        let Ok(name) = symbol.name_bytes() else { continue };
        let is_function = name == EVAL_LOOP.as_bytes();
        if !(is_function || name == EVAL_LOOP_COLD.as_bytes()) || symbol.size() == 0 {
            continue;
        }
        if is_function && symbol.kind() == object::SymbolKind::Text && function.is_none() {
            function = Some(symbol);
        }
        symbols.extend(symbol.address().checked_add(symbol.size()).map(|end| symbol.address()..end));
    }
    let parts = function
        .and_then(|function| {
            let size = usize::try_from(function.size()).ok()?.min(MAX_EVAL_LOOP_BYTES);
            let code = bytes_at(elf, function.address(), function.section_index()?, size)?;
            let unwind = UnwindEntries::of(elf)?;
            Some(split_parts(function.address(), code, |address| unwind.covering(address)))
        })
        .unwrap_or_default();
    let in_file = symbols.into_iter().chain(parts).filter_map(|range| {
        let start = file_offset(facts, range.start)?;
        Some(start..start.checked_add(range.end - range.start)?)
    });
    Ranges::new(in_file, MAX_EVAL_LOOP_RANGES)
}

const EVAL_LOOP: &str = "_PyEval_EvalFrameDefault";
const EVAL_LOOP_COLD: &str = "_PyEval_EvalFrameDefault.cold";
/// Ranges of the eval loop kept at most: GCC splits a handful of parts off it, and each native
/// frame is looked up in them.
const MAX_EVAL_LOOP_RANGES: usize = 64;
/// Bytes of the eval loop's body searched for jumps into parts split off it at most (CPython's is
/// 10-200 KB; the search is linear in it), and the landings kept of those jumps at most.
const MAX_EVAL_LOOP_BYTES: usize = 4 << 20;
const MAX_LANDINGS: usize = 1 << 20;

/// The parts of the function at `address` (whose code is `code`) that the compiler put elsewhere:
/// GCC moves the code it finds cold (by its guesses, or by a profile: Debian's builds move most
/// of the eval loop) out of the function's body, into a `.cold` part only the full symbol table
/// names. Such a part is code the function jumps into, not at its start as a tail call to
/// another function does, with an unwind entry of its own (`fde_covering`). The body's direct jumps
/// are found by their encodings (`jmp rel32`, `jcc rel32`) without decoding every instruction:
/// a part counts once two of them land inside it, which bytes that only look like a jump do not
/// do by chance.
fn split_parts(
    address: u64,
    code: &[u8],
    fde_covering: impl Fn(u64) -> Option<Range<u64>>,
) -> Vec<Range<u64>> {
    let body = address..address + code.len() as u64;
    // (the part's start and end, where a jump lands in it), once per jump.
    let mut landings: Vec<(u64, u64, u64)> = Vec::new();
    // Jumps into one part come in runs: its entry is looked up again only past it.
    let mut last_fde: Option<Range<u64>> = None;
    for at in 0..code.len() {
        let opcode_len = match code[at..] {
            [0xe9, ..] => 1,
            [0x0f, 0x80..=0x8f, ..] => 2,
            _ => continue,
        };
        let Some(&[a, b, c, d]) = code.get(at + opcode_len..at + opcode_len + 4) else { continue };
        let next = address + (at + opcode_len + 4) as u64;
        let Some(target) = next.checked_add_signed(i64::from(i32::from_le_bytes([a, b, c, d]))) else {
            continue;
        };
        if body.contains(&target) {
            continue;
        }
        let fde = match &last_fde {
            Some(fde) if fde.contains(&target) => fde.clone(),
            _ => {
                let Some(fde) = fde_covering(target) else { continue };
                last_fde = Some(fde.clone());
                fde
            }
        };
        if fde.start != target && landings.len() < MAX_LANDINGS {
            landings.push((fde.start, fde.end, target));
        }
    }
    landings.sort_unstable();
    landings.dedup();
    landings
        .chunk_by(|a, b| (a.0, a.1) == (b.0, b.1))
        .filter(|landed| landed.len() >= 2)
        .map(|landed| landed[0].0..landed[0].1)
        .filter(|part| !part.contains(&address))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_say_the_build() {
        let named = |name| NamedFlags::of(name).map(|n| (n.free_threaded, n.debug));
        assert_eq!(named("libpython3.12.so.1.0"), Some((false, false)));
        assert_eq!(named("python3.11"), Some((false, false)));
        assert_eq!(named("libpython3.13t.so.1.0"), Some((true, false)));
        assert_eq!(named("python3.13d"), Some((false, true)));
        assert_eq!(named("python3"), None);
        assert_eq!(named("libc.so.6"), None);
        assert_eq!(named("libpython3.6m.so.1.0"), Some((false, false)));
    }

    /// Each release's exports, as the installed interpreters have them (`nm -D --defined-only`).
    #[test]
    fn versions_before_3_11_are_told_apart_by_what_they_export() {
        let releases: [(u8, &[&str]); 5] = [
            (6, &[]),
            (7, &["_PyRuntime"]),
            (8, &["_PyRuntime", "PyCode_NewWithPosOnlyArgs"]),
            (9, &["_PyRuntime", "PyCode_NewWithPosOnlyArgs", "PyFrame_GetCode"]),
            (10, &["_PyRuntime", "PyCode_NewWithPosOnlyArgs", "PyFrame_GetCode", "Py_IsNone"]),
        ];
        for (minor, exports) in releases {
            assert_eq!(version_by_exports(|name| exports.contains(&name)), Version(minor));
        }
    }

    #[test]
    fn parts_the_eval_loop_jumps_into_are_its_own() {
        const BODY: u64 = 0x1000;
        // jmp rel32, jne rel32 (0f 85), a call (e8: not a jump), a jump within the body, and
        // one to the start of another function (a tail call).
        let jump = |at: u64, opcode: &[u8], target: u64| {
            let next = BODY + at + opcode.len() as u64 + 4;
            [opcode, &(target.wrapping_sub(next) as i32).to_le_bytes()[..]].concat()
        };
        let code: Vec<u8> = [
            jump(0, &[0xe9], 0x5010),
            jump(5, &[0x0f, 0x85], 0x5020),
            jump(11, &[0xe8], 0x7010),
            jump(16, &[0xe8], 0x7020),
            jump(21, &[0xe9], BODY + 2),
            jump(26, &[0xe9], 0x6000),
            jump(31, &[0xe9], 0x6000),
        ]
        .concat();
        let fdes = [BODY..BODY + code.len() as u64, 0x5000..0x5800, 0x6000..0x6100, 0x7000..0x7100];
        let covering = |address| fdes.iter().find(|fde| fde.contains(&address)).cloned();
        assert_eq!(split_parts(BODY, &code, covering), vec![Range { start: 0x5000, end: 0x5800 }]);
        // One landing is not enough.
        assert_eq!(split_parts(BODY, &code[..5], covering), Vec::<Range<u64>>::new());
    }

    /// A body made of nothing but jumps, each landing apart in one of thousands of parts: each
    /// part is found once (the image keeps at most [`MAX_EVAL_LOOP_RANGES`] of them).
    #[test]
    fn a_body_of_jumps_everywhere_finds_each_part_once() {
        const BODY: u64 = 0x10_0000;
        const PARTS: u64 = 4_000;
        let jumps = 200_000u64;
        let code: Vec<u8> = (0..jumps)
            .flat_map(|i| {
                let target = 0x100_0000 + (i % PARTS) * 0x100 + 1 + i / PARTS;
                let next = BODY + i * 5 + 5;
                let mut jump = vec![0xe9];
                jump.extend_from_slice(&(target.wrapping_sub(next) as i32).to_le_bytes());
                jump
            })
            .collect();
        let covering = |address: u64| {
            let start = address & !0xff;
            (address >= 0x100_0000).then_some(start..start + 0x100)
        };
        let parts = split_parts(BODY, &code, covering);
        assert_eq!(parts.len(), PARTS as usize);
        assert!(parts.windows(2).all(|pair| pair[0].end <= pair[1].start), "sorted, each once");
        assert_eq!(Ranges::new(parts, MAX_EVAL_LOOP_RANGES).len(), 1, "adjacent parts merge");
    }

    #[test]
    fn interp_head_is_read_from_the_code_that_returns_it() {
        // pyenv's 3.6.15: `mov 0x18a349(%rip),%rax; ret` at 0x174b90 loads 0x2feee0.
        let code = [0x48, 0x8b, 0x05, 0x49, 0xa3, 0x18, 0x00, 0xc3];
        assert_eq!(interp_head_from_code(0x174b90, &code), Some(0x2feee0));
        // 3.7's loads `_PyRuntime.interpreters.head` in two steps: not 3.6's.
        let code = [0x48, 0x8b, 0x05, 0xc1, 0xf1, 0x11, 0x00, 0x48, 0x8b, 0x40, 0x18, 0xc3];
        assert_eq!(interp_head_from_code(0x187ab0, &code), None);
    }
}
