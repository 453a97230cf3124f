//! Output files, written atomically: the data goes to a temporary file next to the destination,
//! which is renamed over it once complete. The temporary file is created when the recording
//! starts, so an unwritable destination fails before anything is sampled, and an interrupted
//! write never leaves a half-written output.
use std::{
    fs::Permissions,
    io::{BufWriter, Write},
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use tempfile::NamedTempFile;

use crate::{
    recording::Recording,
    render::{self, Format, RenderOptions},
};

/// Creates every output file up front (so that a bad path fails before any work).
pub fn create_all(outputs: &[(PathBuf, Format)]) -> Result<Vec<(OutputFile, Format)>> {
    outputs.iter().map(|(path, format)| Ok((OutputFile::create(path)?, *format))).collect()
}

/// Renders the recording into each output and moves them into place.
pub fn write_all(
    outputs: Vec<(OutputFile, Format)>,
    recording: &Recording,
    options: &RenderOptions,
) -> Result<()> {
    for (file, format) in outputs {
        file.commit(|out| render::render(format, recording, options, out))?;
    }
    Ok(())
}

pub struct OutputFile {
    path: PathBuf,
    temp: NamedTempFile,
}

impl OutputFile {
    pub fn create(path: &Path) -> Result<Self> {
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        if path.is_dir() {
            anyhow::bail!("cannot write {}: it is a directory", path.display());
        }
        let temp = tempfile::Builder::new()
            .prefix(".profiler-")
            .tempfile_in(dir)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Self { path: path.to_owned(), temp })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the content with `write` and moves the file into place.
    pub fn commit(self, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
        let context = || format!("cannot write {}", self.path.display());
        let mut out = BufWriter::new(self.temp.as_file());
        write(&mut out).with_context(context)?;
        out.flush().with_context(context)?;
        drop(out);
        let file = self.temp.as_file();
        file.set_permissions(Permissions::from_mode(0o644)).with_context(context)?;
        hand_to_invoking_user(file);
        file.sync_all().with_context(context)?;
        self.temp.persist(&self.path).map_err(|err| err.error).with_context(context)?;
        Ok(())
    }
}

/// Under sudo, give the output to the user who ran sudo, as they would expect to own it.
fn hand_to_invoking_user(file: &std::fs::File) {
    let id = |name| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    if let (Some(uid), Some(gid)) = (id("SUDO_UID"), id("SUDO_GID")) {
        // Best effort: a filesystem without ownership (vfat, say) keeps root's.
        let _ = std::os::unix::fs::fchown(file, Some(uid), Some(gid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.folded");
        std::fs::write(&path, "old").unwrap();
        let output = OutputFile::create(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old", "untouched until commit");
        output.commit(|w| w.write_all(b"new\n")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file left behind");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
    }

    #[test]
    fn failed_write_keeps_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.svg");
        std::fs::write(&path, "old").unwrap();
        let output = OutputFile::create(&path).unwrap();
        let err = output.commit(|_| Err(std::io::Error::other("disk on fire"))).unwrap_err();
        assert!(format!("{err:#}").contains("disk on fire"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn missing_directory_fails_early() {
        let err = OutputFile::create(Path::new("/nonexistent-dir/x.svg")).err().unwrap();
        assert!(format!("{err:#}").starts_with("cannot write /nonexistent-dir/x.svg"), "{err:#}");
    }

    #[test]
    fn directory_as_output_fails() {
        let dir = tempfile::tempdir().unwrap();
        assert!(OutputFile::create(dir.path()).is_err());
    }
}
