//! What the profiler knows of each sampled process: its command name and its address space.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::maps::{AddressSpace, Mapping};

/// Re-reading `/proc/PID/maps` costs ~0.1 ms; a process that keeps sampling addresses outside its
/// known mappings (a JIT, say) re-reads at most this often.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(20);

#[derive(Debug)]
pub struct Process {
    tgid: u32,
    comm: String,
    space: AddressSpace,
    refreshed_at: Instant,
    /// `/proc/PID` is gone: no more refreshes.
    gone: bool,
}

impl Process {
    fn load(tgid: u32, thread_comm: &str) -> Self {
        let comm = std::fs::read_to_string(format!("/proc/{tgid}/comm"))
            .map(|comm| comm.trim_end_matches('\n').to_owned())
            .unwrap_or_else(|_| thread_comm.to_owned());
        let space = AddressSpace::read(tgid);
        Self {
            tgid,
            comm,
            gone: space.is_err(),
            space: space.unwrap_or_default(),
            refreshed_at: Instant::now(),
        }
    }

    /// The process's command name (its main thread's).
    pub fn comm(&self) -> &str {
        &self.comm
    }

    /// The mapping containing `addr`, re-reading the maps once when the address is in none of
    /// them (a library loaded since the last read).
    pub fn mapping(&mut self, addr: u64) -> Option<&Mapping> {
        if self.space.find(addr).is_none()
            && !self.gone
            && self.refreshed_at.elapsed() >= MIN_REFRESH_INTERVAL
        {
            self.refresh();
        }
        self.space.find(addr)
    }

    fn refresh(&mut self) {
        self.refreshed_at = Instant::now();
        match AddressSpace::read(self.tgid) {
            Ok(space) => self.space = space,
            Err(_) => self.gone = true,
        }
    }
}

#[derive(Debug, Default)]
pub struct Processes {
    by_tgid: HashMap<u32, Process>,
}

impl Processes {
    /// The process a sample came from, loading it from /proc on first sight.
    pub fn observe(&mut self, tgid: u32, tid: u32, thread_comm: &str) -> &mut Process {
        let process = self
            .by_tgid
            .entry(tgid)
            .or_insert_with(|| Process::load(tgid, thread_comm));
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
        assert!(
            process
                .mapping(loads_a_live_process as *const () as usize as u64)
                .is_some()
        );
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
        assert!(process.mapping(0x1000).is_none());
    }
}
