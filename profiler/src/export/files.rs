//! `--output-dir`: a gzipped pprof per service and window, `SERVICE-UNIXTIME.pb.gz` (and
//! `SERVICE-off_cpu-UNIXTIME.pb.gz` with `--off-cpu`), mode 0600, written atomically in a
//! directory opened once (see `output::OutputDir`); the oldest of the agent's own files removed
//! beyond `--keep` files or `--keep-size` bytes. Another user's file, a link or anything not
//! named as the agent names its files is never removed.
use std::{
    ffi::{OsStr, OsString},
    path::Path,
};

use anyhow::Result;

use super::Window;
use crate::{model::Weight, output::OutputDir, render::pprof};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Retention {
    pub files: usize,
    pub bytes: u64,
}

#[derive(Debug)]
pub(super) struct Directory {
    dir: OutputDir,
    retention: Retention,
    /// The last failure said on stderr: a problem is said once, not once per window.
    last_error: Option<String>,
}

const SUFFIX: &str = ".pb.gz";

impl Directory {
    pub(super) fn open(path: &Path, retention: Retention) -> Result<Self> {
        Ok(Self { dir: OutputDir::create(path)?, retention, last_error: None })
    }

    pub(super) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes the window's profiles, then applies the retention.
    pub(super) fn write(&mut self, window: &Window) {
        let result = window
            .services
            .iter()
            .try_for_each(|(service, recording)| {
                let seconds = recording.meta.start_unix_ns / 1_000_000_000;
                let kind = if recording.meta.weight == Weight::OffCpuNs { "-off_cpu" } else { "" };
                let name = format!("{}{kind}-{seconds}{SUFFIX}", service.replace(['/', '\0'], "_"));
                let pending = self.dir.create_temp()?;
                pprof::write(recording, &mut pending.file())?;
                pending.commit(OsStr::new(&name), None)
            })
            .and_then(|()| self.retain());
        match result {
            Ok(()) => self.last_error = None,
            Err(err) => {
                let error = format!("{err:#}");
                if self.last_error.as_ref() != Some(&error) {
                    eprintln!("profiler agent: warning: cannot write to {}: {error}", self.path().display());
                }
                self.last_error = Some(error);
            }
        }
    }

    /// Removes the oldest profiles beyond the retention: only regular files of ours, named as
    /// the agent names them.
    fn retain(&self) -> Result<()> {
        let mut profiles: Vec<(i64, u64, OsString)> = self
            .dir
            .own_files()?
            .into_iter()
            .filter(|(name, ..)| is_profile_name(name))
            .map(|(name, mtime, size)| (mtime, size, name))
            .collect();
        profiles.sort_unstable_by(|a, b| b.cmp(a));
        let mut bytes = 0;
        for (index, (_, len, name)) in profiles.into_iter().enumerate() {
            bytes += len;
            if index >= self.retention.files || bytes > self.retention.bytes {
                self.dir.remove_own(&name)?;
            }
        }
        Ok(())
    }
}

/// Whether `name` is one the agent gives its profiles: `SERVICE[-off_cpu]-UNIXTIME.pb.gz`.
fn is_profile_name(name: &OsStr) -> bool {
    let Some(stem) = name.to_str().and_then(|name| name.strip_suffix(SUFFIX)) else { return false };
    stem.rsplit_once('-').is_some_and(|(service, seconds)| {
        !service.is_empty() && !seconds.is_empty() && seconds.bytes().all(|b| b.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_profile_names_are_the_agents() {
        for ours in ["nginx-1700000000.pb.gz", "my-app-off_cpu-1700000000.pb.gz"] {
            assert!(is_profile_name(OsStr::new(ours)), "{ours}");
        }
        for theirs in ["notes.txt", "-1700000000.pb.gz", "nginx-.pb.gz", "nginx-17x.pb.gz", ".profiler-0123"]
        {
            assert!(!is_profile_name(OsStr::new(theirs)), "{theirs}");
        }
    }
}
