//! HotSpot's tables for external tools, read from a live process.
//!
//! `libjvm.so` exports four tables (`gHotSpotVMStructs`: fields, `gHotSpotVMTypes`: type sizes,
//! and the int and long constants) and 20 scalars giving each entry's stride and the offsets of
//! its members. The file holds the tables, but the field offsets and the scalars are stored by a
//! constructor as the library loads: they can only be read from the process. Everything read is
//! the target's and checked: strides and member offsets bounded, tables read in bounded chunks
//! up to a cap, names taken from the file's own read-only segments (a pointer elsewhere is not a
//! name), entries that fail skipped.
use std::{collections::HashMap, fmt, ops::Range};

use crate::runtimes::memory::ReadMemory;
use object::{Object as _, ObjectSegment as _, ObjectSymbol as _, SegmentFlags, read::elf::ElfFile64};

/// The exported pointers to the four tables.
const TABLES: [&str; 4] =
    ["gHotSpotVMStructs", "gHotSpotVMTypes", "gHotSpotVMIntConstants", "gHotSpotVMLongConstants"];

/// The exported scalars: for each kind of entry, its members' offsets, then its stride.
const SCALARS: [&str; 20] = [
    "gHotSpotVMStructEntryTypeNameOffset",
    "gHotSpotVMStructEntryFieldNameOffset",
    "gHotSpotVMStructEntryTypeStringOffset",
    "gHotSpotVMStructEntryIsStaticOffset",
    "gHotSpotVMStructEntryOffsetOffset",
    "gHotSpotVMStructEntryAddressOffset",
    "gHotSpotVMStructEntryArrayStride",
    "gHotSpotVMTypeEntryTypeNameOffset",
    "gHotSpotVMTypeEntrySuperclassNameOffset",
    "gHotSpotVMTypeEntryIsOopTypeOffset",
    "gHotSpotVMTypeEntryIsIntegerTypeOffset",
    "gHotSpotVMTypeEntryIsUnsignedOffset",
    "gHotSpotVMTypeEntrySizeOffset",
    "gHotSpotVMTypeEntryArrayStride",
    "gHotSpotVMIntConstantEntryNameOffset",
    "gHotSpotVMIntConstantEntryValueOffset",
    "gHotSpotVMIntConstantEntryArrayStride",
    "gHotSpotVMLongConstantEntryNameOffset",
    "gHotSpotVMLongConstantEntryValueOffset",
    "gHotSpotVMLongConstantEntryArrayStride",
];

/// Most entries read of a table (HotSpot's have under 800).
const MAX_ENTRIES: usize = 4096;
/// Largest stride taken (HotSpot's are 16 to 48 bytes).
const MAX_STRIDE: u64 = 256;
/// Entries read at once.
const CHUNK_ENTRIES: usize = 64;
/// Longest name taken (HotSpot's longest is 68 bytes).
const MAX_NAME: usize = 128;

/// What a `libjvm.so` file says of its tables: where the exported symbols are and which of its
/// bytes are read-only data (where the tables' names are).
#[derive(Debug)]
pub struct Image {
    /// Link-time addresses of [`TABLES`], then of [`SCALARS`].
    symbols: [u64; 24],
    /// Its read-only loaded segments: link-time addresses, and the file offset of their start.
    read_only: Vec<(Range<u64>, u64)>,
}

impl Image {
    /// The tables' symbols of the ELF file `bytes`; `None` unless it exports all of them.
    pub fn read(bytes: &[u8]) -> Option<Self> {
        let elf = ElfFile64::<object::Endianness>::parse(bytes).ok()?;
        let mut symbols = [0; 24];
        for (slot, name) in symbols.iter_mut().zip(TABLES.iter().chain(&SCALARS)) {
            let symbol = elf.dynamic_symbols().find(|s| s.name() == Ok(*name) && !s.is_undefined())?;
            *slot = symbol.address();
        }
        let read_only = elf
            .segments()
            .filter(|segment| matches!(segment.flags(), SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_W == 0))
            .map(|segment| {
                let (offset, size) = segment.file_range();
                (segment.address()..segment.address() + size, offset)
            })
            .collect();
        Some(Self { symbols, read_only })
    }

    /// The NUL-terminated name at link-time address `svma` of the file `bytes`, if it lies in a
    /// read-only segment and is short printable text.
    pub fn name(&self, bytes: &[u8], svma: u64) -> Option<String> {
        let (range, offset) = self.read_only.iter().find(|(range, _)| range.contains(&svma))?;
        let start = usize::try_from(offset + (svma - range.start)).ok()?;
        let end = usize::try_from(offset + (range.end - range.start)).ok()?.min(bytes.len());
        let text = bytes.get(start..end)?;
        let len = text.iter().take(MAX_NAME).position(|&b| b == 0)?;
        let name = std::str::from_utf8(&text[..len]).ok()?;
        name.bytes().all(|b| b.is_ascii_graphic() || b == b' ').then(|| name.to_owned())
    }
}

/// A field of a HotSpot type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    /// Of each object: its byte offset.
    Offset(u64),
    /// A static variable: its address in the process.
    Static(u64),
}

/// Why a process's tables were not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The scalars cannot be read yet (`libjvm.so` is still being loaded) or are still zero
    /// (its constructors have not run yet).
    NotReady,
    /// Memory the tables point to could not be read.
    Unreadable { what: &'static str, address: u64 },
    /// A stride or member offset out of bounds.
    BadLayout { what: &'static str, value: u64 },
    /// A table without a single entry that reads as one.
    Empty(&'static str),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotReady => write!(f, "its tables are not filled in yet (the JVM is loading)"),
            Refusal::Unreadable { what, address } => write!(f, "cannot read {what} at {address:#x}"),
            Refusal::BadLayout { what, value } => write!(f, "{what} is {value}, not a table's"),
            Refusal::Empty(table) => write!(f, "no entry of {table} reads as one"),
        }
    }
}

impl std::error::Error for Refusal {}

/// The tables of one JVM, by name.
#[derive(Debug, Default)]
pub struct VmStructs {
    fields: HashMap<(String, String), Field>,
    /// The C++ type of each field, when the table names one (`int`, `u2`, `address`...).
    field_types: HashMap<(String, String), String>,
    type_sizes: HashMap<String, u64>,
    int_constants: HashMap<String, i32>,
    long_constants: HashMap<String, u64>,
    /// Entries skipped: a name outside the file's read-only data, or unreadable.
    pub skipped: usize,
}

/// One kind of entry: its stride and the offsets of the members read.
struct Entry<const N: usize> {
    stride: usize,
    members: [usize; N],
}

impl<const N: usize> Entry<N> {
    /// From the scalars: `N` member offsets, then the stride. Each member (8 bytes at most)
    /// must lie within the stride.
    fn new(scalars: &[u64]) -> Result<Self, Refusal> {
        let stride = scalars[N];
        if !(8..=MAX_STRIDE).contains(&stride) {
            return Err(Refusal::BadLayout { what: "an entry's stride", value: stride });
        }
        let mut members = [0; N];
        for (member, &offset) in members.iter_mut().zip(scalars) {
            if offset + 8 > stride {
                return Err(Refusal::BadLayout { what: "a member's offset", value: offset });
            }
            *member = offset as usize;
        }
        Ok(Self { stride: stride as usize, members })
    }
}

impl VmStructs {
    /// Reads the tables of a process whose `libjvm.so` (the file `bytes`, described by `image`)
    /// is loaded at `bias`, through `read`.
    pub fn read(image: &Image, bytes: &[u8], bias: u64, read: &mut ReadMemory<'_>) -> Result<Self, Refusal> {
        let mut values = [0u64; 24];
        for (value, &svma) in values.iter_mut().zip(&image.symbols) {
            let mut raw = [0; 8];
            // Found as soon as its code is mapped: its data may not be yet, or not touched.
            if !read(bias.wrapping_add(svma), &mut raw) {
                return Err(Refusal::NotReady);
            }
            *value = u64::from_ne_bytes(raw);
        }
        let (tables, scalars) = values.split_at(4);
        if scalars.iter().all(|&s| s == 0) {
            return Err(Refusal::NotReady);
        }
        let structs = Entry::<6>::new(&scalars[0..7])?;
        let types = Entry::<6>::new(&scalars[7..14])?;
        let ints = Entry::<2>::new(&scalars[14..17])?;
        let longs = Entry::<2>::new(&scalars[17..20])?;
        let name = |pointer: u64| image.name(bytes, pointer.wrapping_sub(bias));
        let mut vm = Self::default();
        let skipped = &mut vm.skipped;
        for_each_entry(read, tables[0], &structs, "gHotSpotVMStructs", skipped, |entry| {
            let [type_name, field_name, type_string, is_static, offset, address] =
                structs.members.map(|m| word(entry, m));
            let field = if is_static as u32 != 0 { Field::Static(address) } else { Field::Offset(offset) };
            let key = (name(type_name)?, name(field_name)?);
            if let Some(type_string) = name(type_string) {
                vm.field_types.insert(key.clone(), type_string);
            }
            vm.fields.insert(key, field);
            Some(())
        })?;
        for_each_entry(read, tables[1], &types, "gHotSpotVMTypes", skipped, |entry| {
            vm.type_sizes.insert(name(word(entry, types.members[0]))?, word(entry, types.members[5]));
            Some(())
        })?;
        for_each_entry(read, tables[2], &ints, "gHotSpotVMIntConstants", skipped, |entry| {
            let value = word(entry, ints.members[1]) as u32 as i32;
            vm.int_constants.insert(name(word(entry, ints.members[0]))?, value);
            Some(())
        })?;
        for_each_entry(read, tables[3], &longs, "gHotSpotVMLongConstants", skipped, |entry| {
            vm.long_constants.insert(name(word(entry, longs.members[0]))?, word(entry, longs.members[1]));
            Some(())
        })?;
        for (table, empty) in
            [("gHotSpotVMStructs", vm.fields.is_empty()), ("gHotSpotVMTypes", vm.type_sizes.is_empty())]
        {
            if empty {
                return Err(Refusal::Empty(table));
            }
        }
        Ok(vm)
    }

    /// The address of static variable `type_name::field`.
    pub fn static_address(&self, type_name: &str, field: &str) -> Option<u64> {
        match self.fields.get(&(type_name.to_owned(), field.to_owned()))? {
            Field::Static(address) => Some(*address),
            Field::Offset(_) => None,
        }
    }

    /// The offset of field `field` of each `type_name` object, and its size when its type has
    /// one in the tables.
    pub fn field(&self, type_name: &str, field: &str) -> Option<(u64, Option<u64>)> {
        let key = (type_name.to_owned(), field.to_owned());
        let Field::Offset(offset) = *self.fields.get(&key)? else { return None };
        let size = self.field_types.get(&key).and_then(|type_string| self.type_size(type_string));
        Some((offset, size))
    }

    /// The size of type `type_name`.
    pub fn type_size(&self, type_name: &str) -> Option<u64> {
        self.type_sizes.get(type_name).copied()
    }

    pub fn int_constant(&self, name: &str) -> Option<i32> {
        self.int_constants.get(name).copied()
    }

    /// How many fields, types and constants were read.
    pub fn counts(&self) -> TableCounts {
        TableCounts {
            fields: self.fields.len(),
            types: self.type_sizes.len(),
            constants: self.int_constants.len() + self.long_constants.len(),
        }
    }
}

/// How much a JVM's tables for external tools held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableCounts {
    pub fields: usize,
    pub types: usize,
    pub constants: usize,
}

/// The 8 bytes at `offset` of `entry` (an int32 member is the low half).
fn word(entry: &[u8], offset: usize) -> u64 {
    u64::from_ne_bytes(entry[offset..offset + 8].try_into().unwrap_or_default())
}

/// Calls `visit` with each entry of the table at `address` (in chunks, up to its end marker: an
/// entry whose first member, a name, is NULL), at most [`MAX_ENTRIES`]; counts in `skipped` the
/// entries it refuses (`None`: a name that is not one).
fn for_each_entry<const N: usize>(
    read: &mut ReadMemory<'_>,
    address: u64,
    entry: &Entry<N>,
    table: &'static str,
    skipped: &mut usize,
    mut visit: impl FnMut(&[u8]) -> Option<()>,
) -> Result<(), Refusal> {
    let mut chunk = vec![0; entry.stride * CHUNK_ENTRIES];
    for first in (0..MAX_ENTRIES).step_by(CHUNK_ENTRIES) {
        let at = address.wrapping_add((first * entry.stride) as u64);
        if !read(at, &mut chunk) {
            return Err(Refusal::Unreadable { what: table, address: at });
        }
        for one in chunk.chunks_exact(entry.stride) {
            if word(one, entry.members[0]) == 0 {
                return Ok(());
            }
            if visit(one).is_none() {
                *skipped += 1;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::memory::tests::Pieces;

    const BIAS: u64 = 0x7f00_0000_0000;
    /// Where the fixture's "file" keeps its names (link-time address = file offset).
    const NAMES: u64 = 0x1000;
    const SYMBOLS: u64 = 0x4000;
    const TABLES_AT: u64 = 0x5000;

    /// A file of names, an image over it, and a process with HotSpot's layouts (strides 48, 40,
    /// 16, 16) and one entry of each table.
    fn fixture() -> (Vec<u8>, Image, Pieces) {
        let mut file = vec![0u8; 0x2000];
        let mut names = Vec::new();
        for (i, text) in
            ["CodeCache", "_low_bound", "nmethod", "_compile_id", "BytesPerWord", "Hot"].iter().enumerate()
        {
            let at = NAMES as usize + i * 32;
            file[at..at + text.len()].copy_from_slice(text.as_bytes());
            names.push(BIAS + NAMES + i as u64 * 32);
        }
        let image = Image {
            symbols: std::array::from_fn(|i| SYMBOLS + 8 * i as u64),
            read_only: vec![(NAMES..NAMES + 0x1000, NAMES)],
        };
        let tables = [TABLES_AT, TABLES_AT + 0x400, TABLES_AT + 0x800, TABLES_AT + 0xc00].map(|t| BIAS + t);
        let scalars = [0, 8, 16, 24, 32, 40, 48, 0, 8, 16, 20, 24, 32, 40, 0, 8, 16, 0, 8, 16];
        let mut symbols: Vec<u8> = tables.iter().chain(&scalars).flat_map(|v| v.to_ne_bytes()).collect();
        symbols.resize(0x1000, 0);
        let mut data = vec![0u8; 0x1000 + 64 * 48];
        let put = |data: &mut Vec<u8>, at: u64, value: u64| {
            let at = (at - TABLES_AT) as usize;
            data[at..at + 8].copy_from_slice(&value.to_ne_bytes());
        };
        // CodeCache::_low_bound, static at 0x1234; nmethod::_compile_id at offset 0x130.
        for (i, (type_name, field, is_static, offset, address)) in
            [(names[0], names[1], 1, 0, 0x1234), (names[2], names[3], 0, 0x130, 0)].into_iter().enumerate()
        {
            let at = TABLES_AT + 48 * i as u64;
            for (member, value) in [(0, type_name), (8, field), (24, is_static), (32, offset), (40, address)]
            {
                put(&mut data, at + member, value);
            }
        }
        put(&mut data, TABLES_AT + 0x400, names[2]);
        put(&mut data, TABLES_AT + 0x400 + 32, 0x1b0);
        put(&mut data, TABLES_AT + 0x800, names[4]);
        put(&mut data, TABLES_AT + 0x800 + 8, 8);
        put(&mut data, TABLES_AT + 0xc00, names[5]);
        put(&mut data, TABLES_AT + 0xc00 + 8, 42);
        (file, image, Pieces(vec![(BIAS + SYMBOLS, symbols), (BIAS + TABLES_AT, data)]))
    }

    #[test]
    fn reads_fields_types_and_constants_by_name() {
        let (file, image, memory) = fixture();
        let vm = VmStructs::read(&image, &file, BIAS, &mut |a, b| memory.read(a, b)).unwrap();
        assert_eq!(vm.static_address("CodeCache", "_low_bound"), Some(0x1234));
        let field = |type_name: &str, field: &str| vm.fields.get(&(type_name.into(), field.into())).copied();
        assert_eq!(field("nmethod", "_compile_id"), Some(Field::Offset(0x130)));
        assert_eq!(vm.static_address("nmethod", "_compile_id"), None);
        assert_eq!(vm.type_sizes.get("nmethod"), Some(&0x1b0));
        assert_eq!(vm.int_constants.get("BytesPerWord"), Some(&8));
        assert_eq!(vm.long_constants.get("Hot"), Some(&42));
        assert_eq!(vm.counts(), TableCounts { fields: 2, types: 1, constants: 2 });
        assert_eq!(vm.skipped, 0);
    }

    #[test]
    fn refuses_tables_not_filled_in_or_out_of_bounds() {
        let (file, image, mut memory) = fixture();
        fn scalars(memory: &mut Pieces) -> &mut [u8] {
            &mut memory.0[0].1[32..32 + 160]
        }
        let saved = scalars(&mut memory).to_vec();
        scalars(&mut memory).fill(0);
        let read = |memory: &Pieces| VmStructs::read(&image, &file, BIAS, &mut |a, b| memory.read(a, b));
        assert_eq!(read(&memory).unwrap_err(), Refusal::NotReady);
        scalars(&mut memory).copy_from_slice(&saved);
        // A stride of 1 MiB; then a member beyond its stride.
        scalars(&mut memory)[48..56].copy_from_slice(&(1u64 << 20).to_ne_bytes());
        assert!(matches!(read(&memory).unwrap_err(), Refusal::BadLayout { what: "an entry's stride", .. }));
        scalars(&mut memory).copy_from_slice(&saved);
        scalars(&mut memory)[40..48].copy_from_slice(&44u64.to_ne_bytes());
        assert!(matches!(read(&memory).unwrap_err(), Refusal::BadLayout { what: "a member's offset", .. }));
    }

    #[test]
    fn names_outside_read_only_data_are_skipped_and_garbage_ends() {
        let (file, image, mut memory) = fixture();
        // The first struct entry's type name points at writable memory of the process.
        memory.0[1].1[0..8].copy_from_slice(&(BIAS + TABLES_AT).to_ne_bytes());
        let vm = VmStructs::read(&image, &file, BIAS, &mut |a, b| memory.read(a, b)).unwrap();
        assert_eq!(vm.skipped, 1);
        assert_eq!(vm.static_address("CodeCache", "_low_bound"), None);
        // A table with no end marker in readable memory: refused once its memory ends.
        memory.0[1].1[48 * 2..].fill(0xff);
        assert!(matches!(
            VmStructs::read(&image, &file, BIAS, &mut |a, b| memory.read(a, b)).unwrap_err(),
            Refusal::Unreadable { what: "gHotSpotVMStructs", .. }
        ));
    }
}
