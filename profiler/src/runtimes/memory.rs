//! A target process's memory, as the runtimes read it: through `/proc/PID/mem`, a read at a
//! time, each either whole or refused, within each sample's [`Allowance`].
use std::{
    fs::File,
    os::unix::fs::FileExt as _,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use crate::{
    address_space::FileMappings,
    model::Tgid,
    untrusted::descriptors::{self, Slot},
};

/// Reads of target memory one sample's runtime frames may cost, whatever the target's
/// metadata claims (a method with a thousand overloads, a stack of fresh code objects), and
/// their bytes: past them, frames stay unnamed for this sample and are read at a later one.
pub const READS_PER_SAMPLE: u64 = 1024;
pub const BYTES_PER_SAMPLE: u64 = 4 << 20;

/// The summary's line for `frames` frames of `runtime` left unnamed in their sample for want of
/// its allowance of reads of `memory` (or of its file mappings known).
pub fn spent_line(frames: u64, runtime: &str, memory: &str) -> String {
    format!(
        "{frames} {runtime} frames left unnamed in their sample: it had spent its {READS_PER_SAMPLE} reads or {} MiB \
         of {memory}, or met a file mapped since its maps were read",
        BYTES_PER_SAMPLE >> 20
    )
}

/// What is left of the reads a sample may cost, and which file pages may be read, shared by the
/// readers of every process; the walk begins it anew at each sample.
#[derive(Debug)]
pub struct Allowance {
    /// Reads and bytes at each reset.
    limits: (u64, u64),
    reads: AtomicU64,
    bytes: AtomicU64,
    /// A read was refused since the last reset that may succeed at a later sample (see
    /// [`Self::spent`]).
    spent: AtomicBool,
    /// The file mappings of the process being walked: a page of a file is read only when it is
    /// a page of a file the kernel answers for (see [`ProcessMemory`]).
    files: Mutex<Option<FileMappings>>,
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
            files: Mutex::new(None),
        }
    }

    /// No bound, the file pages of `files` readable: for reading what a runtime says of itself
    /// when it is found, which a sample does not pay for (it is looked for at most every few
    /// tens of milliseconds).
    pub fn unbounded(files: Option<FileMappings>) -> Arc<Self> {
        let allowance = Self::new(u64::MAX, u64::MAX);
        *allowance.files.lock().unwrap_or_else(PoisonError::into_inner) = files;
        Arc::new(allowance)
    }

    /// A new sample, of the process whose file mappings are `files`: the whole allowance again.
    pub fn begin(&self, files: FileMappings) {
        self.reads.store(self.limits.0, Ordering::Relaxed);
        self.bytes.store(self.limits.1, Ordering::Relaxed);
        self.spent.store(false, Ordering::Relaxed);
        *self.files.lock().unwrap_or_else(PoisonError::into_inner) = Some(files);
    }

    /// The file mappings of the process being walked.
    pub fn files(&self) -> Option<FileMappings> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A page of a file that a read of the process being walked found in no mapping known, if
    /// any since the last call (see [`FileMappings::take_unknown`]).
    pub fn unknown_file_page(&self) -> Option<u64> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner).as_ref()?.take_unknown()
    }

    /// Whether `addr` of process `tgid` is a page of a file the kernel answers for. A page of a
    /// file not known to be mapped there yet is refused as the allowance refuses a read: it may
    /// be read once the process's maps are read again.
    fn kernels_file(&self, tgid: Tgid, addr: u64) -> bool {
        let files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        match files.as_ref().map(|files| files.kernels_file(tgid, addr)) {
            Some(Some(kernels)) => kernels,
            Some(None) => {
                self.spent.store(true, Ordering::Relaxed);
                false
            }
            None => false,
        }
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

    /// Whether a read was refused since the sample began for want of its allowance, or of the
    /// process's file mappings known: what failed then may read another time, and is not
    /// remembered as unreadable.
    pub fn spent(&self) -> bool {
        self.spent.load(Ordering::Relaxed)
    }
}

/// A process's memory, through `/proc/PID/mem`: only pages present in memory are read (as its
/// `/proc/PID/pagemap` says), and of pages of a file, only those of a file the kernel answers
/// for (the file mapped there, as the process's mappings at the sample name it, asked of its
/// handle: see `resolve::FileMappings`): a read faults nothing in.
/// A fault can wait for ever, uninterruptibly, on a file of a FUSE daemon that never answers
/// (`allow_other`), or for long on a network file system or swap, and it would hold up the
/// pipeline for every process; and a daemon may drop a page it served at any moment, so a page
/// of its file found present is not read either. A page the target has not touched, or that was
/// swapped out, is left unread, as unreadable memory is. (A process that maps a daemon's file
/// over one of a kernel's file system, between the sample and the read, could still have a
/// read wait for the daemon: the mappings known lag the process by up to a drain.)
pub struct ProcessMemory {
    tgid: Tgid,
    allowance: Arc<Allowance>,
    mem: ProcFile,
    pagemap: ProcFile,
}

/// A file of a process's `/proc` directory, opened when first read, and kept open while the cap
/// on descriptors kept has room (else opened at each read).
struct ProcFile {
    path: String,
    file: Option<(File, Option<Slot>)>,
}

impl ProcFile {
    fn new(path: String) -> Self {
        Self { path, file: None }
    }

    /// Fills `buf` from `offset`, whole or not at all. A read of nothing at all from an
    /// address space gone (the process ran exec since, or exited) opens the file once more.
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> bool {
        for _ in 0..2 {
            if self.file.is_none() {
                let Ok(file) = File::open(&self.path) else { return false };
                self.file = Some((file, descriptors::take()));
            }
            let Some((file, slot)) = &self.file else { return false };
            let read = file.read_at(buf, offset);
            if slot.is_none() {
                self.file = None;
            }
            match read {
                Ok(read) if read == buf.len() => return true,
                Ok(0) if !buf.is_empty() => self.file = None,
                _ => return false,
            }
        }
        false
    }
}

/// Pages of `/proc/PID/pagemap`, and the bits of an entry that say a page is present, and a
/// page of a file (or shared memory).
const PAGE: u64 = 4096;
const PRESENT: u64 = 1 << 63;
const FILE: u64 = 1 << 61;
/// Pagemap entries looked at in one read, at most (a read of up to 2 MiB).
const MAX_PAGES: usize = 512;

impl ProcessMemory {
    /// The memory of `tgid`, read within `allowance`.
    pub fn new(tgid: Tgid, allowance: Arc<Allowance>) -> Self {
        Self {
            tgid,
            allowance,
            mem: ProcFile::new(format!("/proc/{tgid}/mem")),
            pagemap: ProcFile::new(format!("/proc/{tgid}/pagemap")),
        }
    }

    /// Whether its allowance was spent in this sample (see [`Allowance::spent`]).
    pub fn allowance_spent(&self) -> bool {
        self.allowance.spent()
    }

    /// Fills `buf` from `addr`; false if that memory cannot be read, a page of it is not
    /// present, or the sample's allowance has no room for it.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        if buf.is_empty() {
            return true;
        }
        self.allowance.take(buf.len() as u64)
            && self.present(addr, buf.len() as u64)
            && self.mem.read_at(buf, addr)
    }

    /// Whether every page of `len` bytes at `addr` is present in memory, and, if a page of a
    /// file, of a file the kernel answers for.
    fn present(&mut self, addr: u64, len: u64) -> bool {
        let Some(last) = addr.checked_add(len - 1) else { return false };
        let (first, last) = (addr / PAGE, last / PAGE);
        let mut entries = [0u8; 8 * MAX_PAGES];
        let mut page = first;
        while page <= last {
            let count = (last - page + 1).min(MAX_PAGES as u64) as usize;
            let entries = &mut entries[..8 * count];
            if !self.pagemap.read_at(entries, page * 8) {
                return false;
            }
            let readable = entries.as_chunks::<8>().0.iter().zip(page..).all(|(entry, page)| {
                let entry = u64::from_le_bytes(*entry);
                entry & PRESENT != 0
                    && (entry & FILE == 0 || self.allowance.kernels_file(self.tgid, page * PAGE))
            });
            if !readable {
                return false;
            }
            page += count as u64;
        }
        true
    }
}

// Typed reads of a target and the pointers worth following, for every runtime: each read whole
// or refused, every pointer checked before it is followed.

/// Reads `buf.len()` bytes of the process at an address; false when it cannot.
pub type ReadMemory<'a> = dyn FnMut(u64, &mut [u8]) -> bool + 'a;

/// A process's memory as a runtime's walk keeps it (`/proc/PID/mem` through a [`ProcessMemory`];
/// fixture bytes in tests).
pub type Memory = Box<dyn FnMut(u64, &mut [u8]) -> bool + Send>;

/// The end of the user half of the address space: nothing of a process's lies beyond.
pub const USER_END: u64 = 1 << 47;

/// A pointer worth following: not NULL, aligned, in the user half of the address space.
pub fn pointer(address: u64) -> Option<u64> {
    (address != 0 && address.is_multiple_of(8) && address < USER_END).then_some(address)
}

/// `size` bytes of the target at `address`.
pub fn read_bytes(read: &mut ReadMemory<'_>, address: u64, size: usize) -> Option<Vec<u8>> {
    let mut bytes = vec![0u8; size];
    read(address, &mut bytes).then_some(bytes)
}

pub fn read_u64(read: &mut ReadMemory<'_>, address: u64) -> Option<u64> {
    let mut raw = [0u8; 8];
    read(address, &mut raw).then(|| u64::from_le_bytes(raw))
}

pub fn read_u32(read: &mut ReadMemory<'_>, address: u64) -> Option<u32> {
    let mut raw = [0u8; 4];
    read(address, &mut raw).then(|| u32::from_le_bytes(raw))
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
        allowance.begin(own_files());
        assert!(!memory.allowance_spent() && memory.read(at, &mut buf), "the next sample");
    }

    /// This process's file mappings, read now.
    fn own_files() -> FileMappings {
        use crate::address_space::{AddressSpaces, Tracking};
        let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
        spaces.track(Tgid::own());
        let view = spaces.observe(Tgid::own(), Tgid::own().main_thread(), "", crate::clock::monotonic_ns());
        view.file_pages()
    }

    #[test]
    fn pages_of_files_are_read_when_the_kernel_answers_for_them() {
        // As the profiler runs: as root, which alone opens a process's files through
        // /proc/PID/map_files (and reads what they are).
        if !crate::testing::e2e_enabled() {
            return;
        }
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let at = pages_of_files_are_read_when_the_kernel_answers_for_them as *const () as u64;
        let mut buf = [0u8; 4];
        let mut memory = ProcessMemory::new(Tgid::own(), Allowance::unbounded(Some(own_files())));
        assert!(memory.read(at, &mut buf), "this test's own code, a page of its executable");
        assert!(exe.windows(4).any(|window| window == buf));
        let mut unknown = ProcessMemory::new(Tgid::own(), Allowance::unbounded(None));
        assert!(!unknown.read(at, &mut buf), "a page of a file whose mapping is not known");
    }

    #[test]
    fn pages_not_present_are_not_read() {
        let mut memory = ProcessMemory::new(Tgid::own(), Allowance::unbounded(Some(own_files())));
        // SAFETY: a private anonymous mapping of our own, unmapped when dropped.
        let map = memmap2::MmapMut::map_anon(3 * PAGE as usize).unwrap();
        let start = map.as_ptr() as u64;
        let mut buf = [1u8; 16];
        assert!(!memory.read(start, &mut buf), "never touched: not present, not faulted in by the read");
        let mut map = map;
        map[PAGE as usize] = 7;
        assert!(memory.read(start + PAGE, &mut buf) && buf[0] == 7, "touched: present");
        assert!(!memory.read(start + PAGE - 8, &mut buf), "a read across a page not present");
        assert!(memory.read(start, &mut []), "nothing to read");
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
