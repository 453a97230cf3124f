//! Output formats, all rendered from a [`Recording`].
pub mod folded;
pub mod pprof;
pub mod speedscope;
pub mod svg;

use std::{io::Write, path::Path};

use clap::ValueEnum;

use crate::recording::{Recording, raw};

pub use self::folded::Grouping;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
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
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = self.to_possible_value().expect("no skipped variants");
        f.write_str(value.get_name())
    }
}

impl Format {
    /// The format an output path names by its extension.
    pub fn from_path(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        let format = match name.rsplit_once('.')?.1 {
            "svg" => Self::Svg,
            "folded" | "txt" => Self::Folded,
            "pprof" => Self::Pprof,
            "gz" if name.ends_with(".pb.gz") => Self::Pprof,
            "json" => Self::Speedscope,
            "prof" => Self::Raw,
            _ => return None,
        };
        Some(format)
    }
}

/// How to render: the root frames of folded stacks and flame graphs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenderOptions {
    pub grouping: Grouping,
}

pub fn render(
    format: Format,
    recording: &Recording,
    options: &RenderOptions,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    match format {
        Format::Svg => {
            svg::write(&folded::collapse(recording, options.grouping), &svg::labels(recording), out)
        }
        Format::Folded => folded::write(&folded::collapse(recording, options.grouping), out),
        Format::Pprof => pprof::write(recording, out),
        Format::Speedscope => speedscope::write(recording, out),
        Format::Raw => raw::write(recording, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_from_extension() {
        let format = |path: &str| Format::from_path(Path::new(path));
        assert_eq!(format("a/b.svg"), Some(Format::Svg));
        assert_eq!(format("out.folded"), Some(Format::Folded));
        assert_eq!(format("out.txt"), Some(Format::Folded));
        assert_eq!(format("cpu.pb.gz"), Some(Format::Pprof));
        assert_eq!(format("cpu.pprof"), Some(Format::Pprof));
        assert_eq!(format("x.speedscope.json"), Some(Format::Speedscope));
        assert_eq!(format("run.prof"), Some(Format::Raw));
        assert_eq!(format("out.gz"), None);
        assert_eq!(format("out"), None);
    }
}
