//! Code objects read from the target's memory: what names a Python frame (the qualified name
//! when the version has one, the file, the first line) and the line table that places its
//! instruction (docs/cpython-layouts.md §3–§5). Everything read is the target's: every pointer
//! is checked for its type or bounded before it is followed, every length before it is read,
//! and the name and file name come back raw (printing sanitizes them).
use std::{fmt, sync::Arc};

use super::{
    layout::{BYTES_DATA, BYTES_LENGTH, CodeLayout, Instruction, Layout, OB_TYPE, StringLayout},
    line_table::Lines,
};
use crate::untrusted::{Cache, Charge, DESCRIBED, unkept_once};

/// Names longer than this, in characters, are cut, ending with [`CUT`].
pub const MAX_NAME_CHARS: usize = 1024;
/// File names longer than this, in characters, are cut, ending with [`CUT`].
pub const MAX_FILE_CHARS: usize = 4096;
/// Line tables longer than this, in bytes, are not read: their code objects have no lines.
pub const MAX_LINE_TABLE_BYTES: u64 = 1 << 20;
/// The last character of a cut name.
pub(crate) const CUT: char = '…';

/// Where the target's type objects are (load bias applied): what a code object's and a
/// string's `ob_type` must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Types {
    /// `PyCode_Type`.
    pub code: u64,
    /// `PyUnicode_Type`.
    pub unicode: u64,
}

/// A code object as read: what names its frames and places them on a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeObject {
    /// `co_qualname` when the version has it (3.11+), else `co_name`.
    pub name: String,
    /// `co_filename`.
    pub file: String,
    /// `co_firstlineno`.
    pub first_line: u32,
    /// Its line table, decoded (shared with the code objects that share the table); `None`
    /// when longer than [`MAX_LINE_TABLE_BYTES`], or when the budget of what targets describe
    /// had no room for its lines (its frames are then on its first line).
    lines: Option<Arc<KeptLines>>,
}

/// Lines decoded, and what they hold of the budget of what targets describe, for as long as
/// any code object or cache holds them.
#[derive(Debug)]
pub(crate) struct KeptLines {
    lines: Lines,
    _charge: Charge,
}

impl PartialEq for KeptLines {
    fn eq(&self, other: &Self) -> bool {
        self.lines == other.lines
    }
}

impl Eq for KeptLines {}

impl CodeObject {
    /// The line of the instruction at `offset` (from [`instruction_offset`]).
    pub fn line(&self, offset: i64) -> Option<u32> {
        match &self.lines {
            Some(kept) => kept.lines.line(self.first_line, offset),
            None => (offset < 0).then_some(self.first_line),
        }
    }

    /// About the bytes it holds, but its lines (see [`LineTables`]).
    pub fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.name.len() + self.file.len()
    }
}

/// Line tables decoded, by the address and length of their `bytes` object: code objects that
/// share a table (any number of them may) cost its reading and its lines once. The lines are
/// charged themselves ([`KeptLines`]); an entry here holds a reference. A table freed and
/// another of the same length made at its address since would give its code objects the old
/// table's lines (never their names).
#[derive(Default)]
pub struct LineTables(Cache<(u64, u64), Arc<KeptLines>>);

impl LineTables {
    /// Lets the cache give room back when the budget was short (see [`Cache::relieve`]).
    pub fn relieve(&mut self) {
        self.0.relieve();
    }
}

/// Where a frame is in its code, from the `instr` the eBPF program read
/// ([`profiler_common::runtimes::python::PythonFrame::instr`]), in the unit of the version's line table: bytes up
/// to 3.10, code units from 3.11. Negative before the first instruction. Any value is an
/// offset; one outside the code finds no line.
pub fn instruction_offset(layout: &Layout, code_addr: u64, instr: u64) -> i64 {
    // `f_lasti` is a C int: the low 32 bits.
    let lasti = i64::from(instr as u32 as i32);
    match layout.instruction {
        Instruction::LastiBytes => lasti,
        // 3.10 counts code units, its line table bytes.
        Instruction::LastiUnits => lasti * 2,
        Instruction::Pointer { code_adaptive } => {
            let code_start = code_addr.wrapping_add(u64::from(code_adaptive));
            // One unit before the code (a frame not started in 3.11/3.12) is −1.
            (instr.wrapping_sub(code_start) as i64).div_euclid(2)
        }
    }
}

/// Why a code object could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodeError {
    /// `len` bytes at `addr` could not be read.
    Unreadable { addr: u64, len: usize },
    /// The object at `addr` is not a code object: `ob_type` is another type's address.
    NotCode { addr: u64, ob_type: u64 },
    /// The code object at `addr` does not start on the line the frame's did: it was freed and
    /// the address reused since the sample.
    Replaced { addr: u64, expected: u32, found: u32 },
    /// The code object's `field` points at `addr`, which is not a string this reader decodes.
    BadString { field: &'static str, addr: u64, problem: StringProblem },
    /// The line table at `addr` has a negative length.
    BadLineTable { addr: u64, length: i64 },
}

/// What is wrong with a string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StringProblem {
    /// Its `ob_type` is not `PyUnicode_Type`.
    NotStr {
        ob_type: u64,
    },
    NegativeLength(i64),
    /// A legacy string, whose characters are elsewhere: names and file names of code objects
    /// are always compact (the compiler and unmarshal make them so), so one that is not is not
    /// a name; following its data pointer would only read further into whatever it is.
    NotCompact,
    /// Not 1, 2 or 4 bytes per character (or not 1 for an ASCII string).
    Kind(u32),
}

impl fmt::Display for CodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable { addr, len } => write!(f, "cannot read {len} bytes at {addr:#x}"),
            Self::NotCode { addr, ob_type } => {
                write!(f, "no code object at {addr:#x}: its type is at {ob_type:#x}")
            }
            Self::Replaced { addr, expected, found } => write!(
                f,
                "the code object at {addr:#x} starts on line {found}, the frame's on line {expected}: \
                 replaced since the sample"
            ),
            Self::BadString { field, addr, problem } => write!(f, "{field} at {addr:#x}: {problem}"),
            Self::BadLineTable { addr, length } => write!(f, "line table at {addr:#x} of length {length}"),
        }
    }
}

impl fmt::Display for StringProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotStr { ob_type } => write!(f, "not a str (its type is at {ob_type:#x})"),
            Self::NegativeLength(length) => write!(f, "a str of length {length}"),
            Self::NotCompact => write!(f, "a legacy (not compact) str"),
            Self::Kind(kind) => write!(f, "a str of kind {kind}"),
        }
    }
}

impl std::error::Error for CodeError {}

/// Reads the code object at `addr` with `memory` (which fills the buffer from the target's
/// address, or says it could not), checking that it is a code object and still the one that
/// started on `expected_first_line`. Its line table is left out when longer than
/// [`MAX_LINE_TABLE_BYTES`], and read only when `tables` does not know it.
pub fn read(
    memory: &mut impl FnMut(u64, &mut [u8]) -> bool,
    layout: &Layout,
    types: &Types,
    addr: u64,
    expected_first_line: u32,
    tables: &mut LineTables,
) -> Result<CodeObject, CodeError> {
    let fields = &layout.code;
    let header = read_bytes(memory, addr, 0, header_len(fields))?;
    let ob_type = u64_at(&header, OB_TYPE);
    if ob_type != types.code {
        return Err(CodeError::NotCode { addr, ob_type });
    }
    let first_line = u32_at(&header, fields.first_line);
    if first_line != expected_first_line {
        return Err(CodeError::Replaced { addr, expected: expected_first_line, found: first_line });
    }
    let strings = Strings { layout: &layout.string, unicode: types.unicode };
    let (name_field, name_offset) = match fields.qualname {
        Some(offset) => ("co_qualname", offset),
        None => ("co_name", fields.name),
    };
    let name = strings.read(memory, name_field, u64_at(&header, name_offset), MAX_NAME_CHARS)?;
    let file = strings.read(memory, "co_filename", u64_at(&header, fields.filename), MAX_FILE_CHARS)?;
    let lines = read_lines(memory, layout, u64_at(&header, fields.line_table), tables)?;
    Ok(CodeObject { name, file, first_line, lines })
}

/// The bytes of a code object that hold every field read.
fn header_len(fields: &CodeLayout) -> usize {
    let pointers =
        [Some(OB_TYPE), Some(fields.filename), Some(fields.name), fields.qualname, Some(fields.line_table)];
    let pointers_end = pointers.into_iter().flatten().map(|offset| offset + 8).max().unwrap_or(0);
    pointers_end.max(fields.first_line + 4) as usize
}

/// `len` bytes at `addr + offset`. Nothing is asked of `memory` for none (an empty name or
/// line table), whatever it makes of an empty read.
fn read_bytes(
    memory: &mut impl FnMut(u64, &mut [u8]) -> bool,
    addr: u64,
    offset: u32,
    len: usize,
) -> Result<Vec<u8>, CodeError> {
    let start = addr.checked_add(u64::from(offset)).ok_or(CodeError::Unreadable { addr, len })?;
    let mut bytes = vec![0; len];
    if len == 0 || memory(start, &mut bytes) {
        Ok(bytes)
    } else {
        Err(CodeError::Unreadable { addr: start, len })
    }
}

/// The little-endian `N` bytes at `offset` of a buffer read to hold them.
fn array_at<const N: usize>(bytes: &[u8], offset: u32) -> [u8; N] {
    let start = offset as usize;
    bytes[start..start + N].try_into().expect("the buffer was read to hold the field")
}

fn u64_at(bytes: &[u8], offset: u32) -> u64 {
    u64::from_le_bytes(array_at(bytes, offset))
}

fn u32_at(bytes: &[u8], offset: u32) -> u32 {
    u32::from_le_bytes(array_at(bytes, offset))
}

/// Reads `str` objects (PEP 393).
struct Strings<'a> {
    layout: &'a StringLayout,
    unicode: u64,
}

/// The `state` bit fields of a string.
const KIND_SHIFT: u32 = 2;
const KIND_MASK: u32 = 0b111;
const COMPACT: u32 = 1 << 5;
const ASCII: u32 = 1 << 6;

impl Strings<'_> {
    /// The string at `addr`, the code object's `field`, cut to `max_chars` characters.
    fn read(
        &self,
        memory: &mut impl FnMut(u64, &mut [u8]) -> bool,
        field: &'static str,
        addr: u64,
        max_chars: usize,
    ) -> Result<String, CodeError> {
        let bad = |problem| CodeError::BadString { field, addr, problem };
        let header = read_bytes(memory, addr, 0, StringLayout::STATE as usize + 4)?;
        let ob_type = u64_at(&header, OB_TYPE);
        if ob_type != self.unicode {
            return Err(bad(StringProblem::NotStr { ob_type }));
        }
        let length = u64_at(&header, StringLayout::LENGTH) as i64;
        let length = u64::try_from(length).map_err(|_| bad(StringProblem::NegativeLength(length)))?;
        let state = u32_at(&header, StringLayout::STATE);
        if state & COMPACT == 0 {
            return Err(bad(StringProblem::NotCompact));
        }
        let kind = (state >> KIND_SHIFT) & KIND_MASK;
        let ascii = state & ASCII != 0;
        if !matches!(kind, 1 | 2 | 4) || (ascii && kind != 1) {
            return Err(bad(StringProblem::Kind(kind)));
        }
        let data = if ascii { self.layout.ascii_data } else { self.layout.compact_data };
        // A cut string keeps room for the mark.
        let cut = length > max_chars as u64;
        let chars = if cut { max_chars - 1 } else { length as usize };
        let bytes = read_bytes(memory, addr, data, chars * kind as usize)?;
        let mut text = decode(&bytes, kind, ascii);
        if cut {
            text.push(CUT);
        }
        Ok(text)
    }
}

/// Characters of `kind` bytes each (little-endian); those that are no Unicode scalar value
/// (surrogates, values past U+10FFFF, bytes past 0x7f in an ASCII string) become U+FFFD.
fn decode(bytes: &[u8], kind: u32, ascii: bool) -> String {
    let limit = if ascii { 0x7f } else { u32::MAX };
    bytes
        .chunks_exact(kind as usize)
        .map(|unit| {
            let mut value = [0u8; 4];
            value[..unit.len()].copy_from_slice(unit);
            let code_point = u32::from_le_bytes(value);
            char::from_u32(code_point).filter(|_| code_point <= limit).unwrap_or(char::REPLACEMENT_CHARACTER)
        })
        .collect()
}

/// The lines of the line table at `addr`, decoded, from `tables` when it knows them; `None`
/// when the table is too long to read.
fn read_lines(
    memory: &mut impl FnMut(u64, &mut [u8]) -> bool,
    layout: &Layout,
    addr: u64,
    tables: &mut LineTables,
) -> Result<Option<Arc<KeptLines>>, CodeError> {
    let header = read_bytes(memory, addr, 0, BYTES_LENGTH as usize + 8)?;
    let length = u64_at(&header, BYTES_LENGTH) as i64;
    let length = u64::try_from(length).map_err(|_| CodeError::BadLineTable { addr, length })?;
    if length > MAX_LINE_TABLE_BYTES {
        return Ok(None);
    }
    if let Some(lines) = tables.0.get(&(addr, length)) {
        return Ok(Some(lines.clone()));
    }
    let table = read_bytes(memory, addr, BYTES_DATA, length as usize)?;
    let lines = Lines::decode(layout.line_table, &table);
    let Some(charge) = DESCRIBED.charge(lines.size() as u64) else {
        unkept_once();
        return Ok(None);
    };
    let kept = Arc::new(KeptLines { lines, _charge: charge });
    tables.0.insert((addr, length), kept.clone(), TABLE_ENTRY_BYTES);
    Ok(Some(kept))
}

/// What an entry of [`LineTables`] holds itself, about (its lines are charged on their own).
const TABLE_ENTRY_BYTES: u64 = 64;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::runtimes::{
        memory::tests::Pieces,
        python::{
            layout::{Version, layout},
            line_table::tests::{expand_runs, hex},
        },
    };

    /// What the eBPF program would send for a frame at `offset` (in the line table's unit):
    /// up to 3.10, `f_lasti` read with the 4 bytes after it (`f_lineno`, here 77).
    fn instr_at(layout: &Layout, code_addr: u64, offset: i64) -> u64 {
        let beside = 77 << 32;
        match layout.instruction {
            Instruction::LastiBytes => beside | u64::from(offset as i32 as u32),
            Instruction::LastiUnits => beside | u64::from((offset / 2) as i32 as u32),
            Instruction::Pointer { code_adaptive } => {
                (code_addr + u64::from(code_adaptive)).wrapping_add_signed(2 * offset)
            }
        }
    }

    /// A snapshot of gen_code_objects.py: each code object reads back with the names, file and
    /// lines its interpreter gave, from the bytes saved and no others.
    fn check_snapshot(minor: u8) {
        let name = format!("code-objects-3.{minor}.json");
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/python").join(&name);
        let fixture: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let layout = layout(Version(minor)).unwrap();
        let types = Types {
            code: fixture["types"]["code"].as_u64().unwrap(),
            unicode: fixture["types"]["unicode"].as_u64().unwrap(),
        };
        let chunks = fixture["chunks"].as_array().unwrap();
        let memory = Pieces(
            chunks
                .iter()
                .map(|chunk| (chunk[0].as_u64().unwrap(), hex(chunk[1].as_str().unwrap())))
                .collect(),
        );
        let mut memory = |addr, buffer: &mut [u8]| memory.read(addr, buffer);
        let step = fixture["offset_step"].as_i64().unwrap();
        for code in fixture["codes"].as_array().unwrap() {
            let addr = code["addr"].as_u64().unwrap();
            let first_line = code["first_line"].as_u64().unwrap() as u32;
            let object =
                read(&mut memory, layout, &types, addr, first_line, &mut LineTables::default()).unwrap();
            assert_eq!(object.name, code["name"].as_str().unwrap(), "{name}");
            assert_eq!(object.file, code["file"].as_str().unwrap(), "{name}");
            assert_eq!(object.first_line, first_line);
            for (index, expected) in expand_runs(&code["lines"]).into_iter().enumerate() {
                let offset = index as i64 * step;
                let instr = instr_at(layout, addr, offset);
                assert_eq!(instruction_offset(layout, addr, instr), offset, "{name}");
                assert_eq!(object.line(offset), expected, "{name}: {} at {offset}", object.name);
            }
            let not_started = instruction_offset(layout, addr, instr_at(layout, addr, -step));
            assert_eq!(object.line(not_started), Some(first_line), "{name}");
            let replaced =
                read(&mut memory, layout, &types, addr, first_line + 1, &mut LineTables::default());
            assert_eq!(
                replaced,
                Err(CodeError::Replaced { addr, expected: first_line + 1, found: first_line })
            );
        }
    }

    #[test]
    fn code_objects_of_3_8() {
        check_snapshot(8);
    }

    #[test]
    fn code_objects_of_3_9() {
        check_snapshot(9);
    }

    #[test]
    fn code_objects_of_3_10() {
        check_snapshot(10);
    }

    #[test]
    fn code_objects_of_3_11() {
        check_snapshot(11);
    }

    #[test]
    fn code_objects_of_3_12() {
        check_snapshot(12);
    }

    #[test]
    fn code_objects_of_3_13() {
        check_snapshot(13);
    }

    /// A 3.12 code object built by hand at [`BASE`], its strings and line table after it.
    const BASE: u64 = 0x10_0000;
    const TYPES: Types = Types { code: 0xc0de, unicode: 0x5778 };
    const CODE: usize = 0;
    const TABLE: usize = 0x100;
    const FILE: usize = 0x200;
    const NAME: usize = 0x400;
    const QUALNAME: usize = 0x800;
    const FIRST_LINE: u32 = 10;

    fn layout_3_12() -> &'static Layout {
        layout(Version(12)).unwrap()
    }

    struct Forged(Vec<u8>);

    impl Forged {
        fn new() -> Self {
            let fields = layout_3_12().code;
            let mut forged = Self(vec![0; 0x2000]);
            forged.put_u64(CODE + OB_TYPE as usize, TYPES.code);
            forged.put(CODE + fields.first_line as usize, &FIRST_LINE.to_le_bytes());
            forged.put_u64(CODE + fields.name as usize, BASE + NAME as u64);
            forged.put_u64(CODE + fields.qualname.unwrap() as usize, BASE + QUALNAME as u64);
            forged.put_u64(CODE + fields.filename as usize, BASE + FILE as u64);
            forged.put_u64(CODE + fields.line_table as usize, BASE + TABLE as u64);
            forged.ascii(NAME, "m");
            forged.ascii(QUALNAME, "K.m");
            forged.ascii(FILE, "k.py");
            // The 3.12 worked example of docs/cpython-layouts.md (first line 1 there).
            let table = hex("80 00 d8 08 09 88 41 89 05 80 41 d9 07 08 d8 0f 10 88 08 d8 0c 0d 88 32 80 49");
            forged.put_u64(TABLE + BYTES_LENGTH as usize, table.len() as u64);
            forged.put(TABLE + BYTES_DATA as usize, &table);
            forged
        }

        fn put(&mut self, at: usize, bytes: &[u8]) {
            self.0[at..at + bytes.len()].copy_from_slice(bytes);
        }

        fn put_u64(&mut self, at: usize, value: u64) {
            self.put(at, &value.to_le_bytes());
        }

        /// A str header: type, length, and `state` with `kind` and the compact and ASCII bits.
        fn str_header(&mut self, at: usize, length: u64, kind: u32, ascii: bool) {
            self.put_u64(at + OB_TYPE as usize, TYPES.unicode);
            self.put_u64(at + StringLayout::LENGTH as usize, length);
            let state = kind << KIND_SHIFT | COMPACT | if ascii { ASCII } else { 0 };
            self.put(at + StringLayout::STATE as usize, &state.to_le_bytes());
        }

        fn ascii(&mut self, at: usize, text: &str) {
            self.str_header(at, text.len() as u64, 1, true);
            self.put(at + layout_3_12().string.ascii_data as usize, text.as_bytes());
        }

        /// A compact non-ASCII str of `kind` bytes per code point.
        fn wide(&mut self, at: usize, kind: u32, code_points: &[u32]) {
            self.str_header(at, code_points.len() as u64, kind, false);
            let bytes: Vec<u8> =
                code_points.iter().flat_map(|point| point.to_le_bytes()[..kind as usize].to_vec()).collect();
            self.put(at + layout_3_12().string.compact_data as usize, &bytes);
        }

        fn read(&self, first_line: u32) -> Result<CodeObject, CodeError> {
            let memory = Pieces(vec![(BASE, self.0.clone())]);
            read(
                &mut |addr, buffer| memory.read(addr, buffer),
                layout_3_12(),
                &TYPES,
                BASE,
                first_line,
                &mut LineTables::default(),
            )
        }
    }

    fn string_problem(forged: &Forged, at: usize) -> StringProblem {
        match forged.read(FIRST_LINE) {
            Err(CodeError::BadString { field: "co_qualname", addr, problem }) if addr == BASE + at as u64 => {
                problem
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_forged_object_reads_back() {
        let object = Forged::new().read(FIRST_LINE).unwrap();
        assert_eq!(
            (object.name.as_str(), object.file.as_str(), object.first_line),
            ("K.m", "k.py", FIRST_LINE)
        );
        // The worked example, 9 lines further down.
        let lines: Vec<_> = [-1, 0, 1, 7, 12, 13].map(|offset| object.line(offset)).into();
        assert_eq!(lines, [Some(10), Some(10), Some(11), Some(12), Some(14), None]);
    }

    #[test]
    fn another_type_is_no_code_object() {
        let mut forged = Forged::new();
        forged.put_u64(CODE + OB_TYPE as usize, TYPES.unicode);
        assert_eq!(forged.read(FIRST_LINE), Err(CodeError::NotCode { addr: BASE, ob_type: TYPES.unicode }));
    }

    #[test]
    fn another_first_line_is_a_replaced_object() {
        let error = Forged::new().read(FIRST_LINE + 1).unwrap_err();
        assert_eq!(error, CodeError::Replaced { addr: BASE, expected: FIRST_LINE + 1, found: FIRST_LINE });
        assert!(error.to_string().contains("replaced"), "{error}");
    }

    #[test]
    fn names_of_every_kind_decode_and_invalid_code_points_are_replaced() {
        let mut forged = Forged::new();
        forged.wide(QUALNAME, 1, &[0x63, 0x61, 0x66, 0xe9]);
        forged.wide(FILE, 2, &[0x65e5, 0x672c, 0xd800]);
        assert_eq!(
            forged.read(FIRST_LINE).map(|object| (object.name, object.file)),
            Ok(("café".into(), "日本\u{fffd}".into()))
        );
        forged.wide(QUALNAME, 4, &[0x20000, 0x11_0000]);
        forged.ascii(FILE, "a\u{7f}");
        forged.put(FILE + layout_3_12().string.ascii_data as usize + 1, &[0x80]);
        assert_eq!(
            forged.read(FIRST_LINE).map(|object| (object.name, object.file)),
            Ok(("𠀀\u{fffd}".into(), "a\u{fffd}".into()))
        );
    }

    #[test]
    fn long_names_are_cut_and_huge_lengths_read_no_further() {
        let mut forged = Forged::new();
        forged.ascii(QUALNAME, &"n".repeat(MAX_NAME_CHARS + 1));
        let name = forged.read(FIRST_LINE).unwrap().name;
        assert_eq!(name, "n".repeat(MAX_NAME_CHARS - 1) + "…");
        forged.put_u64(QUALNAME + StringLayout::LENGTH as usize, 1 << 60);
        assert_eq!(forged.read(FIRST_LINE).unwrap().name.chars().count(), MAX_NAME_CHARS);
        // The longest read is that of the longest file name cut.
        forged.put_u64(FILE + StringLayout::LENGTH as usize, i64::MAX as u64);
        let memory = Pieces(vec![(BASE, forged.0.clone())]);
        let mut longest = 0;
        let mut memory = |addr, buffer: &mut [u8]| {
            longest = longest.max(buffer.len());
            memory.read(addr, buffer)
        };
        let object =
            read(&mut memory, layout_3_12(), &TYPES, BASE, FIRST_LINE, &mut LineTables::default()).unwrap();
        assert_eq!((object.file.chars().count(), longest), (MAX_FILE_CHARS, MAX_FILE_CHARS - 1));
    }

    #[test]
    fn a_huge_line_table_is_not_read_but_the_name_comes() {
        let mut forged = Forged::new();
        forged.put_u64(TABLE + BYTES_LENGTH as usize, 1 << 60);
        let object = forged.read(FIRST_LINE).unwrap();
        assert_eq!(object.name, "K.m");
        assert_eq!((object.line(-1), object.line(0)), (Some(FIRST_LINE), None));
        forged.put_u64(TABLE + BYTES_LENGTH as usize, u64::MAX);
        let error = forged.read(FIRST_LINE).unwrap_err();
        assert_eq!(error, CodeError::BadLineTable { addr: BASE + TABLE as u64, length: -1 });
    }

    #[test]
    fn strings_this_reader_does_not_decode() {
        let mut forged = Forged::new();
        forged.str_header(QUALNAME, 3, 3, false);
        assert_eq!(string_problem(&forged, QUALNAME), StringProblem::Kind(3));
        forged.str_header(QUALNAME, 3, 2, true);
        assert_eq!(string_problem(&forged, QUALNAME), StringProblem::Kind(2));
        forged.str_header(QUALNAME, 3, 1, false);
        forged.put(QUALNAME + StringLayout::STATE as usize, &(1u32 << KIND_SHIFT).to_le_bytes());
        assert_eq!(string_problem(&forged, QUALNAME), StringProblem::NotCompact);
        forged.str_header(QUALNAME, u64::MAX, 1, true);
        assert_eq!(string_problem(&forged, QUALNAME), StringProblem::NegativeLength(-1));
        forged.put_u64(QUALNAME + OB_TYPE as usize, TYPES.code);
        assert_eq!(string_problem(&forged, QUALNAME), StringProblem::NotStr { ob_type: TYPES.code });
    }

    #[test]
    fn empty_strings_and_tables_ask_nothing_of_memory() {
        let mut forged = Forged::new();
        forged.ascii(QUALNAME, "");
        forged.put_u64(TABLE + BYTES_LENGTH as usize, 0);
        let memory = Pieces(vec![(BASE, forged.0.clone())]);
        let mut memory = |addr, buffer: &mut [u8]| !buffer.is_empty() && memory.read(addr, buffer);
        let object =
            read(&mut memory, layout_3_12(), &TYPES, BASE, FIRST_LINE, &mut LineTables::default()).unwrap();
        assert_eq!((object.name.as_str(), object.line(0)), ("", None));
    }

    #[test]
    fn pointers_out_of_memory_are_unreadable() {
        let mut forged = Forged::new();
        forged.put_u64(CODE + layout_3_12().code.filename as usize, u64::MAX - 4);
        assert_eq!(forged.read(FIRST_LINE), Err(CodeError::Unreadable { addr: u64::MAX - 4, len: 36 }));
        let memory = Pieces(vec![]);
        let error = read(
            &mut |addr, buffer| memory.read(addr, buffer),
            layout_3_12(),
            &TYPES,
            u64::MAX,
            1,
            &mut LineTables::default(),
        );
        assert!(matches!(error, Err(CodeError::Unreadable { .. })), "{error:?}");
    }

    /// xorshift64: garbage that is the same on every run.
    fn garbage(seed: u64, len: usize) -> Vec<u8> {
        let mut state = seed | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    #[test]
    fn garbage_never_panics() {
        for seed in 0..500u64 {
            for layout in crate::runtimes::python::layout::layouts() {
                let mut forged = Forged(garbage(seed, 0x2000));
                // Let the checks pass sometimes, and the pointers land inside now and then.
                forged.put_u64(OB_TYPE as usize, TYPES.code);
                for (index, offset) in
                    [layout.code.name, layout.code.filename, layout.code.line_table].into_iter().enumerate()
                {
                    if (seed >> index) & 1 == 0 {
                        forged.put_u64(offset as usize, BASE + (seed * 0x97 + offset as u64) % 0x1f00);
                    }
                }
                let memory = Pieces(vec![(BASE, forged.0)]);
                let first_line = u32_at(&memory.0[0].1, layout.code.first_line);
                let mut memory = |addr, buffer: &mut [u8]| memory.read(addr, buffer);
                if let Ok(object) =
                    read(&mut memory, layout, &TYPES, BASE, first_line, &mut LineTables::default())
                {
                    for offset in [-1, 0, 1, 1000, i64::MAX] {
                        let _ = object.line(offset);
                    }
                }
            }
        }
    }

    #[test]
    fn instruction_offsets_of_each_version() {
        let [v3_8, v3_10, v3_12] = [8, 10, 12].map(|minor| layout(Version(minor)).unwrap());
        // The high half is whatever follows `f_lasti`.
        assert_eq!(instruction_offset(v3_8, 0, 0x1234_5678_0000_0010), 16);
        assert_eq!(instruction_offset(v3_8, 0, 0xffff_ffff), -1);
        assert_eq!(instruction_offset(v3_10, 0, 0x0000_0001_0000_0005), 10);
        assert_eq!(instruction_offset(v3_10, 0, 0x7fff_ffff), 0xffff_fffe);
        let start = 0x7f00_0000_1000 + 192;
        assert_eq!(instruction_offset(v3_12, 0x7f00_0000_1000, start + 14), 7);
        assert_eq!(instruction_offset(v3_12, 0x7f00_0000_1000, start - 2), -1);
        assert_eq!(instruction_offset(v3_12, 0x7f00_0000_1000, start - 1), -1);
        assert_eq!(instruction_offset(v3_12, 0x7f00_0000_1000, 0), -(start as i64 / 2));
        // Addresses at the top of the space wrap instead of overflowing.
        assert_eq!(instruction_offset(v3_12, u64::MAX - 100, 91 + 4), 2);
    }
}
