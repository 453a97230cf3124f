//! What the profiler knows of each sampled process: its command name and its address space.
use std::collections::HashMap;

use crate::maps::{AddressSpace, Mapping};

#[derive(Debug)]
pub struct Process {
    tgid: u32,
    comm: String,
    space: AddressSpace,
    /// CLOCK_MONOTONIC time of the last read of the maps, in the samples' time base.
    read_at_ns: u64,
    /// `/proc/PID` is gone: no more reads.
    gone: bool,
}

impl Process {
    fn load(tgid: u32, thread_comm: &str) -> Self {
        let comm = std::fs::read_to_string(format!("/proc/{tgid}/comm"))
            .map(|comm| comm.trim_end_matches('\n').to_owned())
            .unwrap_or_else(|_| thread_comm.to_owned());
        let read_at_ns = monotonic_ns();
        let space = AddressSpace::read(tgid);
        Self { tgid, comm, gone: space.is_err(), space: space.unwrap_or_default(), read_at_ns }
    }

    /// The process's command name (its main thread's).
    pub fn comm(&self) -> &str {
        &self.comm
    }

    /// The mapping that contained `addr` at `sample_time_ns`. When the address is in no known
    /// mapping and the sample is newer than the maps we hold (a library loaded since), the maps
    /// are read again. Older samples cannot be helped by a new read, so garbage addresses cost
    /// at most one read per sample.
    pub fn mapping(&mut self, addr: u64, sample_time_ns: u64) -> Option<&Mapping> {
        if self.space.find(addr).is_none() && !self.gone && sample_time_ns > self.read_at_ns {
            self.refresh();
        }
        self.space.find(addr)
    }

    fn refresh(&mut self) {
        self.read_at_ns = monotonic_ns();
        match AddressSpace::read(self.tgid) {
            Ok(space) => self.space = space,
            Err(_) => self.gone = true,
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`, hence of sample times.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[derive(Debug, Default)]
pub struct Processes {
    by_tgid: HashMap<u32, Process>,
}

impl Processes {
    /// The process a sample came from, loading it from /proc on first sight.
    pub fn observe(&mut self, tgid: u32, tid: u32, thread_comm: &str) -> &mut Process {
        let process = self.by_tgid.entry(tgid).or_insert_with(|| Process::load(tgid, thread_comm));
        // The main thread's name is the process's: it changes at exec.
        if tid == tgid && process.comm != thread_comm {
            process.comm = thread_comm.to_owned();
        }
        process
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_a_live_process() {
        let pid = std::process::id();
        let mut processes = Processes::default();
        let process = processes.observe(pid, pid + 1, "thread-name");
        let expected = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_eq!(process.comm(), expected.trim_end());
        let here = loads_a_live_process as *const () as usize as u64;
        assert!(process.mapping(here, 0).is_some());
        assert_eq!(processes.by_tgid.len(), 1);
    }

    #[test]
    fn main_thread_comm_wins() {
        let pid = std::process::id();
        let mut processes = Processes::default();
        processes.observe(pid, pid, "renamed");
        assert_eq!(processes.observe(pid, pid + 1, "other").comm(), "renamed");
    }

    #[test]
    fn exited_process_keeps_sample_comm() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let mut processes = Processes::default();
        let process = processes.observe(pid, pid + 1, "true");
        assert_eq!(process.comm(), "true");
        assert!(process.mapping(0x1000, u64::MAX).is_none());
    }

    #[test]
    fn newer_samples_see_new_mappings() {
        let pid = std::process::id();
        let mut processes = Processes::default();
        let process = processes.observe(pid, pid, "test");
        // A mapping made after the process was first read.
        // SAFETY: a fresh anonymous mapping, unmapped below.
        let len = 4096;
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as u64;
        assert!(process.mapping(addr, 0).is_none(), "an older sample does not trigger a read");
        assert!(process.mapping(addr, monotonic_ns()).is_some(), "a newer one does");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(addr as *mut libc::c_void, len) };
    }
}
