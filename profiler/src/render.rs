//! Renderers: folded stacks and SVG flame graphs (inferno).
use std::{collections::BTreeMap, io::Write};

use inferno::flamegraph::{self, color::MultiPalette, color::Palette};

use crate::{
    profile::Profile,
    symbolize::{SymbolKind, Symbols},
};

/// Folded stacks: `root;outer;...;leaf` with the number of samples, sorted by stack. The root is
/// the process's command name; kernel frames end in `_[k]`, inlined ones in `_[i]`, JIT ones in
/// `_[j]` (the
/// conventions of perf + FlameGraph, which inferno's palettes colour).
pub type Folded = BTreeMap<String, u64>;

pub fn collapse(profile: &Profile, symbols: &Symbols) -> Folded {
    let mut folded = Folded::new();
    for (comm, stack, count) in profile.stack_counts() {
        let mut line = clean(profile.comm(comm));
        for frame in profile.stack(stack).iter().rev() {
            for symbol in symbols.of(frame) {
                line.push(';');
                line.push_str(&clean(&symbol.name));
                line.push_str(match symbol.kind {
                    SymbolKind::Function => "",
                    SymbolKind::Inlined => "_[i]",
                    SymbolKind::Kernel => "_[k]",
                    SymbolKind::Jit => "_[j]",
                });
            }
        }
        *folded.entry(line).or_default() += count;
    }
    folded
}

/// Frame names may not contain the separators of the folded format.
fn clean(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

pub fn write_folded(folded: &Folded, out: &mut dyn Write) -> std::io::Result<()> {
    for (stack, count) in folded {
        writeln!(out, "{stack} {count}")?;
    }
    Ok(())
}

/// Labels of a flame graph.
pub struct SvgOptions {
    pub title: String,
    pub subtitle: Option<String>,
}

pub fn write_svg(folded: &Folded, labels: &SvgOptions, out: &mut dyn Write) -> std::io::Result<()> {
    let mut options = flamegraph::Options::default();
    options.title = labels.title.clone();
    options.subtitle = labels.subtitle.clone();
    options.count_name = "samples".into();
    // The java palette colours by the `_[k]` / `_[i]` suffixes.
    options.colors = Palette::Multi(MultiPalette::Java);
    if folded.is_empty() {
        return write_empty_svg(labels, out);
    }
    let lines: Vec<String> = folded.iter().map(|(stack, count)| format!("{stack} {count}")).collect();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
}

/// inferno refuses empty input; an empty recording still gets a valid image that says so.
fn write_empty_svg(labels: &SvgOptions, out: &mut dyn Write) -> std::io::Result<()> {
    let escape = |text: &str| text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    writeln!(out, r#"<?xml version="1.0" standalone="no"?>"#)?;
    writeln!(out, r#"<svg version="1.1" width="1200" height="80" xmlns="http://www.w3.org/2000/svg">"#)?;
    writeln!(
        out,
        r#"<text x="600" y="24" text-anchor="middle" font-family="Verdana" font-size="17">{}</text>"#,
        escape(&labels.title)
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
        frame::Frame,
        symbolize::{Symbol, SymbolKind},
    };

    fn symbol(name: &str, kind: SymbolKind) -> Symbol {
        Symbol { name: name.into(), kind }
    }

    fn fixture() -> (Profile, Symbols) {
        let main = Frame::Anonymous { tgid: 1, addr: 0x10 };
        let work = Frame::Anonymous { tgid: 1, addr: 0x20 };
        let work_other_offset = Frame::Anonymous { tgid: 1, addr: 0x21 };
        let syscall = Frame::Kernel(0xffff_0000);
        let mut symbols = Symbols::default();
        symbols.insert(main, vec![symbol("main", SymbolKind::Function)]);
        symbols.insert(
            work,
            vec![
                symbol("work", SymbolKind::Function),
                symbol("std::vector<int>::push_back", SymbolKind::Inlined),
            ],
        );
        symbols.insert(
            work_other_offset,
            vec![
                symbol("work", SymbolKind::Function),
                symbol("std::vector<int>::push_back", SymbolKind::Inlined),
            ],
        );
        symbols.insert(syscall, vec![symbol("do_sys;weird", SymbolKind::Kernel)]);
        let mut profile = Profile::default();
        profile.add(1, 1, 1, "app", &[work, main]);
        profile.add(2, 1, 2, "app", &[work_other_offset, main]);
        profile.add(3, 1, 1, "app", &[syscall, main]);
        profile.add(4, 2, 2, "kworker/0:1", &[syscall]);
        (profile, symbols)
    }

    #[test]
    fn folds_root_first_with_suffixes() {
        let (profile, symbols) = fixture();
        let folded = collapse(&profile, &symbols);
        let lines: Vec<(&str, u64)> = folded.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        assert_eq!(
            lines,
            [
                ("app;main;do_sys:weird_[k]", 1),
                // Two offsets in the same function and inline chain merge into one line.
                ("app;main;work;std::vector<int>::push_back_[i]", 2),
                ("kworker/0:1;do_sys:weird_[k]", 1),
            ]
        );
    }

    #[test]
    fn folded_text_format() {
        let (profile, symbols) = fixture();
        let mut out = Vec::new();
        write_folded(&collapse(&profile, &symbols), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "app;main;do_sys:weird_[k] 1\napp;main;work;std::vector<int>::push_back_[i] 2\nkworker/0:1;do_sys:weird_[k] 1\n"
        );
    }

    #[test]
    fn svg_names_frames_and_title() {
        let (profile, symbols) = fixture();
        let labels = SvgOptions { title: "profiler: app".into(), subtitle: Some("4 samples".into()) };
        let mut out = Vec::new();
        write_svg(&collapse(&profile, &symbols), &labels, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("profiler: app") && svg.contains("4 samples"));
        assert!(svg.contains("kworker/0:1") && svg.contains("push_back"));
    }

    #[test]
    fn empty_profile_gives_a_valid_svg() {
        let labels = SvgOptions { title: "profiler: a < b".into(), subtitle: None };
        let mut out = Vec::new();
        write_svg(&Folded::new(), &labels, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.contains("no samples were recorded") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("profiler: a &lt; b"));
    }
}
