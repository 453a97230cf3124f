//! Output files, written atomically: the data goes to a temporary file next to the destination,
//! which is renamed over it once complete. The temporary file is created when the recording
//! starts, so an unwritable destination fails before anything is sampled, and an interrupted
//! write never leaves a half-written output.
use std::{
    fs::{File, Permissions},
    io::{BufWriter, Write},
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};
use tempfile::NamedTempFile;

use crate::{
    model::Recording,
    render::{self, Format, RenderOptions},
};

/// The outputs asked for, each with its format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outputs(Vec<(PathBuf, Format)>);

impl Outputs {
    /// The outputs at `paths`, in `format` (a single output only), else in the format their
    /// extension names; `.txt` is `text`, anything else unknown an SVG flame graph.
    pub fn resolve(paths: &[PathBuf], format: Option<Format>, text: Format) -> Result<Self> {
        if format.is_some() && paths.len() > 1 {
            bail!("--format applies to a single output: name the formats of several by their extensions");
        }
        let format_of =
            |path: &PathBuf| format.or_else(|| Format::from_path(path, text)).unwrap_or(Format::Svg);
        Ok(Self(paths.iter().map(|path| (path.clone(), format_of(path))).collect()))
    }

    pub fn paths(&self) -> &[(PathBuf, Format)] {
        &self.0
    }

    /// Whether an output keeps each sample's time (a raw recording, speedscope's timelines).
    pub fn need_times(&self) -> bool {
        self.0.iter().any(|(_, format)| matches!(format, Format::Raw | Format::Speedscope))
    }

    /// Creates every output file up front, so that a bad path fails before any work.
    pub fn create(&self) -> Result<Vec<(OutputFile, Format)>> {
        self.0.iter().map(|(path, format)| Ok((OutputFile::create(path)?, *format))).collect()
    }
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
    /// The path as given, for messages.
    path: PathBuf,
    destination: Destination,
}

enum Destination {
    /// A regular file, or none yet: written to a temporary file in the same directory, renamed
    /// over the destination once complete.
    Replace { path: PathBuf, temp: NamedTempFile },
    /// A device, FIFO or socket (`/dev/null`, `/dev/stdout`, a named pipe): written in place,
    /// as renaming over it would replace the node itself. Opened only when written, so that a
    /// pipe's reader can come later.
    Stream(PathBuf),
}

impl OutputFile {
    pub fn create(path: &Path) -> Result<Self> {
        let context = || format!("cannot write {}", path.display());
        // A symbolic link stands for its target: the link stays, the target is replaced.
        let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        let destination = match std::fs::metadata(&resolved) {
            Ok(meta) if meta.is_dir() => anyhow::bail!("cannot write {}: it is a directory", path.display()),
            Ok(meta) if !meta.is_file() => {
                let writable =
                    std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&resolved);
                match writable {
                    // A FIFO without a reader yet is fine: it will have one by the end.
                    Err(err) if err.raw_os_error() != Some(libc::ENXIO) => {
                        return Err(err).with_context(context);
                    }
                    _ => Destination::Stream(resolved),
                }
            }
            _ => {
                let dir = match resolved.parent() {
                    Some(dir) if !dir.as_os_str().is_empty() => dir,
                    _ => Path::new("."),
                };
                let temp =
                    tempfile::Builder::new().prefix(".profiler-").tempfile_in(dir).with_context(context)?;
                Destination::Replace { path: resolved, temp }
            }
        };
        Ok(Self { path: path.to_owned(), destination })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the content with `write` and puts it in place.
    pub fn commit(self, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
        let context = || format!("cannot write {}", self.path.display());
        match self.destination {
            Destination::Stream(path) => {
                let file = std::fs::OpenOptions::new().write(true).open(path).with_context(context)?;
                write_buffered(&file, write).with_context(context)
            }
            Destination::Replace { path, temp } => {
                let file = temp.as_file();
                write_buffered(file, write).with_context(context)?;
                file.set_permissions(Permissions::from_mode(0o644)).with_context(context)?;
                hand_to_invoking_user(file);
                file.sync_all().with_context(context)?;
                temp.persist(&path).map_err(|err| err.error).with_context(context)?;
                Ok(())
            }
        }
    }
}

fn write_buffered(
    file: &File,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut out = BufWriter::new(file);
    write(&mut out)?;
    out.flush()
}

/// Under sudo, give the output to the user who ran sudo, as they would expect to own it.
fn hand_to_invoking_user(file: &File) {
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
    fn devices_are_written_in_place() {
        // Renaming a temporary file over /dev/null would turn it into a regular file.
        let output = OutputFile::create(Path::new("/dev/null")).unwrap();
        output.commit(|w| w.write_all(b"discarded")).unwrap();
        let meta = std::fs::metadata("/dev/null").unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_char_device(&meta.file_type()));
        assert_eq!(meta.len(), 0);
    }

    #[test]
    fn fifo_gets_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let output = OutputFile::create(&fifo).unwrap();
        let reader = std::thread::spawn({
            let fifo = fifo.clone();
            move || std::fs::read_to_string(fifo).unwrap()
        });
        output.commit(|w| w.write_all(b"through the pipe")).unwrap();
        assert_eq!(reader.join().unwrap(), "through the pipe");
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(
            &std::fs::symlink_metadata(&fifo).unwrap().file_type()
        ));
    }

    #[test]
    fn symlinks_keep_pointing_at_the_new_content() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.folded");
        let link = dir.path().join("link.folded");
        std::fs::write(&real, "old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        OutputFile::create(&link).unwrap().commit(|w| w.write_all(b"new")).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
    }

    #[test]
    fn directory_as_output_fails() {
        let dir = tempfile::tempdir().unwrap();
        assert!(OutputFile::create(dir.path()).is_err());
    }
}
