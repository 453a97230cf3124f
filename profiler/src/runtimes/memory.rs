//! A target process's memory, as the runtimes read it: by a reader process, a read at a time,
//! each either whole or refused, within each sample's [`Allowance`].
use std::sync::{
    Arc, Mutex, PoisonError,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

use crate::{
    address_space::FileMappings,
    model::Tgid,
    untrusted::reader::{self, PAGE},
};

/// Reads of target memory one sample's runtime frames may cost, whatever the target's
/// metadata claims (a method with a thousand overloads, a stack of fresh code objects), and
/// their bytes: past them, frames stay unnamed for this sample and are read at a later one.
pub(crate) const READS_PER_SAMPLE: u64 = 1024;
pub(crate) const BYTES_PER_SAMPLE: u64 = 4 << 20;

/// The summary's line for `frames` frames of `runtime` left unnamed in their sample for want of
/// its allowance of reads of `memory` (or of its file mappings known).
pub(crate) fn spent_line(frames: u64, runtime: &str, memory: &str) -> String {
    format!(
        "{frames} {runtime} frames left unnamed in their sample: it had spent its {READS_PER_SAMPLE} reads or {} MiB \
         of {memory}, or met a file mapped since its maps were read",
        BYTES_PER_SAMPLE >> 20
    )
}

/// What is left of the reads a sample may cost, and which file pages may be read, shared by the
/// readers of every process; the walk begins it anew at each sample.
#[derive(Debug)]
pub(crate) struct Allowance {
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
    /// The pages read since the reset.
    pages: Mutex<SamplePages>,
}

impl Default for Allowance {
    /// A sample's: [`READS_PER_SAMPLE`] and [`BYTES_PER_SAMPLE`].
    fn default() -> Self {
        Self::new(READS_PER_SAMPLE, BYTES_PER_SAMPLE)
    }
}

impl Allowance {
    pub(crate) fn new(reads: u64, bytes: u64) -> Self {
        Self {
            limits: (reads, bytes),
            reads: AtomicU64::new(reads),
            bytes: AtomicU64::new(bytes),
            spent: AtomicBool::new(false),
            files: Mutex::new(None),
            pages: Mutex::new(SamplePages::default()),
        }
    }

    /// No bound, the file pages of `files` readable: for reading what a runtime says of itself
    /// when it is found, which a sample does not pay for (it is looked for at most every few
    /// tens of milliseconds).
    pub(crate) fn unbounded(files: Option<FileMappings>) -> Arc<Self> {
        let allowance = Self::new(u64::MAX, u64::MAX);
        *allowance.files.lock().unwrap_or_else(PoisonError::into_inner) = files;
        Arc::new(allowance)
    }

    /// A new sample, of the process whose file mappings are `files`: the whole allowance again.
    pub(crate) fn begin(&self, files: FileMappings) {
        self.reads.store(self.limits.0, Ordering::Relaxed);
        self.bytes.store(self.limits.1, Ordering::Relaxed);
        self.spent.store(false, Ordering::Relaxed);
        *self.files.lock().unwrap_or_else(PoisonError::into_inner) = Some(files);
        self.pages.lock().unwrap_or_else(PoisonError::into_inner).0.clear();
    }

    /// The file mappings of the process being walked.
    pub(crate) fn files(&self) -> Option<FileMappings> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A page of a file that a read of the process being walked found in no mapping known, if
    /// any since the last call (see [`FileMappings::take_unknown`]).
    pub(crate) fn unknown_file_page(&self) -> Option<u64> {
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
    pub(crate) fn spent(&self) -> bool {
        self.spent.load(Ordering::Relaxed)
    }
}

/// A process's memory, read by this thread's reader (see `reader`): only pages present in
/// memory are read (see `pages`), and of pages of a file, only those of a file the kernel
/// answers for (the file mapped there, as the process's mappings at the sample name it, asked of
/// its handle: see `resolve::FileMappings`): a read faults nothing in.
/// A fault can wait for ever, uninterruptibly, on a file of a FUSE daemon that never answers
/// (`allow_other`), or for long on a network file system or swap; and a daemon may drop a page
/// it served at any moment, so a page of its file found present is not read either. A page the
/// target has not touched, or that was swapped out, is left unread, as unreadable memory is. A
/// process that maps a daemon's file over memory between the look at its pages and the read
/// holds up the reader, not the profiler: see `reader`.
pub(crate) struct ProcessMemory {
    tgid: Tgid,
    /// Its user, as `Identity::user` says: barred from reads if one of its reads gets no answer.
    user: Option<u32>,
    allowance: Arc<Allowance>,
}

impl ProcessMemory {
    /// The memory of `tgid`, whose user is `user`, read within `allowance`.
    pub(crate) fn new(tgid: Tgid, user: Option<u32>, allowance: Arc<Allowance>) -> Self {
        Self { tgid, user, allowance }
    }

    /// Whether its allowance was spent in this sample (see [`Allowance::spent`]).
    pub(crate) fn allowance_spent(&self) -> bool {
        self.allowance.spent()
    }

    /// Fills `buf` from `addr`; false if that memory cannot be read, a page of it is not
    /// present, or the sample's allowance has no room for it.
    pub(crate) fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        if buf.is_empty() {
            return true;
        }
        let (tgid, user, allowance) = (self.tgid, self.user, &self.allowance);
        if !allowance.take(buf.len() as u64) {
            return false;
        }
        let mut read_pages = |at: u64, buf: &mut [u8]| {
            reader::read(tgid, user, at, buf, &mut |page| allowance.kernels_file(tgid, page))
        };
        let Some(end) = addr.checked_add(buf.len() as u64) else { return false };
        let pages = (addr / PAGE)..end.div_ceil(PAGE);
        if pages.end - pages.start > MAX_PAGES_KEPT_PER_READ {
            return read_pages(addr, buf);
        }
        let mut kept = allowance.pages.lock().unwrap_or_else(PoisonError::into_inner);
        for page in pages {
            let Some(bytes) = kept.page(tgid, page * PAGE, &mut read_pages) else { return false };
            let (from, to) = (addr.max(page * PAGE), end.min((page + 1) * PAGE));
            let at = |address: u64| (address - addr) as usize;
            buf[at(from)..at(to)]
                .copy_from_slice(&bytes[(from - page * PAGE) as usize..(to - page * PAGE) as usize]);
        }
        true
    }
}

/// Pages one read may span and be served by [`SamplePages`]; a longer read is read as it is.
const MAX_PAGES_KEPT_PER_READ: u64 = 2;
/// Pages a sample keeps.
const MAX_PAGES_KEPT: usize = 32;

/// The pages of target memory a sample has read, each read whole the first time the sample read
/// within it, and no more: a sample's runtime frames read a few words each of objects that lie
/// together, each read is a hand-over to the reader (see `reader`), and the memory read at one
/// sample is more consistent for it. A page that could not be read is kept as such.
#[derive(Debug, Default)]
struct SamplePages(Vec<SamplePage>);

/// A page of a process's, at its address, and its bytes if it could be read.
#[derive(Debug)]
struct SamplePage {
    tgid: Tgid,
    addr: u64,
    bytes: Option<Box<[u8]>>,
}

impl SamplePages {
    /// The page at `addr` of `tgid`, read with `read` unless this sample read it already.
    fn page(
        &mut self,
        tgid: Tgid,
        addr: u64,
        read: &mut impl FnMut(u64, &mut [u8]) -> bool,
    ) -> Option<&[u8]> {
        let index = match self.0.iter().position(|page| page.tgid == tgid && page.addr == addr) {
            Some(index) => index,
            None => {
                let mut bytes = vec![0u8; PAGE as usize].into_boxed_slice();
                let bytes = read(addr, &mut bytes).then_some(bytes);
                if self.0.len() == MAX_PAGES_KEPT {
                    self.0.remove(0);
                }
                self.0.push(SamplePage { tgid, addr, bytes });
                self.0.len() - 1
            }
        };
        self.0[index].bytes.as_deref()
    }
}

// Typed reads of a target and the pointers worth following, for every runtime: each read whole
// or refused, every pointer checked before it is followed.

/// Reads `buf.len()` bytes of the process at an address; false when it cannot.
pub(crate) type ReadMemory<'a> = dyn FnMut(u64, &mut [u8]) -> bool + 'a;

/// A process's memory as a runtime's walk keeps it (`/proc/PID/mem` through a [`ProcessMemory`];
/// fixture bytes in tests).
pub(crate) type Memory = Box<dyn FnMut(u64, &mut [u8]) -> bool + Send>;

/// The end of the user half of the address space: nothing of a process's lies beyond.
pub(crate) const USER_END: u64 = 1 << 47;

/// A pointer worth following: not NULL, aligned, in the user half of the address space.
pub(crate) fn pointer(address: u64) -> Option<u64> {
    (address != 0 && address.is_multiple_of(8) && address < USER_END).then_some(address)
}

/// `size` bytes of the target at `address`.
pub(crate) fn read_bytes(read: &mut ReadMemory<'_>, address: u64, size: usize) -> Option<Vec<u8>> {
    let mut bytes = vec![0u8; size];
    read(address, &mut bytes).then_some(bytes)
}

pub(crate) fn read_u64(read: &mut ReadMemory<'_>, address: u64) -> Option<u64> {
    let mut raw = [0u8; 8];
    read(address, &mut raw).then(|| u64::from_le_bytes(raw))
}

pub(crate) fn read_u32(read: &mut ReadMemory<'_>, address: u64) -> Option<u32> {
    let mut raw = [0u8; 4];
    read(address, &mut raw).then(|| u32::from_le_bytes(raw))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_sample_reads_within_its_allowance() {
        let allowance = Arc::new(Allowance::new(2, 100));
        let mut memory = ProcessMemory::new(Tgid::own(), None, allowance.clone());
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
        let mut memory = ProcessMemory::new(Tgid::own(), None, Allowance::unbounded(Some(own_files())));
        assert!(memory.read(at, &mut buf), "this test's own code, a page of its executable");
        assert!(exe.windows(4).any(|window| window == buf));
        let mut unknown = ProcessMemory::new(Tgid::own(), None, Allowance::unbounded(None));
        assert!(!unknown.read(at, &mut buf), "a page of a file whose mapping is not known");
    }

    /// Memory made of pieces at their addresses; a read must fall inside one piece.
    pub(crate) struct Pieces(pub Vec<(u64, Vec<u8>)>);

    impl Pieces {
        pub(crate) fn read(&self, addr: u64, buffer: &mut [u8]) -> bool {
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
