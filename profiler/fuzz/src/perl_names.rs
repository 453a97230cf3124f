//! Perl frames named from any memory, as the kernel's walk sends them (a sub's code, a
//! statement, a `require`'s string): never a panic, no read larger, no more reads and no more
//! bytes read than the readers' caps allow, names and paths no longer than theirs; and subs and
//! statements made to order of the input's names are named as Perl names them.
use profiler::stages::perl::fixture::{
    Fake, Input, MAX_BYTES_READ, MAX_NAME_CHARS, MAX_PATH_CHARS, MAX_READ_BYTES, MAX_READS, name_frame,
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
    let named = name_frame(&mut read, input.cv, input.cop, input.sv);
    assert!(reads <= MAX_READS, "{reads} reads");
    assert!(bytes <= MAX_BYTES_READ, "{bytes} bytes read");
    // A sub's name is its package's and its own, each within the bound.
    let sub_chars = named.sub.as_ref().map_or(0, |name| name.chars().count());
    assert!(sub_chars <= 2 * MAX_NAME_CHARS + 2, "a sub's name of {sub_chars} characters");
    for path in named.statement.iter().map(|(file, _)| file).chain(&named.string) {
        assert!(path.chars().count() <= MAX_PATH_CHARS, "a path of {} characters", path.chars().count());
    }
}

/// Bytes taken from the front of an input.
struct Taker<'a>(&'a [u8]);

impl Taker<'_> {
    fn byte(&mut self) -> u8 {
        let (&first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        first
    }

    /// A name of up to 255 bytes of the input without NUL, made UTF-8.
    fn name(&mut self) -> String {
        let len = usize::from(self.byte()).min(self.0.len());
        let (name, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8_lossy(name).replace('\0', "")
    }
}

/// A sub of the input's package and name, a lexical one, a statement of its file and line and
/// a `require` of its file, each named as Perl names them.
fn made_to_order(data: &[u8]) {
    let mut taker = Taker(data);
    let line = u32::from_le_bytes([taker.byte(), taker.byte(), taker.byte(), taker.byte()]);
    let (package, name, file) = (taker.name(), taker.name(), taker.name());
    let mut fake = Fake::new();
    let (sub, lexical) = (fake.sub(&package, &name), fake.named_sub(None, &name));
    let (cop, sv) = (fake.cop(&file, line), fake.string(&file));
    let mut read = fake.reader();
    let named = name_frame(&mut read, sub, cop, sv);
    assert_eq!(named.sub, Some(format!("{package}::{name}")));
    assert_eq!(named.statement, Some((file.clone(), line)));
    assert_eq!(named.string, Some(file));
    assert_eq!(name_frame(&mut read, lexical, 0, 0).sub, Some(name));
}
