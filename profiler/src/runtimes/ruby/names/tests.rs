//! The readers against target memory made by hand, laid out as docs/ruby-layouts.md has 3.1's
//! and 3.3's objects, and against what a hostile or changing target may leave there.
use anyhow::Result;

use super::{
    Iseq, Method,
    fixture::{self, BASE, BLOCK, Fake, LOCAL, METHOD, Memory, Sequence, T_IMEMO_ISEQ, T_IMEMO_MENT, worker},
    full_label,
    line_table::MAX_ENTRIES,
    objects::{CUT, Heap, MAX_STRING_BYTES},
    read_iseq, read_method,
    symbols::id_name,
};
use crate::runtimes::ruby::layout::{
    EmbeddedLength, FL_SINGLETON, METHOD_TYPE_CFUNC, METHOD_TYPE_ISEQ, T_ARRAY, T_CLASS, T_ICLASS, T_IMEMO,
    T_MODULE, T_STRING, layout,
};

/// What the readers asked of memory.
#[derive(Debug, Default)]
struct Reads {
    count: usize,
    longest: usize,
}

/// Body types besides the fixture's.
const TOP: u32 = 0;
const MAIN: u32 = 7;
/// `VM_METHOD_TYPE_BMETHOD` (`define_method`).
const METHOD_TYPE_BMETHOD: u8 = 4;

impl Fake {
    fn both() -> [Self; 2] {
        [Self::new(1), Self::new(3)]
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

/// The seeds of the `ruby_names` fuzz target (`profiler/fuzz/seeds/ruby_names`): frames of
/// `Outer::Worker` made here in each release (a method, a block in one, a singleton's method,
/// a C method), with its memory in one piece. `PROFILER_WRITE_SEEDS=1` writes them anew.
#[test]
fn the_ruby_names_seeds_are_frames_made_here() {
    let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/ruby_names");
    let write = std::env::var("PROFILER_WRITE_SEEDS").is_ok_and(|value| value == "1");
    for minor in [1, 3] {
        let mut fake = Fake::new(minor);
        let worker = worker(&mut fake);
        let integer = fake.class(T_CLASS, Some("Integer"), None);
        let times = fake.method(METHOD_TYPE_CFUNC, "times", integer, integer, 0);
        let (_, encoded) = fake.body(worker.deep);
        let (_, block_encoded) = fake.body(worker.run_block);
        let memory = fake.flat_memory();
        let frames = [
            ("method", worker.deep, worker.deep_entry, encoded + 8 * 6, "Outer::Worker#deep", Some(14)),
            (
                "block",
                worker.run_block,
                worker.run_entry,
                block_encoded + 8,
                "block in Outer::Worker#run",
                Some(13),
            ),
            ("singleton", worker.start, worker.start_entry, 0, "Outer::Worker.start", None),
            // A C frame's sequence is the one of the frame below.
            ("cfunc", worker.deep, times, encoded, "Integer#times", Some(13)),
        ];
        for (kind, iseq, method_entry, pc, label, line) in frames {
            let input = fixture::Input {
                minor,
                base: BASE,
                symbols: fake.symbols,
                iseq,
                method_entry,
                pc,
                memory: &memory,
            };
            let bytes = input.to_bytes();
            // The seed, read back, names the frame.
            let input = fixture::Input::parse(&bytes).unwrap();
            let mut read = |addr: u64, buffer: &mut [u8]| {
                let start = (addr - BASE) as usize;
                buffer.copy_from_slice(&input.memory[start..start + buffer.len()]);
                true
            };
            let named = fixture::name_frame(&mut read, minor, input.symbols, iseq, method_entry, &[pc]);
            assert_eq!((named.label.as_deref(), named.lines[0]), (Some(label), line), "3.{minor} {kind}");
            let path = seeds.join(format!("3.{minor}-{kind}"));
            if write {
                std::fs::create_dir_all(&seeds).unwrap();
                std::fs::write(&path, &bytes).unwrap();
            }
            let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                committed == bytes,
                "{} is not made here: PROFILER_WRITE_SEEDS=1 writes it",
                path.display()
            );
        }
    }
}
