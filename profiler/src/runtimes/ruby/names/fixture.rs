//! A Ruby process's objects made by hand, for the unit tests and the `ruby_names` fuzz target,
//! laid out as docs/ruby-layouts.md has 3.1's and 3.3's; a frame named from any memory as
//! `Running::named` names it; and the most that naming one frame may read, from the readers'
//! caps.
use std::collections::BTreeMap;

use anyhow::{Result, anyhow};

use super::{
    class_path::MAX_IVARS,
    full_label,
    line_table::{MAX_ENTRIES, MAX_WORDS},
    objects::{MAX_STRING_BYTES, OBJECT_BYTES},
    read_iseq, read_method,
};
use crate::runtimes::ruby::layout::{
    ClassLayout, DEFINITION_BYTES, EmbeddedLength, FL_SINGLETON, IMEMO_ISEQ, IMEMO_MENT, INSN_INFO_BYTES,
    Layout, METHOD_TYPE_CFUNC, METHOD_TYPE_ISEQ, ST_ENTRY_BYTES, ST_TABLE_BYTES, STRING_NOEMBED, T_ARRAY,
    T_CLASS, T_ICLASS, T_IMEMO, T_MODULE, T_STRING, layout,
};

/// The most characters of a name read (a label, a path, a method's or a class's name): its
/// bytes cut at [`MAX_STRING_BYTES`], each a character at most (invalid UTF-8 replaced), and
/// the mark of a cut string.
pub const MAX_NAME_CHARS: usize = MAX_STRING_BYTES as usize + 1;
/// The most characters of a full label: "block in " of a label, a class path, a separator and
/// a method's name.
pub const MAX_LABEL_CHARS: usize = 3 * MAX_NAME_CHARS + 1;

/// A String: its header, then its bytes.
const STRING_READS: usize = 2;
const STRING_BYTES: usize = OBJECT_BYTES + MAX_STRING_BYTES as usize;
/// An ID's name: `last_id` and `ids`, a chunk and the entry (each an Array's header and an
/// element), then the String.
const ID_READS: usize = 6 + STRING_READS;
const ID_BYTES: usize = 4 + 8 + 2 * (OBJECT_BYTES + 8) + STRING_BYTES;
/// 3.1's hidden instance variable: the class's `ext` and its `iv_tbl`, the table and its
/// entries, and the name of each entry's ID.
const IVAR_READS: usize = 4 + MAX_IVARS as usize * ID_READS;
const IVAR_BYTES: usize = 16 + ST_TABLE_BYTES + MAX_IVARS as usize * (ST_ENTRY_BYTES as usize + ID_BYTES);
/// The words of the succinct index of the longest sequence indexed.
const INDEX_WORDS: usize = 6 + (MAX_WORDS as usize - 54).div_ceil(512) * 10;
/// The bytes of a sequence's body read (its last field read is the local sequence's, at 176 of
/// 3.1's): checked by [`name_frame`].
const BODY_BYTES: usize = 184;

/// The largest single read of naming a frame: a sequence's line entries.
pub const MAX_READ_BYTES: usize = {
    let lines = MAX_ENTRIES as usize * INSN_INFO_BYTES as usize;
    let index = 8 * INDEX_WORDS;
    let ivars = MAX_IVARS as usize * ST_ENTRY_BYTES as usize;
    let mut most = MAX_STRING_BYTES as usize;
    if lines > most {
        most = lines;
    }
    if index > most {
        most = index;
    }
    if ivars > most {
        most = ivars;
    }
    most
};

/// Reading a sequence: its header and body, its label and base label, its path (an Array's
/// header and element, then a String), its line entries and index.
const ISEQ_READS: usize = 2 + 2 * STRING_READS + 2 + STRING_READS + 2;
const ISEQ_BYTES: usize = OBJECT_BYTES
    + BODY_BYTES
    + 2 * STRING_BYTES
    + OBJECT_BYTES
    + 8
    + STRING_BYTES
    + MAX_ENTRIES as usize * INSN_INFO_BYTES as usize
    + 8 * INDEX_WORDS;
/// Reading a method entry: its header and definition, its name, its class's header, then (a
/// singleton class of 3.1, the worst) the object attached in a hidden instance variable, that
/// object's header, its path in another, and the path's String.
const METHOD_READS: usize = 2 + ID_READS + 1 + IVAR_READS + 1 + IVAR_READS + STRING_READS;
const METHOD_BYTES: usize =
    OBJECT_BYTES + DEFINITION_BYTES + ID_BYTES + 2 * OBJECT_BYTES + 2 * IVAR_BYTES + STRING_BYTES;

/// The most reads naming a frame may make.
pub const MAX_READS: usize = ISEQ_READS + METHOD_READS;
/// The most bytes naming a frame may read in all.
pub const MAX_BYTES_READ: usize = ISEQ_BYTES + METHOD_BYTES;

/// A frame named as `Running::named` names it, from the addresses the kernel's walk sends.
#[derive(Debug, Default)]
pub struct NamedFrame {
    /// Its full label; `None` when the frame goes unnamed.
    pub label: Option<String>,
    /// Every name read: the sequence's labels and path, the method's name and class path.
    pub names: Vec<String>,
    /// The line of each of the program counters asked about, in the sequence read.
    pub lines: Vec<Option<u32>>,
}

/// Names the frame of Ruby 3.`minor` whose control frame has the instruction sequence `iseq`
/// and the method entry `method_entry` (0: none), its IDs in the table at `symbols`, reading
/// with `read` (false: not mapped); and the line of each of `pcs` in the sequence.
pub fn name_frame(
    read: &mut dyn FnMut(u64, &mut [u8]) -> bool,
    minor: u32,
    symbols: u64,
    iseq: u64,
    method_entry: u64,
    pcs: &[u64],
) -> NamedFrame {
    let layout = layout(3, minor).expect("a release read");
    assert!(super::body_bytes(layout) <= BODY_BYTES, "a body's bytes past the bounds'");
    let read = &mut |addr: u64, buffer: &mut [u8]| {
        if read(addr, buffer) {
            Ok(())
        } else {
            Err(anyhow!("{} bytes at {addr:#x} are not mapped", buffer.len()))
        }
    };
    let sequence = (iseq != 0).then(|| read_iseq(read, layout, iseq).ok()).flatten();
    let method = (method_entry != 0).then(|| read_method(read, layout, symbols, method_entry).ok()).flatten();
    let mut named = NamedFrame::default();
    if let Some(sequence) = &sequence {
        named.names.extend([&sequence.label, &sequence.base_label, &sequence.path].map(Clone::clone));
        named.lines = pcs.iter().map(|&pc| sequence.line(pc)).collect();
    }
    if let Some(method) = &method {
        named.names.extend(method.owner.iter().chain([&method.name]).cloned());
    }
    if sequence.is_some() || (iseq == 0 && method.is_some()) {
        named.label = Some(full_label(sequence.as_ref(), method.as_ref()));
    }
    named
}

/// A fuzz input: the release, the addresses a control frame and the process give, a program
/// counter, and the memory from `base` on.
#[derive(Debug)]
pub struct Input<'a> {
    pub minor: u32,
    pub base: u64,
    pub symbols: u64,
    pub iseq: u64,
    pub method_entry: u64,
    pub pc: u64,
    pub memory: &'a [u8],
}

/// An input's bytes before the memory: the release (3.1 when the low bit is clear, else 3.3),
/// then `base`, `symbols`, `iseq`, `method_entry` and `pc`, little-endian.
pub const INPUT_HEADER: usize = 1 + 5 * 8;

impl<'a> Input<'a> {
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let (head, memory) = data.split_first_chunk::<INPUT_HEADER>()?;
        let word = |i: usize| u64::from_le_bytes(head[1 + 8 * i..9 + 8 * i].try_into().unwrap());
        let minor = if head[0] & 1 == 0 { 1 } else { 3 };
        Some(Self {
            minor,
            base: word(0),
            symbols: word(1),
            iseq: word(2),
            method_entry: word(3),
            pc: word(4),
            memory,
        })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = vec![u8::from(self.minor == 3)];
        for word in [self.base, self.symbols, self.iseq, self.method_entry, self.pc] {
            bytes.extend(word.to_le_bytes());
        }
        bytes.extend(self.memory);
        bytes
    }
}

/// The kinds of method entries and classes made.
pub const ISEQ_METHOD: u8 = METHOD_TYPE_ISEQ;
pub const C_METHOD: u8 = METHOD_TYPE_CFUNC;
pub const CLASS: u64 = T_CLASS;
pub const MODULE: u64 = T_MODULE;

/// Where the pieces of memory start; each is followed by a gap, so a read past its end fails.
pub const BASE: u64 = 0x7f00_0000_0000;

/// Target memory: pieces at addresses.
#[derive(Default)]
pub(crate) struct Memory {
    pub(crate) pieces: BTreeMap<u64, Vec<u8>>,
    next: u64,
}

impl Memory {
    pub(crate) fn alloc(&mut self, bytes: Vec<u8>) -> u64 {
        let addr = self.next.max(BASE);
        self.next = (addr + bytes.len() as u64 + 64 + 63) & !63;
        self.pieces.insert(addr, bytes);
        addr
    }

    pub(crate) fn read(&self, addr: u64, buffer: &mut [u8]) -> Result<()> {
        let unmapped = || anyhow!("{} bytes at {addr:#x} are not mapped", buffer.len());
        let (start, bytes) = self.pieces.range(..=addr).next_back().ok_or_else(unmapped)?;
        let from = usize::try_from(addr - start).map_err(|_| unmapped())?;
        let piece = from.checked_add(buffer.len()).and_then(|to| bytes.get(from..to)).ok_or_else(unmapped)?;
        buffer.copy_from_slice(piece);
        Ok(())
    }

    pub(crate) fn write(&mut self, addr: u64, value: &[u8]) {
        let (start, bytes) = self.pieces.range_mut(..=addr).next_back().expect("a piece");
        let from = (addr - start) as usize;
        bytes[from..from + value.len()].copy_from_slice(value);
    }

    pub(crate) fn write_u64(&mut self, addr: u64, value: u64) {
        self.write(addr, &value.to_le_bytes());
    }
}

/// Little-endian words at offsets of an object being built.
fn put(bytes: &mut [u8], offset: u64, value: u64) {
    bytes[offset as usize..offset as usize + 8].copy_from_slice(&value.to_le_bytes());
}

pub(crate) const T_IMEMO_ISEQ: u64 = T_IMEMO | IMEMO_ISEQ << 12;
pub(crate) const T_IMEMO_MENT: u64 = T_IMEMO | IMEMO_MENT << 12;
/// Body types.
pub const METHOD: u32 = 1;
pub const BLOCK: u32 = 2;
/// ID scopes (with `ID_STATIC_SYM`).
pub(crate) const LOCAL: u64 = 0x01;
const INSTANCE: u64 = 0x03;

/// A Ruby process's objects, made by hand for one release.
pub struct Fake {
    pub(crate) memory: Memory,
    pub(in crate::runtimes::ruby) layout: &'static Layout,
    /// `ruby_global_symbols`, its `ids`, their elements, and its chunks.
    pub symbols: u64,
    pub(crate) ids: u64,
    pub(crate) ids_elements: u64,
    pub(crate) chunks: Vec<u64>,
    pub(crate) last_id: u64,
    /// 3.1's hidden instance variables' IDs, and an ordinary one's.
    classpath_id: u64,
    attached_id: u64,
    count_id: u64,
}

/// An instruction sequence to make.
pub struct Sequence<'a> {
    pub kind: u32,
    pub label: &'a str,
    pub base_label: &'a str,
    /// `pathobj`: a String, or an Array of it and a real path.
    pub path: &'a str,
    pub path_in_array: bool,
    pub first_line: u32,
    pub words: u32,
    /// (position, line) of each `insns_info` entry.
    pub entries: &'a [(u32, i32)],
    /// `None`: itself.
    pub local_iseq: Option<u64>,
}

impl Default for Sequence<'_> {
    fn default() -> Self {
        Self {
            kind: METHOD,
            label: "deep",
            base_label: "deep",
            path: "t.rb",
            path_in_array: false,
            first_line: 12,
            words: 20,
            entries: &[(0, 13), (4, 14), (9, 16)],
            local_iseq: None,
        }
    }
}

/// The layout's slot for an object of `bytes` (3.3 allocates in 40, 80, 160, 320, 640).
fn slot(bytes: usize) -> usize {
    [40, 80, 160, 320, 640].into_iter().find(|&slot| slot >= bytes).unwrap_or(bytes)
}

impl Fake {
    pub fn new(minor: u32) -> Self {
        let layout = layout(3, minor).unwrap();
        let mut memory = Memory::default();
        let ids_elements = memory.alloc(vec![0; 8 * 4]);
        let mut ids = vec![0; 40];
        put(&mut ids, 0, T_ARRAY);
        put(&mut ids, 32, ids_elements);
        let ids = memory.alloc(ids);
        let mut symbols = vec![0; 32];
        put(&mut symbols, 16, ids);
        let symbols = memory.alloc(symbols);
        let mut fake = Self {
            memory,
            layout,
            symbols,
            ids,
            ids_elements,
            chunks: Vec::new(),
            last_id: 0,
            classpath_id: 0,
            attached_id: 0,
            count_id: 0,
        };
        // The IDs interned at build time come first.
        fake.last_id = 300;
        fake.classpath_id = fake.intern("__classpath__", LOCAL);
        fake.attached_id = fake.intern("__attached__", LOCAL);
        fake.count_id = fake.intern("@count", INSTANCE);
        fake
    }

    pub fn minor(&self) -> u32 {
        if self.layout.control_frame_bytes == 64 { 1 } else { 3 }
    }

    /// A String, embedded when it fits its release's embedded strings.
    pub fn string(&mut self, text: &str) -> u64 {
        self.string_of(text.as_bytes(), text.len() as u64 <= self.layout.string.max_embedded)
    }

    pub fn string_of(&mut self, bytes: &[u8], embedded: bool) -> u64 {
        let layout = &self.layout.string;
        let len = bytes.len() as u64;
        if !embedded {
            let data = self.memory.alloc(bytes.to_vec());
            let mut object = vec![0; 40];
            put(&mut object, 0, T_STRING | STRING_NOEMBED);
            put(&mut object, 16, len);
            put(&mut object, 24, data);
            return self.memory.alloc(object);
        }
        let data = layout.embedded_data as usize;
        let mut object = vec![0; slot(data + bytes.len() + 1)];
        match layout.embedded_length {
            EmbeddedLength::InFlags => put(&mut object, 0, T_STRING | len << 14),
            EmbeddedLength::Field => {
                put(&mut object, 0, T_STRING);
                put(&mut object, 16, len);
            }
        }
        object[data..data + bytes.len()].copy_from_slice(bytes);
        self.memory.alloc(object)
    }

    /// An Array, embedded when `embedded`.
    pub fn array(&mut self, elements: &[u64], embedded: bool) -> u64 {
        let words: Vec<u8> = elements.iter().flat_map(|element| element.to_le_bytes()).collect();
        if embedded {
            let mut object = vec![0; slot(16 + words.len())];
            put(&mut object, 0, T_ARRAY | 1 << 13 | (elements.len() as u64) << 15);
            object[16..16 + words.len()].copy_from_slice(&words);
            return self.memory.alloc(object);
        }
        let data = self.memory.alloc(words);
        let mut object = vec![0; 40];
        put(&mut object, 0, T_ARRAY);
        put(&mut object, 16, elements.len() as u64);
        put(&mut object, 32, data);
        self.memory.alloc(object)
    }

    /// Interns `name` at the next serial, in `scope`.
    pub fn intern(&mut self, name: &str, scope: u64) -> u64 {
        self.last_id += 1;
        self.intern_at(self.last_id, name);
        self.last_id << 4 | scope
    }

    /// Puts `name` at `serial` of the table, making its chunk when it is the first.
    pub fn intern_at(&mut self, serial: u64, name: &str) {
        let chunk = (serial / 512) as usize;
        while self.chunks.len() <= chunk {
            let new = self.array(&[0; 1024], false);
            self.memory.write_u64(self.ids_elements + 8 * self.chunks.len() as u64, new);
            self.chunks.push(new);
        }
        self.memory.write_u64(self.ids + 16, self.chunks.len() as u64);
        let string = self.string(name);
        let elements = self.word(self.chunks[chunk] + 32);
        self.memory.write_u64(elements + serial % 512 * 16, string);
        self.last_id = self.last_id.max(serial);
        self.memory.write(self.symbols, &(self.last_id as u32).to_le_bytes());
    }

    pub fn word(&self, addr: u64) -> u64 {
        let mut bytes = [0; 8];
        self.memory.read(addr, &mut bytes).unwrap();
        u64::from_le_bytes(bytes)
    }

    /// A class (or module: `tag`) with a path, or a singleton class attached to `attached`.
    pub fn class(&mut self, tag: u64, path: Option<&str>, attached: Option<u64>) -> u64 {
        let flags = tag | if attached.is_some() { FL_SINGLETON } else { 0 };
        let path = path.map(|path| self.string(path));
        match self.layout.class {
            ClassLayout::Fields { classpath, attached_object } => {
                let mut object = vec![0; 160];
                put(&mut object, 0, flags);
                put(&mut object, classpath, path.unwrap_or(0));
                put(&mut object, attached_object, attached.unwrap_or(0));
                self.memory.alloc(object)
            }
            ClassLayout::IvarTable { ext, iv_tbl } => {
                let deleted = self.string("Deleted");
                // Entry 0 is before the table's start, entry 1 deleted, entry 2 an instance
                // variable whose name is never looked up (its ID is not in the table).
                let mut entries =
                    vec![(7, self.classpath_id, deleted), (u64::MAX, self.classpath_id, deleted)];
                entries.push((3, self.count_id | 0xfff << 40, 1));
                if let Some(path) = path {
                    entries.push((4, self.classpath_id, path));
                }
                if let Some(attached) = attached {
                    entries.push((5, self.attached_id, attached));
                }
                let table = self.ivar_table(&entries, 1);
                let mut classext = vec![0; 16];
                put(&mut classext, iv_tbl, table);
                let classext = self.memory.alloc(classext);
                let mut object = vec![0; 40];
                put(&mut object, 0, flags);
                put(&mut object, ext, classext);
                self.memory.alloc(object)
            }
        }
    }

    /// An `st_table` of `entries` ({hash, key, record}), live from `start`.
    pub fn ivar_table(&mut self, entries: &[(u64, u64, u64)], start: u64) -> u64 {
        let bytes: Vec<u8> = entries
            .iter()
            .flat_map(|&(hash, key, value)| [hash, key, value])
            .flat_map(u64::to_le_bytes)
            .collect();
        let entries_at = self.memory.alloc(bytes);
        let mut table = vec![0; 56];
        table[0] = 3;
        put(&mut table, 16, entries.len() as u64 - start);
        put(&mut table, 32, start);
        put(&mut table, 40, entries.len() as u64);
        put(&mut table, 48, entries_at);
        self.memory.alloc(table)
    }

    /// An ICLASS: `module` as included somewhere.
    pub fn iclass(&mut self, module: u64) -> u64 {
        let mut object = vec![0; 160];
        put(&mut object, 0, T_ICLASS);
        put(&mut object, 8, module);
        self.memory.alloc(object)
    }

    /// An instruction sequence, its `insns_info` and index made as Ruby makes them.
    pub fn iseq(&mut self, sequence: &Sequence<'_>) -> u64 {
        let layout = &self.layout.body;
        let iseq = self.memory.alloc(vec![0; 40]);
        let encoded = self.memory.alloc(vec![0; 8 * sequence.words as usize]);
        let info: Vec<u8> =
            sequence.entries.iter().flat_map(|&(_, line)| [line, 0, 0]).flat_map(i32::to_le_bytes).collect();
        let info = self.memory.alloc(info);
        let positions: Vec<u32> = sequence.entries.iter().map(|&(position, _)| position).collect();
        let index = succinct_index(sequence.words, &positions);
        let index = self.memory.alloc(index.into_iter().flat_map(u64::to_le_bytes).collect());
        let mut path = self.string(sequence.path);
        if sequence.path_in_array {
            let real_path = self.string(&format!("/home/me/{}", sequence.path));
            path = self.array(&[path, real_path], true);
        }
        let mut body = vec![0; 256];
        body[0..4].copy_from_slice(&sequence.kind.to_le_bytes());
        body[4..8].copy_from_slice(&sequence.words.to_le_bytes());
        put(&mut body, 8, encoded);
        put(&mut body, 64, path);
        put(&mut body, 72, self.string(sequence.base_label));
        put(&mut body, 80, self.string(sequence.label));
        match self.minor() {
            1 => put(&mut body, 88, u64::from(sequence.first_line) << 1 | 1),
            _ => body[88..92].copy_from_slice(&sequence.first_line.to_le_bytes()),
        }
        put(&mut body, layout.insns_info, info);
        body[layout.insns_info_size as usize..][..4]
            .copy_from_slice(&(sequence.entries.len() as u32).to_le_bytes());
        put(&mut body, layout.succ_index_table, index);
        put(&mut body, layout.local_iseq, sequence.local_iseq.unwrap_or(iseq));
        let body = self.memory.alloc(body);
        self.memory.write_u64(iseq, T_IMEMO_ISEQ);
        self.memory.write_u64(iseq + 16, body);
        iseq
    }

    /// `iseq`'s body and where its instructions are.
    pub fn body(&self, iseq: u64) -> (u64, u64) {
        let body = self.word(iseq + 16);
        (body, self.word(body + 8))
    }

    /// A method entry of `kind` named `name`.
    pub fn method(&mut self, kind: u8, name: &str, defined_class: u64, owner: u64, iseq: u64) -> u64 {
        let id = self.intern(name, LOCAL);
        let mut definition = vec![0; 48];
        // `alias_count` and more are in the bits above the type.
        definition[0] = kind | 0x50;
        put(&mut definition, 8, iseq);
        put(&mut definition, 32, id);
        let definition = self.memory.alloc(definition);
        let mut entry = vec![0; 40];
        put(&mut entry, 0, T_IMEMO_MENT);
        put(&mut entry, 8, defined_class);
        put(&mut entry, 16, definition);
        put(&mut entry, 24, id);
        put(&mut entry, 32, owner);
        self.memory.alloc(entry)
    }
}

/// `succ_index_table_create`: the index of the entries starting at `positions`, in a sequence
/// of `words` instructions, as words.
fn succinct_index(words: u32, positions: &[u32]) -> Vec<u64> {
    const IMMEDIATE: u32 = 54;
    let immediate_words = if words < IMMEDIATE { words.div_ceil(9) } else { IMMEDIATE / 9 } as usize;
    let blocks = if words < IMMEDIATE { 0 } else { (words - IMMEDIATE).div_ceil(512) } as usize;
    let mut index = vec![0u64; immediate_words + 10 * blocks];
    let mut started = 0;
    for (word, counts) in index[..immediate_words].iter_mut().enumerate() {
        for i in 0..9 {
            if positions.get(started) == Some(&(word as u32 * 9 + i)) {
                started += 1;
            }
            *counts |= (started as u64) << (7 * i);
        }
    }
    for block in 0..blocks {
        let at = 6 + 10 * block;
        index[at] = started as u64;
        let mut small_rank = 0;
        for small in 0..8 {
            if small > 0 {
                index[at + 1] |= small_rank << (9 * (small - 1));
            }
            let mut bits = 0u64;
            for bit in 0..64 {
                let position = (block * 512 + small * 64 + bit) as u32 + IMMEDIATE;
                if positions.get(started) == Some(&position) {
                    bits |= 1 << bit;
                    started += 1;
                }
            }
            index[at + 2 + small] = bits;
            small_rank += u64::from(bits.count_ones());
        }
    }
    index
}

/// The instruction sequences and method entries of `Outer::Worker`: `deep`, a block in `run`,
/// and `start` on its singleton class.
pub struct Worker {
    pub deep: u64,
    pub deep_entry: u64,
    pub run_block: u64,
    pub run_entry: u64,
    pub start: u64,
    pub start_entry: u64,
}

pub fn worker(fake: &mut Fake) -> Worker {
    let class = fake.class(T_CLASS, Some("Outer::Worker"), None);
    let singleton = fake.class(T_CLASS, None, Some(class));
    let deep = fake.iseq(&Sequence::default());
    let deep_entry = fake.method(METHOD_TYPE_ISEQ, "deep", class, class, deep);
    let run = fake.iseq(&Sequence { label: "run", base_label: "run", ..Sequence::default() });
    let block = Sequence {
        kind: BLOCK,
        label: "block in run",
        base_label: "run",
        local_iseq: Some(run),
        ..Sequence::default()
    };
    let run_block = fake.iseq(&block);
    let run_entry = fake.method(METHOD_TYPE_ISEQ, "run", class, class, run);
    let start = fake.iseq(&Sequence { label: "start", base_label: "start", ..Sequence::default() });
    let start_entry = fake.method(METHOD_TYPE_ISEQ, "start", singleton, singleton, start);
    Worker { deep, deep_entry, run_block, run_entry, start, start_entry }
}

impl Fake {
    /// Reads of its memory.
    pub fn reader(&self) -> impl FnMut(u64, &mut [u8]) -> bool + '_ {
        |addr, buffer| self.memory.read(addr, buffer).is_ok()
    }

    /// Its memory in one piece, from [`BASE`], the gaps between its objects zeros.
    pub fn flat_memory(&self) -> Vec<u8> {
        let end = self.memory.pieces.iter().next_back().map_or(BASE, |(&at, bytes)| at + bytes.len() as u64);
        let mut memory = vec![0; (end - BASE) as usize];
        for (&at, bytes) in &self.memory.pieces {
            let at = (at - BASE) as usize;
            memory[at..at + bytes.len()].copy_from_slice(bytes);
        }
        memory
    }
}
