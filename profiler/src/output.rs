//! Output files, written atomically: the data goes to a temporary file next to the destination,
//! which is renamed over it once complete. The temporary file is created when the recording
//! starts, so an unwritable destination fails before anything is sampled, and an interrupted
//! write never leaves a half-written output.
use std::{
    fs::{File, Permissions},
    io::{BufWriter, Write},
    os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use tempfile::NamedTempFile;

use crate::{
    aggregate::Detail,
    model::Recording,
    render::{self, Format, Grouping, RenderOptions},
};

/// The outputs asked for, each with its format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outputs(Vec<(PathBuf, Format)>);

impl Outputs {
    /// The outputs at `paths`, in `format` (a single output only), else in the format their
    /// extension names; `.txt` is `text`. An extension that names no format is an error (a
    /// typo must not turn into an SVG called `run.pprf`).
    pub fn resolve(paths: &[PathBuf], format: Option<Format>, text: Format) -> Result<Self> {
        if format.is_some() && paths.len() > 1 {
            bail!("--format applies to a single output: name the formats of several by their extensions");
        }
        let format_of = |path: &PathBuf| {
            format.or_else(|| Format::from_path(path, text)).with_context(|| {
                format!(
                    "{}: unknown output format; name it .svg, .folded or .txt, .pb.gz or .pprof, .json (speedscope) \
                     or .prof (raw recording), or give --format",
                    path.display()
                )
            })
        };
        Ok(Self(paths.iter().map(|path| Ok((path.clone(), format_of(path)?))).collect::<Result<_>>()?))
    }

    pub fn paths(&self) -> &[(PathBuf, Format)] {
        &self.0
    }

    /// What the outputs need of each sample: its time (a raw recording, speedscope's
    /// timelines), its process and thread (pprof's labels, flame graphs rooted per process or
    /// thread).
    pub fn detail(&self, grouping: Grouping) -> Detail {
        let any = |wanted: &[Format]| self.0.iter().any(|(_, format)| wanted.contains(format));
        if any(&[Format::Raw, Format::Speedscope]) {
            return Detail::ALL;
        }
        let grouped = any(&[Format::Svg, Format::Folded]);
        Detail {
            time: false,
            process: any(&[Format::Pprof]) || (grouped && grouping == Grouping::Process),
            thread: any(&[Format::Pprof]) || (grouped && grouping == Grouping::Thread),
        }
    }

    /// Creates every output file up front, so that a bad path fails before any work.
    pub fn create(&self) -> Result<Vec<(OutputFile, Format)>> {
        self.0.iter().map(|(path, format)| Ok((OutputFile::create(path)?, *format))).collect()
    }
}

/// Renders the recording into each output and moves them into place. Every output is tried,
/// whatever happened to the ones before (a full disk for a flame graph must not cost the raw
/// recording); each failure is said on stderr, and the first one returned.
pub fn write_all(
    outputs: Vec<(OutputFile, Format)>,
    recording: &Recording,
    options: &RenderOptions,
) -> Result<()> {
    let mut failures = Vec::new();
    for (file, format) in outputs {
        if let Err(err) = file.commit(|out| render::render(format, recording, options, out)) {
            failures.push(err);
        }
    }
    let count = failures.len();
    let mut failures = failures.into_iter();
    let Some(first) = failures.next() else { return Ok(()) };
    for later in failures {
        eprintln!("profiler: error: {later:#}");
    }
    Err(first.context(format!("{count} output{} could not be written", if count == 1 { "" } else { "s" })))
}

pub struct OutputFile {
    /// The path as given, for messages.
    path: PathBuf,
    destination: Destination,
}

enum Destination {
    /// A regular file, or none yet: written to a temporary file in the same directory, renamed
    /// over the destination once complete, and given `owner`.
    Replace { path: PathBuf, temp: NamedTempFile, owner: Owner },
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
            existing => {
                let dir = match resolved.parent() {
                    Some(dir) if !dir.as_os_str().is_empty() => dir,
                    _ => Path::new("."),
                };
                let temp =
                    tempfile::Builder::new().prefix(".profiler-").tempfile_in(dir).with_context(context)?;
                let owner = match existing {
                    Ok(replaced) => Owner::of(&replaced),
                    Err(_) => Owner::for_new_file_in(dir, invoking_user()),
                };
                Destination::Replace { path: resolved, temp, owner }
            }
        };
        Ok(Self { path: path.to_owned(), destination })
    }

    /// Writes the content with `write` and puts it in place.
    pub fn commit(self, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
        let context = || format!("cannot write {}", self.path.display());
        match self.destination {
            Destination::Stream(path) => {
                let file = open_stream(&path).with_context(context)?;
                write_buffered(&file, write).with_context(context)
            }
            Destination::Replace { path, temp, owner } => {
                let file = temp.as_file();
                write_buffered(file, write).with_context(context)?;
                owner.apply(file).with_context(context)?;
                file.sync_all().with_context(context)?;
                temp.persist(&path).map_err(|err| err.error).with_context(context)?;
                Ok(())
            }
        }
    }
}

/// How long a FIFO's reader may take to come, once the output is ready.
const READER_WAIT: Duration = Duration::from_secs(5);

/// Opens a device, FIFO or socket for writing. A FIFO whose reader never comes must not hold
/// the profiler: it is opened without blocking, which fails (ENXIO) while there is no reader,
/// tried again for [`READER_WAIT`]; once open, writes wait for the reader as usual.
fn open_stream(path: &Path) -> std::io::Result<File> {
    let deadline = Instant::now() + READER_WAIT;
    let file = loop {
        match std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(path) {
            Err(err) if err.raw_os_error() == Some(libc::ENXIO) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(err) if err.raw_os_error() == Some(libc::ENXIO) => {
                return Err(std::io::Error::new(err.kind(), "no reader came to the pipe"));
            }
            opened => break opened?,
        }
    };
    rustix::fs::fcntl_setfl(&file, rustix::fs::OFlags::empty())?;
    Ok(file)
}

fn write_buffered(
    file: &File,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut out = BufWriter::new(file);
    write(&mut out)?;
    out.flush()
}

/// The user (and group) who ran sudo, if sudo ran us.
fn invoking_user() -> Option<(u32, u32)> {
    let id = |name| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    id("SUDO_UID").zip(id("SUDO_GID"))
}

/// Who owns an output and what its mode is: set on the temporary file we created (through its
/// descriptor) before it takes the output's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Owner {
    ids: Option<(u32, u32)>,
    mode: u32,
}

impl Owner {
    /// A file replacing `replaced` keeps its owner and mode: a symbolic link planted at the
    /// output path cannot hand whoever planted it the file it points to.
    fn of(replaced: &std::fs::Metadata) -> Self {
        Self { ids: Some((replaced.uid(), replaced.gid())), mode: replaced.mode() & 0o7777 }
    }

    /// A new file in `dir`. Under sudo (`invoker`) it goes to the user who ran sudo when `dir` is
    /// theirs (as they would expect to own it); otherwise to whoever runs the profiler.
    fn for_new_file_in(dir: &Path, invoker: Option<(u32, u32)>) -> Self {
        let dir_owner = std::fs::metadata(dir).map(|meta| meta.uid()).ok();
        Self { ids: invoker.filter(|(uid, _)| Some(*uid) == dir_owner), mode: 0o644 }
    }

    fn apply(self, file: &File) -> std::io::Result<()> {
        if let Some((uid, gid)) = self.ids {
            // Best effort: a filesystem without ownership (vfat, say) keeps root's.
            let _ = std::os::unix::fs::fchown(file, Some(uid), Some(gid));
        }
        file.set_permissions(Permissions::from_mode(self.mode))
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
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
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

    #[test]
    fn a_failing_output_does_not_stop_the_others() {
        let (gone, kept) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let outputs = Outputs::resolve(
            &[gone.path().join("first.svg"), kept.path().join("second.folded")],
            None,
            Format::Folded,
        )
        .unwrap();
        let files = outputs.create().unwrap();
        // The first output's directory disappears while recording: its file cannot be put there.
        std::fs::remove_dir_all(gone.path()).unwrap();
        let recording = crate::model::tests::fixture();
        let err = write_all(files, &recording, &RenderOptions::default()).unwrap_err();
        assert!(format!("{err:#}").starts_with("1 output could not be written: cannot write"), "{err:#}");
        let written = std::fs::read_to_string(kept.path().join("second.folded")).unwrap();
        assert!(written.contains("app;main;hot 2"), "{written}");
    }

    #[test]
    fn a_symlink_cannot_hand_over_what_it_points_to() {
        let dir = tempfile::tempdir().unwrap();
        let (real, link) = (dir.path().join("protected"), dir.path().join("out.svg"));
        std::fs::write(&real, "old").unwrap();
        std::fs::set_permissions(&real, Permissions::from_mode(0o640)).unwrap();
        let before = std::fs::metadata(&real).unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        OutputFile::create(&link).unwrap().commit(|w| w.write_all(b"new")).unwrap();
        let after = std::fs::metadata(&real).unwrap();
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
        assert_eq!((after.uid(), after.gid(), after.mode() & 0o7777), (before.uid(), before.gid(), 0o640));
    }

    #[test]
    fn new_files_go_to_the_sudo_user_in_their_own_directory_only() {
        let dir = tempfile::tempdir().unwrap();
        let owner = std::fs::metadata(dir.path()).unwrap().uid();
        let in_theirs = Owner::for_new_file_in(dir.path(), Some((owner, 7)));
        assert_eq!(in_theirs, Owner { ids: Some((owner, 7)), mode: 0o644 });
        let in_someone_elses = Owner::for_new_file_in(dir.path(), Some((owner + 1, 7)));
        assert_eq!(in_someone_elses, Owner { ids: None, mode: 0o644 });
    }

    #[test]
    fn a_fifo_without_a_reader_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let err = OutputFile::create(&fifo).unwrap().commit(|w| w.write_all(b"lost")).unwrap_err();
        assert!(format!("{err:#}").contains("no reader came"), "{err:#}");
    }

    #[test]
    fn outputs_say_what_they_need_of_each_sample() {
        let detail = |paths: &[&str], grouping| {
            let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
            Outputs::resolve(&paths, None, Format::Folded).unwrap().detail(grouping)
        };
        let nothing = Detail::default();
        assert_eq!(detail(&["a.svg", "a.folded"], Grouping::Command), nothing);
        assert_eq!(detail(&["a.svg"], Grouping::Process), Detail { process: true, ..nothing });
        assert_eq!(detail(&["a.folded"], Grouping::Thread), Detail { thread: true, ..nothing });
        assert_eq!(
            detail(&["a.pb.gz"], Grouping::Command),
            Detail { process: true, thread: true, ..nothing }
        );
        assert_eq!(detail(&["a.svg", "a.prof"], Grouping::Command), Detail::ALL);
        assert_eq!(detail(&["a.json"], Grouping::Command), Detail::ALL);
    }
}
