//! A target process's memory, as the runtimes read it: through `/proc/PID/mem`, a read at a
//! time, each either whole or refused, within each sample's [`Allowance`].
use std::{
    fs::File,
    os::unix::fs::FileExt as _,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use crate::model::Tgid;

/// Reads of target memory one sample's runtime frames may cost, whatever the target's
/// metadata claims (a method with a thousand overloads, a stack of fresh code objects), and
/// their bytes: past them, frames stay unnamed for this sample and are read at a later one.
pub const READS_PER_SAMPLE: u64 = 256;
pub const BYTES_PER_SAMPLE: u64 = 4 << 20;

/// What is left of the reads a sample may cost, shared by the readers of every process; the
/// walk resets it at each sample.
#[derive(Debug)]
pub struct Allowance {
    /// Reads and bytes at each reset.
    limits: (u64, u64),
    reads: AtomicU64,
    bytes: AtomicU64,
    /// A read was refused since the last reset.
    spent: AtomicBool,
}

impl Default for Allowance {
    /// A sample's: [`READS_PER_SAMPLE`] and [`BYTES_PER_SAMPLE`].
    fn default() -> Self {
        Self::new(READS_PER_SAMPLE, BYTES_PER_SAMPLE)
    }
}

impl Allowance {
    pub fn new(reads: u64, bytes: u64) -> Self {
        Self {
            limits: (reads, bytes),
            reads: AtomicU64::new(reads),
            bytes: AtomicU64::new(bytes),
            spent: AtomicBool::new(false),
        }
    }

    /// No bound: for reading what a runtime says of itself when it is found, which a sample
    /// does not pay for (it is looked for at most every few tens of milliseconds).
    pub fn unbounded() -> Arc<Self> {
        Arc::new(Self::new(u64::MAX, u64::MAX))
    }

    /// A new sample: the whole allowance again.
    pub fn reset(&self) {
        self.reads.store(self.limits.0, Ordering::Relaxed);
        self.bytes.store(self.limits.1, Ordering::Relaxed);
        self.spent.store(false, Ordering::Relaxed);
    }

    /// Takes a read of `bytes`, if the sample has room for it.
    fn take(&self, bytes: u64) -> bool {
        let reads = self.reads.load(Ordering::Relaxed);
        let left = self.bytes.load(Ordering::Relaxed);
        if reads == 0 || left < bytes {
            self.spent.store(true, Ordering::Relaxed);
            return false;
        }
        self.reads.store(reads - 1, Ordering::Relaxed);
        self.bytes.store(left - bytes, Ordering::Relaxed);
        true
    }

    /// Whether a read was refused since the sample began: what failed then may read another
    /// time, and is not remembered as unreadable.
    pub fn spent(&self) -> bool {
        self.spent.load(Ordering::Relaxed)
    }
}

/// A process's memory, through `/proc/PID/mem`, opened when first read.
pub struct ProcessMemory {
    tgid: Tgid,
    file: Option<File>,
    allowance: Arc<Allowance>,
}

impl ProcessMemory {
    /// The memory of `tgid`, read within `allowance`.
    pub fn new(tgid: Tgid, allowance: Arc<Allowance>) -> Self {
        Self { tgid, file: None, allowance }
    }

    /// Whether its allowance was spent in this sample (see [`Allowance::spent`]).
    pub fn allowance_spent(&self) -> bool {
        self.allowance.spent()
    }

    /// Fills `buf` from `addr`; false if that memory cannot be read, or the sample's allowance
    /// has no room for it.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        if !self.allowance.take(buf.len() as u64) {
            return false;
        }
        for _ in 0..2 {
            let Some(file) = self.file() else { return false };
            match file.read_at(buf, addr) {
                Ok(read) if read == buf.len() => return true,
                Ok(0) if !buf.is_empty() => {
                    // The address space the file was opened on is gone: the process ran exec since
                    // (or exited, and opening again fails).
                    self.file = None;
                }
                _ => return false,
            }
        }
        false
    }

    fn file(&mut self) -> Option<&File> {
        if self.file.is_none() {
            self.file = File::open(format!("/proc/{}/mem", self.tgid)).ok();
        }
        self.file.as_ref()
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    #[test]
    fn a_sample_reads_within_its_allowance() {
        let allowance = Arc::new(Allowance::new(2, 100));
        let mut memory = ProcessMemory::new(Tgid::own(), allowance.clone());
        let word = 0x1234_5678_9abc_def0u64;
        let mut buf = [0u8; 8];
        let at = &word as *const u64 as u64;
        assert!(memory.read(at, &mut buf) && u64::from_le_bytes(buf) == word);
        assert!(!memory.read(at, &mut [0; 200]), "more bytes than are left");
        assert!(memory.allowance_spent());
        assert!(memory.read(at, &mut buf), "the second read");
        assert!(!memory.read(at, &mut buf), "no reads left");
        allowance.reset();
        assert!(!memory.allowance_spent() && memory.read(at, &mut buf), "the next sample");
    }

    /// Memory made of pieces at their addresses; a read must fall inside one piece.
    pub struct Pieces(pub Vec<(u64, Vec<u8>)>);

    impl Pieces {
        pub fn read(&self, addr: u64, buffer: &mut [u8]) -> bool {
            self.0.iter().any(|(start, bytes)| {
                let Some(from) = addr.checked_sub(*start).and_then(|from| usize::try_from(from).ok()) else {
                    return false;
                };
                let Some(piece) = from.checked_add(buffer.len()).and_then(|to| bytes.get(from..to)) else {
                    return false;
                };
                buffer.copy_from_slice(piece);
                true
            })
        }
    }
}
