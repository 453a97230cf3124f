//! The readers against target memory made by hand, laid out as docs/ruby-layouts.md has 3.1's
//! and 3.3's objects, and against what a hostile or changing target may leave there.
use std::collections::BTreeMap;

use anyhow::{Result, anyhow};

use super::{
    Iseq, Method, full_label,
    line_table::MAX_ENTRIES,
    objects::{CUT, Heap, MAX_STRING_BYTES},
    read_iseq, read_method,
    symbols::id_name,
};
use crate::runtimes::ruby::layout::{
    ClassLayout, EmbeddedLength, FL_SINGLETON, IMEMO_ISEQ, IMEMO_MENT, Layout, METHOD_TYPE_CFUNC,
    METHOD_TYPE_ISEQ, STRING_NOEMBED, T_ARRAY, T_CLASS, T_ICLASS, T_IMEMO, T_MODULE, T_STRING, layout,
};

/// Where the pieces of memory start; each is followed by a gap, so a read past its end fails.
const BASE: u64 = 0x7f00_0000_0000;

/// Target memory: pieces at addresses.
#[derive(Default)]
struct Memory {
    pieces: BTreeMap<u64, Vec<u8>>,
    next: u64,
}

impl Memory {
    fn alloc(&mut self, bytes: Vec<u8>) -> u64 {
        let addr = self.next.max(BASE);
        self.next = (addr + bytes.len() as u64 + 64 + 63) & !63;
        self.pieces.insert(addr, bytes);
        addr
    }

    fn read(&self, addr: u64, buffer: &mut [u8]) -> Result<()> {
        let unmapped = || anyhow!("{} bytes at {addr:#x} are not mapped", buffer.len());
        let (start, bytes) = self.pieces.range(..=addr).next_back().ok_or_else(unmapped)?;
        let from = usize::try_from(addr - start).map_err(|_| unmapped())?;
        let piece = from.checked_add(buffer.len()).and_then(|to| bytes.get(from..to)).ok_or_else(unmapped)?;
        buffer.copy_from_slice(piece);
        Ok(())
    }

    fn write(&mut self, addr: u64, value: &[u8]) {
        let (start, bytes) = self.pieces.range_mut(..=addr).next_back().expect("a piece");
        let from = (addr - start) as usize;
        bytes[from..from + value.len()].copy_from_slice(value);
    }

    fn write_u64(&mut self, addr: u64, value: u64) {
        self.write(addr, &value.to_le_bytes());
    }
}

/// What the readers asked of memory.
#[derive(Debug, Default)]
struct Reads {
    count: usize,
    longest: usize,
}

/// Little-endian words at offsets of an object being built.
fn put(bytes: &mut [u8], offset: u64, value: u64) {
    bytes[offset as usize..offset as usize + 8].copy_from_slice(&value.to_le_bytes());
}

const T_IMEMO_ISEQ: u64 = T_IMEMO | IMEMO_ISEQ << 12;
const T_IMEMO_MENT: u64 = T_IMEMO | IMEMO_MENT << 12;
/// Body types.
const TOP: u32 = 0;
const METHOD: u32 = 1;
const BLOCK: u32 = 2;
const MAIN: u32 = 7;
/// ID scopes (with `ID_STATIC_SYM`).
const LOCAL: u64 = 0x01;
const INSTANCE: u64 = 0x03;
/// `VM_METHOD_TYPE_BMETHOD` (`define_method`).
const METHOD_TYPE_BMETHOD: u8 = 4;

/// A Ruby process's objects, made by hand for one release.
struct Fake {
    memory: Memory,
    layout: &'static Layout,
    /// `ruby_global_symbols`, its `ids`, their elements, and its chunks.
    symbols: u64,
    ids: u64,
    ids_elements: u64,
    chunks: Vec<u64>,
    last_id: u64,
    /// 3.1's hidden instance variables' IDs, and an ordinary one's.
    classpath_id: u64,
    attached_id: u64,
    count_id: u64,
}

/// An instruction sequence to make.
struct Sequence<'a> {
    kind: u32,
    label: &'a str,
    base_label: &'a str,
    /// `pathobj`: a String, or an Array of it and a real path.
    path: &'a str,
    path_in_array: bool,
    first_line: u32,
    words: u32,
    /// (position, line) of each `insns_info` entry.
    entries: &'a [(u32, i32)],
    /// `None`: itself.
    local_iseq: Option<u64>,
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
    fn new(minor: u32) -> Self {
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

    fn both() -> [Self; 2] {
        [Self::new(1), Self::new(3)]
    }

    fn minor(&self) -> u32 {
        if self.layout.control_frame_bytes == 64 { 1 } else { 3 }
    }

    /// A String, embedded when it fits its release's embedded strings.
    fn string(&mut self, text: &str) -> u64 {
        self.string_of(text.as_bytes(), text.len() as u64 <= self.layout.string.max_embedded)
    }

    fn string_of(&mut self, bytes: &[u8], embedded: bool) -> u64 {
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
    fn array(&mut self, elements: &[u64], embedded: bool) -> u64 {
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
    fn intern(&mut self, name: &str, scope: u64) -> u64 {
        self.last_id += 1;
        self.intern_at(self.last_id, name);
        self.last_id << 4 | scope
    }

    /// Puts `name` at `serial` of the table, making its chunk when it is the first.
    fn intern_at(&mut self, serial: u64, name: &str) {
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

    fn word(&self, addr: u64) -> u64 {
        let mut bytes = [0; 8];
        self.memory.read(addr, &mut bytes).unwrap();
        u64::from_le_bytes(bytes)
    }

    /// A class (or module: `tag`) with a path, or a singleton class attached to `attached`.
    fn class(&mut self, tag: u64, path: Option<&str>, attached: Option<u64>) -> u64 {
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
    fn ivar_table(&mut self, entries: &[(u64, u64, u64)], start: u64) -> u64 {
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
    fn iclass(&mut self, module: u64) -> u64 {
        let mut object = vec![0; 160];
        put(&mut object, 0, T_ICLASS);
        put(&mut object, 8, module);
        self.memory.alloc(object)
    }

    /// An instruction sequence, its `insns_info` and index made as Ruby makes them.
    fn iseq(&mut self, sequence: &Sequence<'_>) -> u64 {
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
    fn body(&self, iseq: u64) -> (u64, u64) {
        let body = self.word(iseq + 16);
        (body, self.word(body + 8))
    }

    /// A method entry of `kind` named `name`.
    fn method(&mut self, kind: u8, name: &str, defined_class: u64, owner: u64, iseq: u64) -> u64 {
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

    /// Runs `reading` with a reader of this memory, and says what it read.
    fn reading<T>(
        &self,
        reading: impl FnOnce(&mut dyn FnMut(u64, &mut [u8]) -> Result<()>) -> T,
    ) -> (T, Reads) {
        let mut reads = Reads::default();
        let mut read = |addr: u64, buffer: &mut [u8]| {
            reads.count += 1;
            reads.longest = reads.longest.max(buffer.len());
            self.memory.read(addr, buffer)
        };
        let result = reading(&mut read);
        (result, reads)
    }

    fn read_iseq(&self, iseq: u64) -> Result<Iseq> {
        self.reading(|read| read_iseq(read, self.layout, iseq)).0
    }

    fn read_method(&self, entry: u64) -> Result<Method> {
        self.reading(|read| read_method(read, self.layout, self.symbols, entry)).0
    }

    fn string_at(&self, value: u64) -> Result<String> {
        self.reading(|read| Heap::new(read, self.layout).string(value)).0
    }

    fn id_name(&self, id: u64) -> Result<String> {
        self.reading(|read| id_name(&mut Heap::new(read, self.layout), self.symbols, id)).0
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

#[test]
fn layouts_of_the_releases_read() {
    assert_eq!(layout(3, 1).map(|layout| layout.control_frame_bytes), Some(64));
    assert_eq!(layout(3, 3).map(|layout| layout.control_frame_bytes), Some(56));
    for (major, minor) in [(3, 0), (3, 2), (3, 4), (2, 7), (4, 1)] {
        assert!(layout(major, minor).is_none(), "{major}.{minor}");
    }
}

#[test]
fn strings_embedded_and_on_the_heap() {
    for mut fake in Fake::both() {
        let minor = fake.minor();
        let label = "a_method_whose_name_is_long_enough_to_need_52_bytes_";
        assert_eq!(label.len(), 52);
        let long = "x".repeat(701);
        let cases = [
            ("deep", true),
            ("日本語", true),
            ("", true),
            ("deep", false),
            (label, minor == 3),
            (label, false),
            (long.as_str(), false),
        ];
        for (text, embedded) in cases {
            let string = fake.string_of(text.as_bytes(), embedded);
            let (read, reads) = fake.reading(|read| Heap::new(read, fake.layout).string(string));
            assert_eq!(read.unwrap(), text, "3.{minor}");
            // Short embedded strings come with their header.
            let inline = embedded && fake.layout.string.embedded_data as usize + text.len() <= 40;
            assert_eq!(reads.count, if inline { 1 } else { 2 }, "3.{minor}: {text}");
        }
        let invalid = fake.string_of(b"ab\xffc", true);
        assert_eq!(fake.string_at(invalid).unwrap(), "ab\u{fffd}c");
    }
}

#[test]
fn a_path_in_an_array_is_its_first_element() {
    for mut fake in Fake::both() {
        let iseq = fake.iseq(&Sequence { path_in_array: true, ..Sequence::default() });
        let read = fake.read_iseq(iseq).unwrap();
        assert_eq!((read.path.as_str(), read.label.as_str()), ("t.rb", "deep"));
        // An array on the heap too.
        let (path, real_path) = (fake.string("lib/a.rb"), fake.string("/src/lib/a.rb"));
        let array = fake.array(&[path, real_path], false);
        let (body, _) = fake.body(iseq);
        fake.memory.write_u64(body + 64, array);
        assert_eq!(fake.read_iseq(iseq).unwrap().path, "lib/a.rb");
    }
}

#[test]
fn ids_are_named_through_the_table() {
    for mut fake in Fake::both() {
        let names: Vec<(u64, String)> = (0..600)
            .map(|n| {
                let name = format!("method_{n}");
                (fake.intern(&name, LOCAL), name)
            })
            .collect();
        // Across a chunk's end.
        assert!(fake.chunks.len() >= 2);
        for (id, name) in &names {
            assert_eq!(&fake.id_name(*id).unwrap(), name);
        }
        // Operators' IDs are their own serials.
        fake.intern_at(42, "+");
        assert_eq!(fake.id_name(42).unwrap(), "+");
        let last = fake.last_id;
        for id in [0, (last + 1) << 4, u64::MAX] {
            assert!(fake.id_name(id).is_err(), "{id:#x}");
        }
        // Serials between interned ones name nothing (a 0 in the chunk).
        assert!(fake.id_name(7).is_err());
    }
}

/// The line of each position of a sequence of `words` instructions with `entries`, as Ruby
/// places them: the last entry starting at or before the position.
fn expected_line(entries: &[(u32, i32)], position: u32) -> Option<u32> {
    let entry = entries.iter().rev().find(|&&(start, _)| start <= position)?;
    u32::try_from(entry.1).ok()
}

#[test]
fn lines_below_and_above_54_positions() {
    // Entries at irregular positions over four blocks of 512, the second of them empty.
    let mut entries: Vec<(u32, i32)> = Vec::new();
    let mut position = 0;
    while position < 1700 {
        entries.push((position, 10 + entries.len() as i32));
        position += [1, 3, 2, 7, 4, 1, 70, 5][entries.len() % 8];
        if (566..1078).contains(&position) {
            position = 1100;
        }
    }
    for words in [1700, 20, 54, 55] {
        let entries: Vec<_> = entries.iter().copied().filter(|&(start, _)| start < words).collect();
        for mut fake in Fake::both() {
            let sequence = Sequence { words, entries: &entries, first_line: 9, ..Sequence::default() };
            let iseq = fake.iseq(&sequence);
            let (_, encoded) = fake.body(iseq);
            let read = fake.read_iseq(iseq).unwrap();
            // The VM keeps `pc` past the instruction it runs.
            assert_eq!(read.line(encoded), expected_line(&entries, 0));
            for position in 0..words {
                let pc = encoded + 8 * (u64::from(position) + 1);
                assert_eq!(
                    read.line(pc),
                    expected_line(&entries, position),
                    "{words} words, position {position}"
                );
            }
            assert_eq!(read.line(encoded + 8 * (u64::from(words) + 1)), None);
            assert_eq!(read.first_line, 9);
        }
    }
}

#[test]
fn sequences_of_one_entry_and_of_none() {
    for mut fake in Fake::both() {
        let one = fake.iseq(&Sequence { entries: &[(0, 30)], ..Sequence::default() });
        let none = fake.iseq(&Sequence { entries: &[], ..Sequence::default() });
        let (_, encoded) = fake.body(one);
        assert_eq!(fake.read_iseq(one).unwrap().line(encoded + 80), Some(30));
        let (_, encoded) = fake.body(none);
        assert_eq!(fake.read_iseq(none).unwrap().line(encoded + 80), None);
    }
}

/// The instruction sequences and method entries of `Outer::Worker`: `deep`, a block in `run`,
/// and `start` on its singleton class.
struct Worker {
    deep: u64,
    deep_entry: u64,
    run_block: u64,
    run_entry: u64,
    start: u64,
    start_entry: u64,
}

fn worker(fake: &mut Fake) -> Worker {
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

/// The full label of a frame running `iseq` (0: a C frame) with the method entry `entry`.
fn label_of(fake: &Fake, iseq: u64, entry: Option<u64>) -> String {
    let iseq = (iseq != 0).then(|| fake.read_iseq(iseq).unwrap());
    let method = entry.map(|entry| fake.read_method(entry).unwrap());
    full_label(iseq.as_ref(), method.as_ref())
}

#[test]
fn methods_singletons_and_blocks_are_qualified() {
    for mut fake in Fake::both() {
        let worker = worker(&mut fake);
        assert_eq!(label_of(&fake, worker.deep, Some(worker.deep_entry)), "Outer::Worker#deep");
        assert_eq!(label_of(&fake, worker.start, Some(worker.start_entry)), "Outer::Worker.start");
        assert_eq!(label_of(&fake, worker.run_block, Some(worker.run_entry)), "block in Outer::Worker#run");
        let method = fake.read_method(worker.start_entry).unwrap();
        assert_eq!(
            (method.owner.as_deref(), method.singleton, method.is_cfunc),
            (Some("Outer::Worker"), true, false)
        );
        // Without its entry, a frame keeps its own label.
        assert_eq!(label_of(&fake, worker.run_block, None), "block in run");
    }
}

#[test]
fn the_main_script_is_main() {
    for mut fake in Fake::both() {
        let main =
            fake.iseq(&Sequence { kind: MAIN, label: "<main>", base_label: "<main>", ..Sequence::default() });
        assert_eq!(label_of(&fake, main, None), "<main>");
        let top = Sequence {
            kind: BLOCK,
            label: "block in <main>",
            base_label: "<main>",
            local_iseq: Some(main),
            ..Sequence::default()
        };
        let block = fake.iseq(&top);
        assert_eq!(label_of(&fake, block, None), "block in <main>");
        let required = fake.iseq(&Sequence {
            kind: TOP,
            label: "<top (required)>",
            base_label: "<top (required)>",
            ..Sequence::default()
        });
        assert_eq!(label_of(&fake, required, None), "<top (required)>");
    }
}

#[test]
fn c_methods_are_named_after_their_owner() {
    for mut fake in Fake::both() {
        let integer = fake.class(T_CLASS, Some("Integer"), None);
        let other = fake.class(T_CLASS, Some("Comparable"), None);
        let times = fake.method(METHOD_TYPE_CFUNC, "times", other, integer, 0);
        let method = fake.read_method(times).unwrap();
        assert!(method.is_cfunc);
        assert_eq!(full_label(None, Some(&method)), "Integer#times");
        // A C frame's `iseq` is whatever the frame below left: the method names it.
        let deep = fake.iseq(&Sequence::default());
        assert_eq!(label_of(&fake, deep, Some(times)), "Integer#times");
        // A module's through its owner, a singleton's with a dot.
        let kernel = fake.class(T_MODULE, Some("Kernel"), None);
        let included = fake.iclass(kernel);
        let sleep = fake.method(METHOD_TYPE_CFUNC, "sleep", included, kernel, 0);
        assert_eq!(label_of(&fake, 0, Some(sleep)), "Kernel#sleep");
        let process = fake.class(T_MODULE, Some("Process"), None);
        let singleton = fake.class(T_CLASS, None, Some(process));
        let clock = fake.method(METHOD_TYPE_CFUNC, "clock_gettime", singleton, singleton, 0);
        assert_eq!(label_of(&fake, 0, Some(clock)), "Process.clock_gettime");
    }
}

#[test]
fn a_modules_method_is_named_after_the_module() {
    for mut fake in Fake::both() {
        let helpers = fake.class(T_MODULE, Some("Outer::Helpers"), None);
        let included = fake.iclass(helpers);
        let assist = fake.iseq(&Sequence { label: "assist", base_label: "assist", ..Sequence::default() });
        let entry = fake.method(METHOD_TYPE_ISEQ, "assist", included, helpers, assist);
        assert_eq!(label_of(&fake, assist, Some(entry)), "Outer::Helpers#assist");
    }
}

#[test]
fn a_block_of_define_method_keeps_its_label() {
    for mut fake in Fake::both() {
        let class = fake.class(T_CLASS, Some("Foo"), None);
        let body = fake.iseq(&Sequence {
            kind: 3,
            label: "<class:Foo>",
            base_label: "<class:Foo>",
            ..Sequence::default()
        });
        let block = Sequence {
            kind: BLOCK,
            label: "block in <class:Foo>",
            base_label: "<class:Foo>",
            local_iseq: Some(body),
            ..Sequence::default()
        };
        let block = fake.iseq(&block);
        let entry = fake.method(METHOD_TYPE_BMETHOD, "made", class, class, block);
        assert_eq!(label_of(&fake, block, Some(entry)), "block in <class:Foo>");
    }
}

#[test]
fn a_class_without_a_path_leaves_the_plain_label() {
    for mut fake in Fake::both() {
        let anonymous = fake.class(T_CLASS, None, None);
        let deep = fake.iseq(&Sequence::default());
        let entry = fake.method(METHOD_TYPE_ISEQ, "deep", anonymous, anonymous, deep);
        let method = fake.read_method(entry).unwrap();
        assert_eq!((method.owner.as_deref(), method.name.as_str()), (None, "deep"));
        assert_eq!(label_of(&fake, deep, Some(entry)), "deep");
        // A singleton class of an object that is no class or module.
        let object = fake.string("an object");
        let singleton = fake.class(T_CLASS, None, Some(object));
        let entry = fake.method(METHOD_TYPE_CFUNC, "greet", singleton, singleton, 0);
        assert_eq!(label_of(&fake, 0, Some(entry)), "greet");
        // A class entry that is no class.
        let entry = fake.method(METHOD_TYPE_CFUNC, "puts", 0, object, 0);
        assert_eq!(label_of(&fake, 0, Some(entry)), "puts");
    }
}

#[test]
fn huge_string_lengths_read_no_further_than_the_bound() {
    for mut fake in Fake::both() {
        let string = fake.string_of(&[b'a'; 5000], false);
        fake.memory.write_u64(string + 16, 1 << 40);
        let (read, reads) = fake.reading(|read| Heap::new(read, fake.layout).string(string));
        let read = read.unwrap();
        assert_eq!(read.len(), MAX_STRING_BYTES as usize + CUT.len_utf8());
        assert!(read.ends_with(CUT));
        assert_eq!(reads.longest, MAX_STRING_BYTES as usize);
        // Past the data: a failed read, not a huge one.
        fake.memory.write_u64(string + 24, BASE - 8);
        assert!(fake.string_at(string).is_err());
        // A negative length.
        fake.memory.write_u64(string + 16, u64::MAX);
        assert!(fake.string_at(string).is_err());
        // Embedded strings longer than their slots can hold.
        let embedded = fake.string_of(b"deep", true);
        match fake.layout.string.embedded_length {
            EmbeddedLength::InFlags => fake.memory.write_u64(embedded, T_STRING | 31 << 14),
            EmbeddedLength::Field => fake.memory.write_u64(embedded + 16, 1 << 40),
        }
        assert!(fake.string_at(embedded).is_err(), "3.{}", fake.minor());
    }
}

#[test]
fn hostile_id_tables_fail_quickly() {
    for mut fake in Fake::both() {
        let id = fake.intern("name", LOCAL);
        let ids = fake.ids;
        // A chunk that is the table itself: its element is an Array, not a String.
        fake.memory.write_u64(fake.ids_elements, ids);
        let (named, reads) =
            fake.reading(|read| id_name(&mut Heap::new(read, fake.layout), fake.symbols, id));
        assert!(named.is_err());
        assert!(reads.count < 10, "{reads:?}");
        // A table of 2^40 chunks, whose chunks are past memory; a chunk that says it has 2^62
        // elements (one is read).
        fake.memory.write(fake.symbols, &u32::MAX.to_le_bytes());
        fake.memory.write_u64(ids + 16, 1 << 40);
        assert!(fake.id_name(0xffff_fff0).is_err());
        fake.memory.write_u64(fake.ids_elements, fake.chunks[0]);
        fake.memory.write_u64(fake.chunks[0] + 16, 1 << 62);
        assert!(fake.id_name(511 << 4).is_err());
        // An ID table whose `ids` is no object.
        fake.memory.write_u64(fake.symbols + 16, 0x14);
        assert!(fake.id_name(id).is_err());
    }
}

#[test]
fn huge_line_tables_put_every_instruction_on_the_first_line() {
    for mut fake in Fake::both() {
        let iseq = fake.iseq(&Sequence::default());
        let (body, encoded) = fake.body(iseq);
        let size_at = body + fake.layout.body.insns_info_size;
        fake.memory.write(size_at, &(1u32 << 31).to_le_bytes());
        let (read, reads) = fake.reading(|read| read_iseq(read, fake.layout, iseq));
        let read = read.unwrap();
        assert!(reads.longest <= 256, "{reads:?}");
        assert_eq!((read.line(encoded + 8), read.line(encoded + 80)), (Some(12), Some(12)));
        fake.memory.write(size_at, &(MAX_ENTRIES + 1).to_le_bytes());
        assert_eq!(fake.read_iseq(iseq).unwrap().line(encoded + 16), Some(12));
        // Instructions too many to index, and an index past memory.
        fake.memory.write(size_at, &3u32.to_le_bytes());
        fake.memory.write(body + 4, &u32::MAX.to_le_bytes());
        assert_eq!(fake.read_iseq(iseq).unwrap().line(encoded + 16), Some(12));
        fake.memory.write(body + 4, &100_000u32.to_le_bytes());
        assert!(fake.read_iseq(iseq).is_err());
    }
}

#[test]
fn program_counters_outside_the_sequence_have_no_line() {
    for mut fake in Fake::both() {
        let iseq = fake.iseq(&Sequence::default());
        let (_, encoded) = fake.body(iseq);
        let read = fake.read_iseq(iseq).unwrap();
        for pc in [0, encoded - 8, encoded - 1, encoded + 8 * 21, u64::MAX] {
            assert_eq!(read.line(pc), None, "{pc:#x}");
        }
        // An index that says no entry starts before a position.
        let index = fake.word(fake.word(iseq + 16) + fake.layout.body.succ_index_table);
        fake.memory.write_u64(index, 0);
        assert_eq!(fake.read_iseq(iseq).unwrap().line(encoded + 8), None);
    }
}

#[test]
fn objects_of_the_wrong_type_are_refused() {
    for mut fake in Fake::both() {
        let worker = worker(&mut fake);
        let string = fake.string("deep");
        // An iseq where a method entry should be, and the other way round.
        assert!(fake.read_method(worker.deep).is_err());
        assert!(fake.read_iseq(worker.deep_entry).is_err());
        assert!(fake.read_iseq(string).is_err());
        for value in [0, 0x08, 0x14, 0x7f00_0000_0001, BASE - 64, u64::MAX - 7] {
            assert!(fake.read_iseq(value).is_err(), "{value:#x}");
            assert!(fake.read_method(value).is_err(), "{value:#x}");
        }
        let (body, _) = fake.body(worker.deep);
        // A body of no type, a label that is an Array, a path that is neither.
        fake.memory.write(body, &99u32.to_le_bytes());
        assert!(fake.read_iseq(worker.deep).is_err());
        fake.memory.write(body, &METHOD.to_le_bytes());
        let array = fake.array(&[string], true);
        fake.memory.write_u64(body + 80, array);
        assert!(fake.read_iseq(worker.deep).is_err());
        fake.memory.write_u64(body + 80, string);
        fake.memory.write_u64(body + 64, worker.deep);
        assert!(fake.read_iseq(worker.deep).is_err());
        fake.memory.write_u64(body + 64, string);
        assert!(fake.read_iseq(worker.deep).is_ok());
        if fake.minor() == 1 {
            fake.memory.write_u64(body + 88, 24);
            assert!(fake.read_iseq(worker.deep).is_err(), "a first line that is no Fixnum");
        }
        // A definition whose name is no ID.
        let definition = fake.word(worker.deep_entry + 16);
        fake.memory.write_u64(definition + 32, u64::MAX);
        assert!(fake.read_method(worker.deep_entry).is_err());
    }
}

#[test]
fn hostile_instance_variable_tables_leave_the_class_out() {
    let mut fake = Fake::new(1);
    let class = fake.class(T_CLASS, Some("Outer::Worker"), None);
    let entry = fake.method(METHOD_TYPE_CFUNC, "work", class, class, 0);
    assert_eq!(fake.read_method(entry).unwrap().owner.as_deref(), Some("Outer::Worker"));
    let table = fake.word(fake.word(class + 24) + 8);
    // Bounds past the allocated entries; then allocated but past memory.
    fake.memory.write_u64(table + 40, 1 << 40);
    assert_eq!(fake.read_method(entry).unwrap().owner, None);
    fake.memory.write(table, &[63]);
    let (method, reads) = fake.reading(|read| read_method(read, fake.layout, fake.symbols, entry));
    assert_eq!(method.unwrap().owner, None);
    assert!(reads.longest <= 1024 * 24, "{reads:?}");
    // 1024 live entries of local names that are not the path's: looked through, not past.
    let other = fake.intern("__other__", LOCAL);
    let entries: Vec<_> = (0..2000).map(|n| (n, other, 0)).collect();
    let table = fake.ivar_table(&entries, 0);
    fake.memory.write(table, &[11]);
    fake.memory.write_u64(fake.word(class + 24) + 8, table);
    let (method, reads) = fake.reading(|read| read_method(read, fake.layout, fake.symbols, entry));
    assert_eq!(method.unwrap().owner, None);
    assert!(reads.count < 1024 * 8, "{reads:?}");
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
    for minor in [1, 3] {
        let layout = layout(3, minor).unwrap();
        for seed in 0..300u64 {
            let mut memory = Memory::default();
            let start = memory.alloc(garbage(seed, 0x4000));
            let tags = [T_IMEMO_ISEQ, T_IMEMO_MENT, T_STRING, T_ARRAY, T_CLASS | FL_SINGLETON, T_ICLASS];
            // Let the type checks pass now and then, and pointers land inside.
            for slot in 0..0x4000 / 64 {
                let at = start + slot * 64;
                let word = u64::from_le_bytes(garbage(seed ^ slot, 8).try_into().unwrap());
                let tag = tags[(word >> 8) as usize % tags.len()];
                // An imemo's type is in bits 12 to 15; a string's and an array's lengths above.
                let high = if tag & 0x1f == T_IMEMO { word & 0x7fff_0000 } else { word & 0x7fff_e000 };
                match word % 7 {
                    0 | 3 => memory.write_u64(at, tag | high),
                    // A body: a type and a size in range.
                    1 => memory.write_u64(at, ((word >> 40) % 9) | (((word >> 48) % 2000) << 32)),
                    _ => {}
                }
                if word % 5 == 0 {
                    memory.write_u64(at + 8 * (word >> 20 & 3) + 8, start + (word >> 24) % 0x4000 / 8 * 8);
                }
            }
            let mut read = |addr: u64, buffer: &mut [u8]| memory.read(addr, buffer);
            for slot in 0..0x4000 / 64 {
                let at = start + slot * 64;
                if let Ok(iseq) = read_iseq(&mut read, layout, at) {
                    for pc in [0, at, u64::MAX, at + 0x1000] {
                        let _ = iseq.line(pc);
                    }
                    let _ = full_label(Some(&iseq), None);
                }
                let _ = read_method(&mut read, layout, start + 64 * (seed % 8), at);
            }
        }
    }
}

/// Objects made right, then words of them overwritten with what a freed or moved object may
/// leave: each read ends, with a name or an error, within its bounds.
#[test]
fn corrupted_objects_never_panic() {
    for minor in [1, 3] {
        let (mut named, mut refused) = (0, 0);
        for seed in 0..400u64 {
            let mut fake = Fake::new(minor);
            let worker = worker(&mut fake);
            let (_, encoded) = fake.body(worker.deep);
            let pieces: Vec<(u64, usize)> =
                fake.memory.pieces.iter().map(|(&addr, bytes)| (addr, bytes.len())).collect();
            let noise = garbage(seed, 64);
            for change in 0..4 {
                let (addr, len) = pieces[usize::from(noise[change]) % pieces.len()];
                let offset = (u64::from(noise[change + 4]) * 8) % (len as u64 & !7).max(8);
                let (other, _) = pieces[usize::from(noise[change + 12]) % pieces.len()];
                let value = match noise[change + 8] % 6 {
                    0 => 0,
                    1 => u64::MAX,
                    2 => 1 << 40,
                    3 => other,
                    4 => u64::from(noise[change + 16] % 64),
                    _ => u64::from_le_bytes(noise[24..32].try_into().unwrap()),
                };
                if len >= 8 {
                    fake.memory.write_u64(addr + offset, value);
                }
            }
            for iseq in [worker.deep, worker.run_block, worker.start] {
                let (read, reads) = fake.reading(|read| read_iseq(read, fake.layout, iseq));
                assert!(reads.count < 64 && reads.longest <= 1 << 20, "{reads:?}");
                let Ok(iseq) = read else {
                    refused += 1;
                    continue;
                };
                named += 1;
                for pc in [0, encoded, encoded + 80, u64::MAX] {
                    let _ = iseq.line(pc);
                }
            }
            for entry in [worker.deep_entry, worker.run_entry, worker.start_entry] {
                let (read, reads) = fake.reading(|read| read_method(read, fake.layout, fake.symbols, entry));
                assert!(reads.count < 1024 * 8 && reads.longest <= 1024 * 24, "{reads:?}");
                match read {
                    Ok(method) => {
                        named += 1;
                        let _ = full_label(None, Some(&method));
                    }
                    Err(_) => refused += 1,
                }
            }
        }
        // Both ways were taken.
        assert!(named > 1000 && refused > 100, "3.{minor}: {named} named, {refused} refused");
    }
}
