//! JIT symbols from jitdump files (`jit-PID.dump`, the binary format perf defined for JITs: V8's
//! `--perf-prof`, the JVM's perf agent and others), read as a stream: a header, then records, of
//! which code loads (an address, a size and a name) and code moves (the same code at a new
//! address) name code. Debug-information and unwinding-information records are passed over.
//! Everything is the target's: sizes are checked against the format's minimums and a maximum,
//! names bounded, and a file that stops making sense stops being read.

/// `JiTD`, in the writer's byte order; the other order is refused (not this machine's).
const MAGIC: u32 = 0x4a69_5444;
const HEADER_MIN: u32 = 40;
const RECORD_HEADER: usize = 16;
/// The most bytes a record keeps pending (a code load's fixed part and the longest name read).
pub const MAX_PENDING: usize = RECORD_HEADER + CODE_LOAD_FIXED + MAX_NAME;
const CODE_LOAD: u32 = 0;
const CODE_MOVE: u32 = 1;
/// A code load's fixed part, after the record header: pid, tid, vma, code address, code size,
/// code index.
const CODE_LOAD_FIXED: usize = 40;
/// A code move's: pid, tid, vma, old and new code address, code size, code index.
const CODE_MOVE_FIXED: usize = 48;
/// The largest record taken (a code load carries its code): beyond, the file is given up.
const MAX_RECORD: u32 = 64 << 20;
/// A name's bytes looked at most.
const MAX_NAME: usize = 4096;

/// Where a jitdump is in its stream of bytes.
#[derive(Debug, Default)]
pub struct JitDump {
    state: State,
    /// Bytes of a header or record not complete yet (its fixed part and name; code is skipped).
    pending: Vec<u8>,
}

#[derive(Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Header,
    /// Reading records: `skip` bytes still to pass over first (the rest of the last record).
    Records { skip: u64 },
    /// Not a jitdump, or one that went wrong: read no further.
    Refused(&'static str),
}

/// What a record says of code.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// Code at `start`, `size` bytes, named `name`.
    Load { start: u64, size: u64, name: &'a str },
    /// The code loaded at `old` now at `new`.
    Move { old: u64, new: u64, size: u64 },
}

impl JitDump {
    /// Bytes kept of a header or record not complete yet.
    #[cfg(any(test, feature = "testing"))]
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Why the file was given up, if it was.
    pub fn refused(&self) -> Option<&'static str> {
        match self.state {
            State::Refused(why) => Some(why),
            _ => None,
        }
    }

    /// Takes the next bytes of the file, calling `on` with what each complete record says.
    pub fn append(&mut self, mut bytes: &[u8], on: &mut dyn FnMut(Event<'_>)) {
        while !bytes.is_empty() {
            match self.state {
                State::Refused(_) => return,
                State::Records { skip } if skip > 0 => {
                    let passed = skip.min(bytes.len() as u64);
                    bytes = &bytes[passed as usize..];
                    self.state = State::Records { skip: skip - passed };
                }
                State::Header => {
                    // Magic, version, the header's size.
                    bytes = self.fill(bytes, 12);
                    if self.pending.len() < 12 {
                        return;
                    }
                    let size = u32_at(&self.pending, 8).unwrap_or(0);
                    if u32_at(&self.pending, 0) != Some(MAGIC) {
                        self.state = State::Refused("not a jitdump of this byte order");
                        return;
                    }
                    if !(HEADER_MIN..=4096).contains(&size) {
                        self.state = State::Refused("a header size out of bounds");
                        return;
                    }
                    self.pending.clear();
                    self.state = State::Records { skip: u64::from(size) - 12 };
                }
                State::Records { .. } => {
                    bytes = self.fill(bytes, RECORD_HEADER);
                    if self.pending.len() < RECORD_HEADER {
                        return;
                    }
                    let (id, size) =
                        (u32_at(&self.pending, 0).unwrap_or(0), u32_at(&self.pending, 4).unwrap_or(0));
                    if !(RECORD_HEADER as u32..=MAX_RECORD).contains(&size) {
                        self.state = State::Refused("a record size out of bounds");
                        return;
                    }
                    // The part of the record read: its fixed fields and name, at most.
                    let wanted = match id {
                        CODE_LOAD => MAX_PENDING,
                        CODE_MOVE => RECORD_HEADER + CODE_MOVE_FIXED,
                        _ => RECORD_HEADER,
                    }
                    .min(size as usize);
                    bytes = self.fill(bytes, wanted);
                    if self.pending.len() < wanted {
                        return;
                    }
                    let record = std::mem::take(&mut self.pending);
                    record_event(id, &record, on);
                    self.state = State::Records { skip: u64::from(size) - wanted as u64 };
                }
            }
        }
    }

    /// Moves bytes from `bytes` into `pending` until it holds `len`; returns the rest.
    fn fill<'b>(&mut self, bytes: &'b [u8], len: usize) -> &'b [u8] {
        let take = len.saturating_sub(self.pending.len()).min(bytes.len());
        self.pending.extend_from_slice(&bytes[..take]);
        &bytes[take..]
    }
}

/// Calls `on` with what the record `id` (its first bytes, `record`) says of code.
fn record_event(id: u32, record: &[u8], on: &mut dyn FnMut(Event<'_>)) {
    let word = |at: usize| u64_at(record, RECORD_HEADER + at);
    match id {
        CODE_LOAD => {
            let (Some(start), Some(size)) = (word(16), word(24)) else { return };
            // A name cut by the bound, without its NUL, is kept as far as it goes.
            let name = record.get(RECORD_HEADER + CODE_LOAD_FIXED..).unwrap_or_default();
            let name = String::from_utf8_lossy(name.split(|&b| b == 0).next().unwrap_or_default());
            if size > 0 && !name.is_empty() {
                on(Event::Load { start, size, name: &name });
            }
        }
        CODE_MOVE => {
            if let (Some(old), Some(new), Some(size)) = (word(16), word(24), word(32)) {
                on(Event::Move { old, new, size });
            }
        }
        _ => {}
    }
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A jitdump's header.
    pub(crate) fn header() -> Vec<u8> {
        let mut bytes = Vec::new();
        for word in [MAGIC, 1, HEADER_MIN, 62, 0, 1234] {
            bytes.extend(word.to_le_bytes());
        }
        bytes.extend([0; 16]);
        bytes
    }

    /// A code load record of `name` at `start`, with `size` bytes of code.
    pub(crate) fn code_load(start: u64, size: u64, name: &str) -> Vec<u8> {
        let total = RECORD_HEADER + CODE_LOAD_FIXED + name.len() + 1 + size as usize;
        let mut bytes = Vec::new();
        bytes.extend(CODE_LOAD.to_le_bytes());
        bytes.extend((total as u32).to_le_bytes());
        bytes.extend(0u64.to_le_bytes());
        bytes.extend([0; 8]);
        for word in [start, start, size, 7] {
            bytes.extend(word.to_le_bytes());
        }
        bytes.extend(name.as_bytes());
        bytes.push(0);
        bytes.extend(vec![0xcc; size as usize]);
        bytes
    }

    fn events(dump: &mut JitDump, bytes: &[u8]) -> Vec<String> {
        let mut seen = Vec::new();
        dump.append(bytes, &mut |event| seen.push(format!("{event:?}")));
        seen
    }

    #[test]
    fn code_loads_and_moves_in_pieces_of_any_size() {
        let mut file = header();
        file.extend(code_load(0x1000, 0x40, "JS:*alpha a.js:1"));
        // A debug-information record, passed over.
        file.extend(2u32.to_le_bytes());
        file.extend(24u32.to_le_bytes());
        file.extend([0; 16]);
        let mut moved = Vec::new();
        moved.extend(CODE_MOVE.to_le_bytes());
        moved.extend(((RECORD_HEADER + CODE_MOVE_FIXED) as u32).to_le_bytes());
        moved.extend([0; 16]);
        for word in [0x1000u64, 0x1000, 0x2000, 0x40, 7] {
            moved.extend(word.to_le_bytes());
        }
        file.extend(moved);
        file.extend(code_load(0x3000, 0x10, "stub"));
        let expected = [
            "Load { start: 4096, size: 64, name: \"JS:*alpha a.js:1\" }",
            "Move { old: 4096, new: 8192, size: 64 }",
            "Load { start: 12288, size: 16, name: \"stub\" }",
        ];
        for piece in [1, 7, 16, 1000] {
            let mut dump = JitDump::default();
            let seen: Vec<String> = file.chunks(piece).flat_map(|chunk| events(&mut dump, chunk)).collect();
            assert_eq!(seen, expected, "in pieces of {piece}");
            assert_eq!(dump.refused(), None);
        }
    }

    #[test]
    fn garbage_is_refused_and_read_no_further() {
        let mut dump = JitDump::default();
        assert!(events(&mut dump, b"7f00 10 not a jitdump\n").is_empty());
        assert_eq!(dump.refused(), Some("not a jitdump of this byte order"));
        let mut file = header();
        file.extend(0u32.to_le_bytes());
        file.extend(4u32.to_le_bytes());
        file.extend(code_load(0x1000, 0x10, "after"));
        let mut dump = JitDump::default();
        assert!(events(&mut dump, &file).is_empty());
        assert_eq!(dump.refused(), Some("a record size out of bounds"));
    }
}
