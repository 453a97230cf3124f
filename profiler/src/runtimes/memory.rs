//! A target process's memory, as the runtimes read it: through `/proc/PID/mem`, a read at a
//! time, each either whole or refused.
use std::{fs::File, os::unix::fs::FileExt as _};

use crate::model::Tgid;

/// A process's memory, through `/proc/PID/mem`, opened when first read.
pub struct ProcessMemory {
    tgid: Tgid,
    file: Option<File>,
}

impl ProcessMemory {
    pub fn new(tgid: Tgid) -> Self {
        Self { tgid, file: None }
    }

    /// Fills `buf` from `addr`; false if that memory cannot be read.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
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
