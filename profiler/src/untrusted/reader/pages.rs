//! Reading a process's memory through `/proc/PID/mem`, only where `/proc/PID/pagemap` says its
//! pages are present: what the reader process (see `reader`) does for the profiler's threads.
use std::{fs::File, os::unix::fs::FileExt as _};

/// Pages of `/proc/PID/pagemap`, and the bits of an entry that say a page is present, and a
/// page of a file (or shared memory).
pub(crate) const PAGE: u64 = 4096;
const PRESENT: u64 = 1 << 63;
const FILE: u64 = 1 << 61;
/// Pagemap entries looked at in one read, at most (a read of up to 2 MiB).
const MAX_PAGES: usize = 512;
/// Processes whose files are kept open.
const KEPT: usize = 16;

/// What a read came to.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The buffer holds the bytes.
    Read,
    /// That memory cannot be read, or a page of it is not present.
    Refused,
    /// Every page is present, and these many of them, listed first in the pages given, are pages
    /// of files (or shared memory): not read until their files are known to be the kernel's.
    FilePages(usize),
}

/// The `/proc` files of the processes read last, opened once each.
#[derive(Default)]
pub(super) struct Processes {
    /// The most recently read last.
    open: Vec<(u32, ProcFile, ProcFile)>,
}

impl Processes {
    /// Fills `buf` from `addr` of process `pid`, whole or not at all, if every page it spans is
    /// present: nothing is faulted in. Pages of files are read only if `files_allowed`; else
    /// they are listed in `file_pages` (as many as fit) and nothing is read.
    pub(super) fn read(
        &mut self,
        pid: u32,
        addr: u64,
        buf: &mut [u8],
        files_allowed: bool,
        file_pages: &mut [u64],
    ) -> Outcome {
        if buf.is_empty() {
            return Outcome::Read;
        }
        let at = match self.open.iter().position(|(open, ..)| *open == pid) {
            Some(at) => at,
            None => {
                if self.open.len() == KEPT {
                    self.open.remove(0);
                }
                let file = |name: &str| ProcFile::new(format!("/proc/{pid}/{name}"));
                self.open.push((pid, file("mem"), file("pagemap")));
                self.open.len() - 1
            }
        };
        let last = self.open.len() - 1;
        self.open.swap(at, last);
        let (_, mem, pagemap) = &mut self.open[last];
        match present(pagemap, addr, buf.len() as u64, files_allowed, file_pages) {
            Outcome::Read if mem.read_at(buf, addr) => Outcome::Read,
            Outcome::Read => Outcome::Refused,
            outcome => outcome,
        }
    }
}

/// Whether every page of `len` bytes at `addr` is present in memory ([`Outcome::Read`]), and
/// which are pages of files, unless `files_allowed`.
fn present(
    pagemap: &mut ProcFile,
    addr: u64,
    len: u64,
    files_allowed: bool,
    file_pages: &mut [u64],
) -> Outcome {
    let Some(last) = addr.checked_add(len - 1) else { return Outcome::Refused };
    let (first, last) = (addr / PAGE, last / PAGE);
    let mut entries = [0u8; 8 * MAX_PAGES];
    let mut files = 0;
    let mut page = first;
    while page <= last {
        let count = (last - page + 1).min(MAX_PAGES as u64) as usize;
        let entries = &mut entries[..8 * count];
        if !pagemap.read_at(entries, page * 8) {
            return Outcome::Refused;
        }
        for (entry, page) in entries.as_chunks::<8>().0.iter().zip(page..) {
            let entry = u64::from_le_bytes(*entry);
            if entry & PRESENT == 0 {
                return Outcome::Refused;
            }
            if entry & FILE != 0 && !files_allowed {
                if let Some(slot) = file_pages.get_mut(files) {
                    *slot = page * PAGE;
                }
                files += 1;
            }
        }
        page += count as u64;
    }
    match files {
        0 => Outcome::Read,
        files if files > file_pages.len() => Outcome::Refused,
        files => Outcome::FilePages(files),
    }
}

/// A file of a process's `/proc` directory, opened when first read.
struct ProcFile {
    path: String,
    file: Option<File>,
}

impl ProcFile {
    fn new(path: String) -> Self {
        Self { path, file: None }
    }

    /// Fills `buf` from `offset`, whole or not at all. A read of nothing at all from an
    /// address space gone (the process ran exec since, or exited, and its pid may be another's
    /// now) opens the file once more.
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> bool {
        for _ in 0..2 {
            if self.file.is_none() {
                let Ok(file) = File::open(&self.path) else { return false };
                self.file = Some(file);
            }
            let Some(file) = &self.file else { return false };
            match file.read_at(buf, offset) {
                Ok(read) if read == buf.len() => return true,
                Ok(0) if !buf.is_empty() => self.file = None,
                _ => return false,
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(processes: &mut Processes, addr: u64, buf: &mut [u8], files_allowed: bool) -> Outcome {
        processes.read(std::process::id(), addr, buf, files_allowed, &mut [0; 4])
    }

    #[test]
    fn pages_not_present_are_not_read() {
        let mut processes = Processes::default();
        let map = memmap2::MmapMut::map_anon(3 * PAGE as usize).unwrap();
        let start = map.as_ptr() as u64;
        let mut buf = [1u8; 16];
        assert_eq!(read(&mut processes, start, &mut buf, false), Outcome::Refused, "never touched");
        let mut map = map;
        map[PAGE as usize] = 7;
        assert_eq!(read(&mut processes, start + PAGE, &mut buf, false), Outcome::Read, "touched");
        assert_eq!(buf[0], 7);
        assert_eq!(
            read(&mut processes, start + PAGE - 8, &mut buf, false),
            Outcome::Refused,
            "across one not present"
        );
        assert_eq!(read(&mut processes, start, &mut [], false), Outcome::Read, "nothing to read");
    }

    #[test]
    fn pages_of_files_are_listed_unless_allowed() {
        let at = pages_of_files_are_listed_unless_allowed as *const () as u64;
        let mut processes = Processes::default();
        let (mut buf, mut pages) = ([0u8; 4], [0u64; 4]);
        let listed = processes.read(std::process::id(), at, &mut buf, false, &mut pages);
        assert_eq!(listed, Outcome::FilePages(1), "this test's own code, a page of its executable");
        assert_eq!(pages[0], at / PAGE * PAGE);
        assert_eq!(read(&mut processes, at, &mut buf, true), Outcome::Read);
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(exe.windows(4).any(|window| window == buf));
        let across = at / PAGE * PAGE + PAGE - 2;
        let none = processes.read(std::process::id(), across, &mut buf, false, &mut []);
        assert_eq!(none, Outcome::Refused, "more pages of files than may be listed");
    }

    #[test]
    fn the_files_of_the_processes_read_last_are_kept() {
        let mut processes = Processes::default();
        let word = 0x1234_5678_9abc_def0u64;
        let at = &word as *const u64 as u64;
        let mut buf = [0u8; 8];
        for pid in 1..=KEPT as u32 + 3 {
            processes.read(pid, 0, &mut buf, false, &mut []);
        }
        assert_eq!(read(&mut processes, at, &mut buf, false), Outcome::Read);
        assert_eq!(u64::from_le_bytes(buf), word);
        assert_eq!(processes.open.len(), KEPT);
        assert_eq!(processes.open.last().map(|(pid, ..)| *pid), Some(std::process::id()));
    }
}
