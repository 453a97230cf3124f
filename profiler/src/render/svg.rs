//! SVG flame graphs with inferno, and differential ones.
use std::io::{BufReader, Write};

use inferno::{
    differential,
    flamegraph::{self, color::MultiPalette, color::Palette},
};

use super::folded::{self, Folded};
use crate::model::{Recording, ThreadState, Weight};

/// The title, subtitle and unit name of a flame graph.
pub(crate) struct Titles {
    pub title: String,
    pub subtitle: Option<String>,
    /// What a frame's width counts: `samples`, `bytes`, `µs`.
    pub count_name: &'static str,
}

/// Title and subtitle for a recording: what, how many samples, how fast, how long, how complete.
pub(crate) fn titles(recording: &Recording) -> Titles {
    let meta = &recording.meta;
    match meta.weight {
        Weight::Bytes => return leak_titles(recording),
        Weight::OffCpuNs | Weight::WallNs => return time_titles(recording),
        Weight::Samples => {}
    }
    let mut subtitle = format!(
        "{} samples at {} Hz over {:.1} s",
        recording.sample_count(),
        meta.frequency_hz,
        meta.duration_ns as f64 / 1e9
    );
    let unwind = meta.unwind;
    if unwind.total() > 0 {
        let complete = unwind.complete + unwind.completed_with_frame_pointers;
        subtitle.push_str(&format!(
            ", {:.1}% of user stacks complete",
            100.0 * complete as f64 / unwind.total() as f64
        ));
    }
    Titles {
        title: format!("profiler: {}", meta.target),
        subtitle: Some(subtitle),
        count_name: meta.weight.unit(),
    }
}

/// Off-CPU and wall-clock profiles: thread time, in microseconds.
fn time_titles(recording: &Recording) -> Titles {
    let meta = &recording.meta;
    let seconds = |ns: u64| ns as f64 / 1e9;
    let by_state = |on_cpu: bool| {
        recording.samples.iter().filter(|s| (s.state == ThreadState::OnCpu) == on_cpu).map(|s| s.weight).sum()
    };
    let (what, subtitle) = match meta.weight {
        Weight::OffCpuNs => (
            "off-CPU time",
            format!(
                "{:.2} s off the CPU over {:.1} s; widths in microseconds",
                seconds(recording.total_weight()),
                seconds(meta.duration_ns)
            ),
        ),
        _ => (
            "wall-clock time",
            format!(
                "{:.2} s of thread time over {:.1} s: {:.2} s on the CPU, {:.2} s off; widths in microseconds",
                seconds(recording.total_weight()),
                seconds(meta.duration_ns),
                seconds(by_state(true)),
                seconds(by_state(false))
            ),
        ),
    };
    Titles {
        title: format!("profiler: {} ({what})", meta.target),
        subtitle: Some(subtitle),
        count_name: "µs",
    }
}

fn leak_titles(recording: &Recording) -> Titles {
    let subtitle = format!(
        "{} bytes in {} blocks outstanding after {:.1} s",
        recording.total_weight(),
        recording.sample_count(),
        recording.meta.duration_ns as f64 / 1e9
    );
    Titles {
        title: format!("profiler leaks: {}", recording.meta.target),
        subtitle: Some(subtitle),
        count_name: recording.meta.weight.unit(),
    }
}

fn options(titles: &Titles) -> flamegraph::Options<'static> {
    let mut options = flamegraph::Options::default();
    options.title = titles.title.clone();
    options.subtitle = titles.subtitle.clone();
    options.count_name = titles.count_name.into();
    // The java palette colours by the `_[k]`, `_[i]` and `_[j]` suffixes.
    options.colors = Palette::Multi(MultiPalette::Java);
    // Each frame's shade from a hash of its name, not a random draw: two flame graphs of one
    // program colour its functions alike, and a recording renders byte for byte the same.
    options.deterministic = true;
    options
}

pub(crate) fn write(folded: &Folded, titles: &Titles, out: &mut dyn Write) -> std::io::Result<()> {
    if folded.is_empty() {
        return write_empty(titles, out);
    }
    let lines: Vec<String> = folded.iter().map(|(stack, count)| format!("{stack} {count}")).collect();
    flamegraph::from_lines(&mut options(titles), lines.iter().map(String::as_str), out)
}

/// A differential flame graph: shaped like `after`, red where it grew since `before`, blue
/// where it shrank. With `normalize`, `before` is scaled to `after`'s sample count first.
pub(crate) fn write_diff(
    before: &Folded,
    after: &Folded,
    normalize: bool,
    titles: &Titles,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let text = |f: &Folded| {
        let mut bytes = Vec::new();
        folded::write(f, &mut bytes).map(|()| bytes)
    };
    let (before, after) = (text(before)?, text(after)?);
    let mut diff = Vec::new();
    let diff_options = differential::Options { normalize, ..Default::default() };
    differential::from_readers(
        diff_options,
        BufReader::new(&before[..]),
        BufReader::new(&after[..]),
        &mut diff,
    )?;
    if diff.is_empty() {
        return write_empty(titles, out);
    }
    flamegraph::from_reader(&mut options(titles), &diff[..], out)
}

/// inferno refuses empty input; an empty recording still gets a valid image that says so.
fn write_empty(titles: &Titles, out: &mut dyn Write) -> std::io::Result<()> {
    let escape = |text: &str| text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    writeln!(out, r#"<?xml version="1.0" standalone="no"?>"#)?;
    writeln!(out, r#"<svg version="1.1" width="1200" height="80" xmlns="http://www.w3.org/2000/svg">"#)?;
    writeln!(
        out,
        r#"<text x="600" y="24" text-anchor="middle" font-family="Verdana" font-size="17">{}</text>"#,
        escape(&titles.title)
    )?;
    writeln!(
        out,
        r#"<text x="600" y="56" text-anchor="middle" font-family="Verdana" font-size="12">no samples were recorded</text>"#
    )?;
    writeln!(out, "</svg>")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::tests::fixture,
        render::folded::{Grouping, collapse},
    };

    fn render(folded: &Folded, titles: &Titles) -> String {
        let mut out = Vec::new();
        write(folded, titles, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn names_frames_title_and_quality() {
        let mut recording = fixture();
        recording.meta.unwind.complete = 3;
        recording.meta.unwind.lost = 1;
        let svg = render(&collapse(&recording, Grouping::Command, None), &titles(&recording));
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("profiler: PID 10"));
        assert!(svg.contains("4 samples at 99 Hz over 1.0 s, 75.0% of user stacks complete"));
        assert!(svg.contains("push_back") && svg.contains("sys_read"));
    }

    #[test]
    fn empty_profile_gives_a_valid_svg() {
        let titles = Titles { title: "profiler: a < b".into(), subtitle: None, count_name: "samples" };
        let svg = render(&Folded::new(), &titles);
        assert!(svg.contains("no samples were recorded") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("profiler: a &lt; b"));
    }

    #[test]
    fn differential_graph() {
        let before: Folded = [("app;main;a".to_owned(), 60), ("app;main;b".to_owned(), 30)].into();
        let after: Folded = [("app;main;a".to_owned(), 30), ("app;main;b".to_owned(), 60)].into();
        let titles = Titles { title: "diff".into(), subtitle: None, count_name: "samples" };
        let mut out = Vec::new();
        write_diff(&before, &after, false, &titles, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        // Fill colour of the frame whose tooltip starts with `name (`.
        let fill = |name: &str| {
            let at = svg.find(&format!("<title>{name} (")).unwrap_or_else(|| panic!("no frame {name}"));
            let rgb = &svg[at..][svg[at..].find("fill=\"rgb(").unwrap() + 10..];
            let rgb: Vec<u8> = rgb[..rgb.find(')').unwrap()].split(',').map(|c| c.parse().unwrap()).collect();
            (rgb[0], rgb[1], rgb[2])
        };
        let (r, _, b) = fill("a");
        assert!(b == 255 && r < 255, "a shrank: blue, got {:?}", fill("a"));
        let (r, _, b) = fill("b");
        assert!(r == 255 && b < 255, "b grew: red, got {:?}", fill("b"));
    }
}
