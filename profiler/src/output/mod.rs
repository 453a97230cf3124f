//! Output files, written atomically: the data goes to a temporary file in the destination's
//! directory, which is renamed over the destination once complete ([`directory`]: how, safely,
//! as root, in directories other users may write to). The temporary file is created when the
//! recording starts, so an unwritable destination fails before anything is sampled, and an
//! interrupted write never leaves a half-written output. `-` is standard output.
mod directory;

use std::{
    ffi::OsString,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

pub(crate) use self::directory::{OutputDir, PendingFile};
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
            let named = if path.as_os_str() == STDOUT { Some(text) } else { Format::from_path(path, text) };
            format.or(named).with_context(|| {
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
pub(crate) fn write_all(
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

/// What `-o` names for standard output.
const STDOUT: &str = "-";

pub struct OutputFile {
    /// The path as given, for messages.
    path: PathBuf,
    place: Place,
}

/// Where an output goes.
enum Place {
    /// A file, new or replaced, written in place by a rename, given `owner`.
    File {
        pending: PendingFile,
        name: OsString,
        owner: Option<(u32, u32)>,
    },
    Stdout,
}

impl OutputFile {
    pub fn create(path: &Path) -> Result<Self> {
        if path.as_os_str() == STDOUT {
            return Ok(Self { path: path.to_owned(), place: Place::Stdout });
        }
        let Some(name) = path.file_name().filter(|_| !path.as_os_str().as_encoded_bytes().ends_with(b"/"))
        else {
            bail!("cannot write {}: it names a directory, not a file", path.display());
        };
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let context = || format!("cannot write {}", path.display());
        let dir = OutputDir::open(dir).with_context(context)?;
        dir.check_replaceable(name).with_context(context)?;
        let pending = dir.create_temp().with_context(context)?;
        let owner = invoking_user().filter(|(uid, _)| dir.stat().is_ok_and(|stat| stat.st_uid == *uid));
        Ok(Self { path: path.to_owned(), place: Place::File { pending, name: name.to_owned(), owner } })
    }

    /// Writes the content with `write` and puts it in place.
    pub fn commit(self, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
        let context = || format!("cannot write {}", self.path.display());
        match self.place {
            Place::Stdout => write_buffered(&mut std::io::stdout().lock(), write).with_context(context),
            Place::File { pending, name, owner } => {
                write_buffered(&mut pending.file(), write).with_context(context)?;
                pending.commit(&name, owner).with_context(context)
            }
        }
    }
}

fn write_buffered(
    out: &mut impl Write,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut out = BufWriter::new(out);
    write(&mut out)?;
    out.flush()
}

/// The user (and group) who ran sudo, if sudo ran us: a new output in a directory of theirs is
/// theirs, as they would expect; anywhere else it stays root's.
fn invoking_user() -> Option<(u32, u32)> {
    let id = |name| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    id("SUDO_UID").zip(id("SUDO_GID"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

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
        assert_eq!(mode & 0o7777, 0o600, "outputs are private: they hold kernel addresses");
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
    fn nothing_but_a_regular_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let (real, link, fifo) =
            (dir.path().join("real"), dir.path().join("link.svg"), dir.path().join("pipe"));
        std::fs::write(&real, "old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mode = rustix::fs::Mode::from_raw_mode(0o600);
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, mode, 0).unwrap();
        for (path, why) in [
            (&link, "is a symbolic link"),
            (&fifo, "is a FIFO"),
            (&PathBuf::from("/dev/null"), "is a device"),
        ] {
            let err = OutputFile::create(path).err().unwrap();
            assert!(format!("{err:#}").contains(why), "{err:#}");
        }
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "old");
    }

    #[test]
    fn a_link_planted_while_recording_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let (real, out) = (dir.path().join("real"), dir.path().join("out.folded"));
        std::fs::write(&real, "old").unwrap();
        let output = OutputFile::create(&out).unwrap();
        std::os::unix::fs::symlink(&real, &out).unwrap();
        let err = output.commit(|w| w.write_all(b"new")).unwrap_err();
        assert!(format!("{err:#}").contains("is a symbolic link"), "{err:#}");
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "the temporary file is gone");
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
    fn a_dash_is_standard_output_in_the_text_format() {
        let outputs = Outputs::resolve(&[PathBuf::from("-")], None, Format::LeakReport).unwrap();
        assert_eq!(outputs.paths(), [(PathBuf::from("-"), Format::LeakReport)]);
        let outputs = Outputs::resolve(&[PathBuf::from("-")], Some(Format::Pprof), Format::Folded).unwrap();
        assert_eq!(outputs.paths(), [(PathBuf::from("-"), Format::Pprof)]);
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
