//! A Perl process's subs, stashes, statements and strings made by hand, for the unit tests and
//! the `perl_names` fuzz target, and a frame named from any memory as the runtime names it.
use std::collections::BTreeMap;

use anyhow::anyhow;

use super::names::{
    self, COP_FILE, COP_LINE, CV_FLAGS, CV_GV, CV_STASH, CVF_LEXICAL, CVF_NAMED, GV_NAME, GV_STASH, HEK_KEY,
    HEK_LENGTH, HV_NAME, MAX_NAME_BYTES, MAX_PATH_BYTES, PV_LENGTH, SV_ANY, SV_FLAGS, SV_U, SVF_OOK, SVF_POK,
    SVT_PV, SVT_PVCV, SVT_PVGV, SVT_PVHV,
};

/// Where made memory starts.
pub const BASE: u64 = 0x5500_0000_0000;
/// The most reads, and bytes read, naming a frame (its sub, statement and string) may make.
pub const MAX_READS: usize = 64;
pub const MAX_BYTES_READ: usize = 2 * MAX_NAME_BYTES as usize + 2 * MAX_PATH_BYTES as usize + 1024;
/// The largest single read.
pub const MAX_READ_BYTES: usize = MAX_PATH_BYTES as usize;
/// The longest name and path, in characters: their bytes' bound and the `…` cutting them.
pub const MAX_NAME_CHARS: usize = MAX_NAME_BYTES as usize + 1;
pub const MAX_PATH_CHARS: usize = MAX_PATH_BYTES as usize + 1;

/// What naming a frame's sub (`cv`), statement (`cop`) and string (`sv`) read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NamedFrame {
    pub sub: Option<String>,
    pub statement: Option<(String, u32)>,
    pub string: Option<String>,
}

/// Names what a frame record of the kernel's walk points to, reading with `read` (false: not
/// mapped), as the runtime does.
pub fn name_frame(read: &mut dyn FnMut(u64, &mut [u8]) -> bool, cv: u64, cop: u64, sv: u64) -> NamedFrame {
    let read = &mut |addr: u64, buffer: &mut [u8]| {
        if read(addr, buffer) {
            Ok(())
        } else {
            Err(anyhow!("{} bytes at {addr:#x} are not mapped", buffer.len()))
        }
    };
    NamedFrame {
        sub: names::sub_name(read, cv).ok(),
        statement: names::statement(read, cop).ok(),
        string: names::string(read, sv).ok(),
    }
}

/// A fuzz input: the addresses a frame record gives (`cv`, `cop`, a `require`'s `sv`), and the
/// memory from `base` on.
#[derive(Debug)]
pub struct Input<'a> {
    pub base: u64,
    pub cv: u64,
    pub cop: u64,
    pub sv: u64,
    pub memory: &'a [u8],
}

/// An input's bytes before the memory: `base`, `cv`, `cop` and `sv`, little-endian.
pub const INPUT_HEADER: usize = 4 * 8;

impl<'a> Input<'a> {
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let (head, memory) = data.split_first_chunk::<INPUT_HEADER>()?;
        let word = |i: usize| u64::from_le_bytes(head[8 * i..8 * i + 8].try_into().unwrap());
        Some(Self { base: word(0), cv: word(1), cop: word(2), sv: word(3), memory })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes: Vec<u8> =
            [self.base, self.cv, self.cop, self.sv].iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes.extend(self.memory);
        bytes
    }
}

/// Memory made piece by piece from [`BASE`] on, each piece 16-byte aligned.
#[derive(Default)]
pub struct Fake {
    pieces: BTreeMap<u64, Vec<u8>>,
    end: u64,
}

impl Fake {
    pub fn new() -> Self {
        Self { pieces: BTreeMap::new(), end: BASE }
    }

    /// `bytes` placed after what is made.
    pub fn place(&mut self, bytes: &[u8]) -> u64 {
        let at = self.end;
        self.pieces.insert(at, bytes.to_vec());
        self.end = (at + bytes.len() as u64).next_multiple_of(16);
        at
    }

    /// `size` zeroed bytes placed after what is made.
    fn zeroed(&mut self, size: usize) -> u64 {
        self.place(&vec![0; size])
    }

    /// Writes `bytes` at `at`, inside a piece made.
    pub fn write(&mut self, at: u64, bytes: &[u8]) {
        let (start, piece) = self.pieces.range_mut(..=at).next_back().expect("inside a piece");
        let from = (at - start) as usize;
        piece[from..from + bytes.len()].copy_from_slice(bytes);
    }

    pub fn write_word(&mut self, at: u64, value: u64) {
        self.write(at, &value.to_le_bytes());
    }

    pub fn write_u32(&mut self, at: u64, value: u32) {
        self.write(at, &value.to_le_bytes());
    }

    /// An SV head of type `kind` (with `flags`) whose body is `size` zeroed bytes: the head's
    /// address and the body's.
    fn sv(&mut self, kind: u8, flags: u32, size: usize) -> (u64, u64) {
        let head = self.zeroed(24);
        let body = self.zeroed(size);
        self.write_u32(head + SV_FLAGS, u32::from(kind) | flags);
        self.write_word(head + SV_ANY, body);
        (head, body)
    }

    /// A hash entry key holding `key`.
    pub fn hek(&mut self, key: &str) -> u64 {
        let hek = self.zeroed(HEK_KEY as usize + key.len() + 2);
        self.write_u32(hek + HEK_LENGTH, key.len() as u32);
        self.write(hek + HEK_KEY, key.as_bytes());
        hek
    }

    /// A stash named `name`.
    pub fn stash(&mut self, name: &str) -> u64 {
        let (stash, body) = self.sv(SVT_PVHV, SVF_OOK, 64);
        let hek = self.hek(name);
        self.write_word(body + HV_NAME, hek);
        stash
    }

    /// A sub named `name` through its glob in the stash `package` (`main`): its code (`CV *`).
    pub fn sub(&mut self, package: &str, name: &str) -> u64 {
        let stash = self.stash(package);
        let (glob, glob_body) = self.sv(SVT_PVGV, 0, 48);
        let hek = self.hek(name);
        self.write_word(glob_body + GV_NAME, hek);
        self.write_word(glob_body + GV_STASH, stash);
        let (cv, body) = self.sv(SVT_PVCV, 0, 104);
        self.write_word(body + CV_GV, glob);
        cv
    }

    /// A sub named by its own name (`CVf_NAMED`), in `package`, or lexical (`my sub`) without.
    pub fn named_sub(&mut self, package: Option<&str>, name: &str) -> u64 {
        let (cv, body) = self.sv(SVT_PVCV, 0, 104);
        let hek = self.hek(name);
        self.write_word(body + CV_GV, hek);
        let flags = match package {
            Some(package) => {
                let stash = self.stash(package);
                self.write_word(body + CV_STASH, stash);
                CVF_NAMED
            }
            None => CVF_NAMED | CVF_LEXICAL,
        };
        self.write_u32(body + CV_FLAGS, flags);
        cv
    }

    /// A statement at `line` of `file`.
    pub fn cop(&mut self, file: &str, line: u32) -> u64 {
        let cop = self.zeroed(0x48);
        let mut text = file.as_bytes().to_vec();
        text.push(0);
        let file = self.place(&text);
        self.write_u32(cop + COP_LINE, line);
        self.write_word(cop + COP_FILE, file);
        cop
    }

    /// A scalar holding the string `text`.
    pub fn string(&mut self, text: &str) -> u64 {
        let (sv, body) = self.sv(SVT_PV, SVF_POK, 32);
        let mut bytes = text.as_bytes().to_vec();
        bytes.push(0);
        let pv = self.place(&bytes);
        self.write_word(body + PV_LENGTH, text.len() as u64);
        self.write_word(sv + SV_U, pv);
        sv
    }

    /// Reads of what is made, as `/proc/PID/mem` gives them (false: not mapped).
    pub fn reader(&self) -> impl FnMut(u64, &mut [u8]) -> bool + use<> {
        let memory = self.flat_memory();
        move |addr, buffer| {
            let start = addr.checked_sub(BASE).and_then(|start| usize::try_from(start).ok());
            let piece = start.and_then(|start| memory.get(start..start.checked_add(buffer.len())?));
            piece.map(|piece| buffer.copy_from_slice(piece)).is_some()
        }
    }

    /// Everything made, in one piece from [`BASE`] on, with a page's room after it (where a
    /// string's reads may run on).
    pub fn flat_memory(&self) -> Vec<u8> {
        let mut memory = vec![0; (self.end - BASE) as usize + 4096];
        for (&at, piece) in &self.pieces {
            let from = (at - BASE) as usize;
            memory[from..from + piece.len()].copy_from_slice(piece);
        }
        memory
    }
}
