//! Ruby frames named from any memory, in 3.1's and 3.3's layouts, as the kernel's walk sends
//! them (an instruction sequence, a method entry, a program counter): never a panic, no read
//! larger, no more reads and no more bytes read than the readers' caps allow, names and labels
//! no longer than theirs; and frames of objects made to order of the input's names and lines
//! are named and placed as Ruby names and places them.

use profiler::stages::ruby::fixture::{
    self, BLOCK, C_METHOD, CLASS, Fake, ISEQ_METHOD, Input, MAX_BYTES_READ, MAX_LABEL_CHARS, MAX_NAME_CHARS,
    MAX_READ_BYTES, MAX_READS, METHOD, MODULE, Sequence,
};

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    if let Some(input) = Input::parse(data) {
        any_memory(&input);
    }
    made_to_order(data);
}

/// The frame the input's header names, in the memory that follows it.
fn any_memory(input: &Input<'_>) {
    let (mut reads, mut bytes) = (0, 0);
    let mut read = |addr: u64, buffer: &mut [u8]| {
        assert!(buffer.len() <= MAX_READ_BYTES, "a read of {} bytes", buffer.len());
        reads += 1;
        bytes += buffer.len();
        let start = addr.checked_sub(input.base).and_then(|start| usize::try_from(start).ok());
        let piece = start.and_then(|start| input.memory.get(start..start.checked_add(buffer.len())?));
        piece.map(|piece| buffer.copy_from_slice(piece)).is_some()
    };
    // The input's pc, and the first instructions past the base (where a sequence's are).
    let pcs = [input.pc, input.base, input.base.wrapping_add(8), input.base.wrapping_add(0x100)];
    let named =
        fixture::name_frame(&mut read, input.minor, input.symbols, input.iseq, input.method_entry, &pcs);
    assert!(reads <= MAX_READS, "{reads} reads");
    assert!(bytes <= MAX_BYTES_READ, "{bytes} bytes read");
    for name in &named.names {
        assert!(name.chars().count() <= MAX_NAME_CHARS, "a name of {} characters", name.chars().count());
    }
    if let Some(label) = &named.label {
        assert!(label.chars().count() <= MAX_LABEL_CHARS, "a label of {} characters", label.chars().count());
    }
    assert!(named.lines.is_empty() || named.lines.len() == pcs.len());
}

/// Bytes taken from the front of an input.
struct Taker<'a>(&'a [u8]);

impl Taker<'_> {
    fn byte(&mut self) -> u8 {
        let (&first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        first
    }

    /// A name of up to 255 bytes of the input, made UTF-8.
    fn name(&mut self) -> String {
        let len = usize::from(self.byte()).min(self.0.len());
        let (name, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8_lossy(name).into_owned()
    }
}

/// `Outer::Worker#deep` made of the input's class path, method name and lines: its method, a
/// block in it and a C method of the same name are named as Ruby names them, and each
/// instruction of the method is on the line of the last entry starting at or before it.
fn made_to_order(data: &[u8]) {
    let mut taker = Taker(data);
    let flags = taker.byte();
    let minor = if flags & 1 == 0 { 1 } else { 3 };
    let (module, singleton) = (flags & 2 != 0, flags & 4 != 0);
    let (path, name, file) = (taker.name(), taker.name(), taker.name());
    // Entries at increasing positions from 0, one per byte pair: a gap and a line.
    let mut entries: Vec<(u32, i32)> = Vec::new();
    let mut position = 0;
    for _ in 0..usize::from(taker.byte()) {
        let (gap, line) = (taker.byte(), taker.byte());
        entries.push((position, i32::from(line) - 8));
        position += 1 + u32::from(gap % 64);
    }
    let words = position.max(1) + u32::from(taker.byte());
    let first_line = u32::from(taker.byte());

    let mut fake = Fake::new(minor);
    let class = fake.class(if module { MODULE } else { CLASS }, Some(&path), None);
    let owner = if singleton { fake.class(CLASS, None, Some(class)) } else { class };
    // A module's instance methods are entered under the class that includes it.
    let defined = if module && !singleton { fake.iclass(class) } else { owner };
    let sequence = Sequence {
        kind: METHOD,
        label: &name,
        base_label: &name,
        path: &file,
        words,
        entries: &entries,
        first_line,
        ..Sequence::default()
    };
    let method = fake.iseq(&sequence);
    let block_label = format!("block in {name}");
    let block = fake.iseq(&Sequence {
        kind: BLOCK,
        label: &block_label,
        base_label: &name,
        local_iseq: Some(method),
        ..Sequence::default()
    });
    let entry = fake.method(ISEQ_METHOD, &name, defined, owner, method);
    let c_entry = fake.method(C_METHOD, &name, defined, owner, 0);
    let (_, encoded) = fake.body(method);

    let qualified = format!("{path}{}{name}", if singleton { '.' } else { '#' });
    let symbols = fake.symbols;
    let mut read = fake.reader();
    let pcs: Vec<u64> = (0..=u64::from(words)).map(|position| encoded + 8 * position).collect();
    let mut name_frame =
        |iseq, entry, pcs: &[u64]| fixture::name_frame(&mut read, minor, symbols, iseq, entry, pcs);
    let named = name_frame(method, entry, &pcs);
    assert_eq!(named.label.as_deref(), Some(qualified.as_str()));
    assert_eq!(named.names[2], file);
    // The VM keeps `pc` past the instruction it runs.
    let line = |position: u32| {
        let entry = entries.iter().rev().find(|&&(start, _)| start <= position)?;
        u32::try_from(entry.1).ok().filter(|&line| line > 0)
    };
    for (i, found) in named.lines.iter().enumerate() {
        let position = (i as u32).saturating_sub(1);
        assert_eq!(*found, line(position), "position {position} of {words}, entries {entries:?}");
    }
    let named = name_frame(block, entry, &[]);
    assert_eq!(named.label, Some(format!("block in {qualified}")));
    assert_eq!(name_frame(0, c_entry, &[]).label, Some(qualified.clone()));
    assert_eq!(name_frame(block, c_entry, &[]).label, Some(qualified));
    assert_eq!(name_frame(method, 0, &[]).label, Some(name));
}
