//! Output formats, all rendered from a [`Recording`].
pub mod folded;
pub(crate) mod hot_functions;
pub(crate) mod leak_report;
pub(crate) mod pprof;
pub(crate) mod profile_tables;
pub(crate) mod speedscope;
pub(crate) mod svg;

use std::{fmt, io::Write, path::Path};

use crate::{
    model::{Recording, raw},
    named::Named,
};

pub use self::folded::Grouping;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Interactive flame graph (inferno).
    Svg,
    /// Folded stacks, one `root;frame;...;leaf COUNT` line per distinct stack.
    Folded,
    /// gzipped pprof profile.proto (go tool pprof, Pyroscope, Parca).
    Pprof,
    /// speedscope JSON: one sampled profile per thread, in time order.
    Speedscope,
    /// Raw recording, to render again later with `profiler report`.
    Raw,
    /// The text report of outstanding blocks by stack (`profiler leaks`).
    LeakReport,
}

impl Named for Format {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("svg", Self::Svg),
        ("folded", Self::Folded),
        ("pprof", Self::Pprof),
        ("speedscope", Self::Speedscope),
        ("raw", Self::Raw),
        ("leak-report", Self::LeakReport),
    ];
}

impl Format {
    /// The format an output path names by its extension; `.txt` names `text`, which differs by
    /// command (folded stacks for CPU profiles, the report for leaks).
    pub fn from_path(path: &Path, text: Format) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        let format = match name.rsplit_once('.')?.1 {
            "svg" => Self::Svg,
            "folded" => Self::Folded,
            "txt" => text,
            "pprof" => Self::Pprof,
            "gz" if name.ends_with(".pb.gz") => Self::Pprof,
            "json" => Self::Speedscope,
            "prof" => Self::Raw,
            _ => return None,
        };
        Some(format)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How to render: the root frames of folded stacks and flame graphs, the stacks of a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderOptions {
    pub grouping: Grouping,
    /// A frame under the root for the value of this label (`--by-label`).
    pub by_label: Option<String>,
    /// Stacks listed by the leak report, most bytes first.
    pub top: usize,
    /// Whether Python frames keep their line (`--no-lines`: one frame per function, as py-spy's
    /// `--nolineno`). Raw recordings keep it whatever this says: `report` can drop it later.
    pub lines: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self { grouping: Grouping::default(), by_label: None, top: 10, lines: true }
    }
}

pub fn render(
    format: Format,
    recording: &Recording,
    options: &RenderOptions,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let without_lines;
    let recording = if options.lines || format == Format::Raw {
        recording
    } else {
        without_lines = recording.without_script_lines();
        &without_lines
    };
    match format {
        Format::Svg => svg::write(&collapse(recording, options), &svg::titles(recording), out),
        Format::Folded => folded::write(&collapse(recording, options), out),
        Format::Pprof => pprof::write(recording, out),
        Format::Speedscope => speedscope::write(recording, out),
        Format::Raw => raw::write(recording, out),
        Format::LeakReport => leak_report::write(recording, options.top, out),
    }
}

/// The folded stacks of `recording` as `options` group them.
fn collapse(recording: &Recording, options: &RenderOptions) -> folded::Folded {
    folded::collapse(recording, options.grouping, options.by_label.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_from_extension() {
        let format = |path: &str| Format::from_path(Path::new(path), Format::Folded);
        assert_eq!(format("a/b.svg"), Some(Format::Svg));
        assert_eq!(format("out.folded"), Some(Format::Folded));
        assert_eq!(format("out.txt"), Some(Format::Folded));
        assert_eq!(Format::from_path(Path::new("out.txt"), Format::LeakReport), Some(Format::LeakReport));
        assert_eq!(format("cpu.pb.gz"), Some(Format::Pprof));
        assert_eq!(format("cpu.pprof"), Some(Format::Pprof));
        assert_eq!(format("x.speedscope.json"), Some(Format::Speedscope));
        assert_eq!(format("run.prof"), Some(Format::Raw));
        assert_eq!(format("out.gz"), None);
        assert_eq!(format("out"), None);
    }

    fn recorded(name: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recording").join(name);
        std::fs::read(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }

    fn rendered(recording: &Recording, format: Format, options: &RenderOptions) -> Vec<u8> {
        let mut out = Vec::new();
        render(format, recording, options, &mut out).unwrap();
        out
    }

    /// Recordings kept from an earlier build, with what it rendered from them (see the fixtures'
    /// README): every format renders them byte for byte the same.
    #[test]
    fn recorded_fixtures_render_as_they_did() {
        for name in ["cpu", "leaks"] {
            let raw = recorded(&format!("{name}.prof"));
            let recording = raw::read(&mut &raw[..]).unwrap();
            let options = RenderOptions::default();
            for (extension, format) in [
                ("folded", Format::Folded),
                ("svg", Format::Svg),
                ("pb.gz", Format::Pprof),
                ("json", Format::Speedscope),
            ] {
                let expected = recorded(&format!("{name}.{extension}"));
                assert!(rendered(&recording, format, &options) == expected, "{name}.{extension} differs");
            }
            assert!(rendered(&recording, Format::Raw, &options) == raw, "{name}.prof written again differs");
        }
        let recording = raw::read(&mut &recorded("cpu.prof")[..]).unwrap();
        let filtered =
            recording.filtered(&crate::model::filter::Filter { no_kernel: true, ..Default::default() });
        let options = RenderOptions { grouping: Grouping::Thread, ..RenderOptions::default() };
        assert_eq!(
            String::from_utf8(rendered(&filtered, Format::Folded, &options)).unwrap(),
            String::from_utf8(recorded("cpu-threads-user.folded")).unwrap()
        );
    }

    #[test]
    fn flame_graphs_of_one_recording_colour_alike() {
        let recording = raw::read(&mut &recorded("cpu.prof")[..]).unwrap();
        let first = rendered(&recording, Format::Svg, &RenderOptions::default());
        assert!(rendered(&recording, Format::Svg, &RenderOptions::default()) == first);
    }

    #[test]
    fn names_round_trip() {
        for &(name, format) in Format::NAMES {
            assert_eq!((format.name(), Format::from_name(name)), (name, Some(format)));
        }
        assert_eq!(Format::from_name("bogus"), None);
    }
}
