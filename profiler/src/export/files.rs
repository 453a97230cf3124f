//! `--output-dir`: a gzipped pprof per service and window, `SERVICE-UNIXTIME.pb.gz` (and
//! `SERVICE-off_cpu-UNIXTIME.pb.gz` with `--off-cpu`), written
//! atomically; the oldest removed beyond `--keep` files or `--keep-size` bytes.
use std::{
    io::Write as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use super::Window;
use crate::{model::Weight, render::pprof};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub files: usize,
    pub bytes: u64,
}

#[derive(Debug)]
pub struct Directory {
    path: PathBuf,
    retention: Retention,
    /// The last failure said on stderr: a problem is said once, not once per window.
    last_error: Option<String>,
}

const SUFFIX: &str = ".pb.gz";

impl Directory {
    pub fn open(path: &Path, retention: Retention) -> Result<Self> {
        std::fs::create_dir_all(path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Self { path: path.to_owned(), retention, last_error: None })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the window's profiles, then applies the retention.
    pub fn write(&mut self, window: &Window) {
        let result = window
            .services
            .iter()
            .try_for_each(|(service, recording)| {
                let seconds = recording.meta.start_unix_ns / 1_000_000_000;
                let kind = if recording.meta.weight == Weight::OffCpuNs { "-off_cpu" } else { "" };
                let name = format!("{}{kind}-{seconds}{SUFFIX}", service.replace(['/', '\0'], "_"));
                let mut file = tempfile::NamedTempFile::new_in(&self.path)?;
                pprof::write(recording, &mut file)?;
                file.flush()?;
                // As `record`'s outputs: readable, as any profile of this host.
                file.as_file().set_permissions(std::fs::Permissions::from_mode(0o644))?;
                file.persist(self.path.join(name))?;
                Ok::<_, anyhow::Error>(())
            })
            .and_then(|()| self.retain());
        match result {
            Ok(()) => self.last_error = None,
            Err(err) => {
                let error = format!("{err:#}");
                if self.last_error.as_ref() != Some(&error) {
                    eprintln!("profiler agent: warning: cannot write to {}: {error}", self.path.display());
                }
                self.last_error = Some(error);
            }
        }
    }

    /// Removes the oldest profiles beyond the retention.
    fn retain(&self) -> Result<()> {
        let mut profiles: Vec<(std::time::SystemTime, u64, PathBuf)> = std::fs::read_dir(&self.path)?
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().ends_with(SUFFIX))
            .filter_map(|entry| {
                let metadata = entry.metadata().ok().filter(std::fs::Metadata::is_file)?;
                Some((metadata.modified().ok()?, metadata.len(), entry.path()))
            })
            .collect();
        profiles.sort_unstable_by(|a, b| b.cmp(a));
        let mut bytes = 0;
        for (index, (_, len, path)) in profiles.into_iter().enumerate() {
            bytes += len;
            if index >= self.retention.files || bytes > self.retention.bytes {
                std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
            }
        }
        Ok(())
    }
}
