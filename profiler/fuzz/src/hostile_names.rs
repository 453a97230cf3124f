//! Names of any bytes (functions, inlined functions, source files, command names, module paths,
//! labels, as a target or a crafted `.prof` could give them) through a raw recording and back: every
//! format stays valid. SVG parses as XML, each folded line is its frames and one count,
//! speedscope parses as JSON, pprof decodes, and the text report holds no control character
//! but line breaks.

use std::io::Read as _;

use profiler::{
    Format, Location, Meta, ModuleInfo, Recording, RenderOptions, Sample, SourceLine, Symbol, SymbolKind,
    Tgid, ThreadState, Tid, pprof, raw, render,
};
use prost::Message as _;

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    let names: Vec<String> =
        data.split(|&byte| byte == 0xff).map(|name| String::from_utf8_lossy(name).into_owned()).collect();
    let recording = raw::read(&mut &written(&names)[..]).expect("a recording written reads back");
    let by_label = RenderOptions { by_label: Some(names[0].clone()), ..RenderOptions::default() };
    let rendered_as = |format, options: &RenderOptions| {
        let mut out = Vec::new();
        render(format, &recording, options, &mut out).unwrap();
        out
    };
    let rendered = |format| rendered_as(format, &RenderOptions::default());

    let folded = String::from_utf8(rendered_as(Format::Folded, &by_label)).unwrap();
    for line in folded.lines() {
        let (stack, count) = line.rsplit_once(' ').expect("a count");
        count.parse::<u64>().expect("the count is a number");
        let frames: Vec<&str> = stack.split(';').collect();
        // The command name, the label's value, the caller, the function inlined in it, the leaf.
        assert_eq!(frames.len(), 5, "{line:?}");
        assert!(frames.iter().all(|frame| !frame.is_empty()), "{line:?}");
        let last = stack.rsplit_once(' ').map_or("", |(_, last)| last);
        assert!(
            last.is_empty() || !last.chars().all(|c| c.is_ascii_digit() || c == '.'),
            "a second count: {line:?}"
        );
    }

    let svg = String::from_utf8(rendered(Format::Svg)).unwrap();
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    roxmltree::Document::parse_with_options(&svg, options).expect("the SVG is XML");

    serde_json::from_slice::<serde_json::Value>(&rendered(Format::Speedscope)).expect("speedscope is JSON");

    let mut encoded = Vec::new();
    flate2::read::GzDecoder::new(&rendered(Format::Pprof)[..]).read_to_end(&mut encoded).unwrap();
    pprof::Profile::decode(&encoded[..]).expect("pprof decodes");

    let report = String::from_utf8(rendered(Format::LeakReport)).unwrap();
    assert!(!report.chars().any(|c| c.is_control() && c != '\n'), "{report:?}");
}

/// A raw recording with one sample per name: the name is its command, the caller's function
/// and the function inlined there, the leaf function called from it, their source file, the
/// modules' path, and the value of its label (whose key is the first name).
fn written(names: &[String]) -> Vec<u8> {
    let symbol = |name: &String, kind| {
        Symbol::new(name.clone(), kind).at(Some(SourceLine { file: name.clone(), line: 1, column: 1 }))
    };
    let location = |i: usize, symbols| Location { module: Some(i as u32), address: i as u64, symbols };
    let recording = Recording {
        meta: Meta { target: names[0].clone(), frequency_hz: 99, duration_ns: 1, ..Default::default() },
        modules: names.iter().map(|name| ModuleInfo { path: name.clone(), build_id: Vec::new() }).collect(),
        locations: names
            .iter()
            .enumerate()
            .flat_map(|(i, name)| {
                let caller = vec![symbol(name, SymbolKind::Function), symbol(name, SymbolKind::Inlined)];
                [location(i, vec![symbol(name, SymbolKind::Function)]), location(i, caller)]
            })
            .collect(),
        stacks: (0..names.len() as u32).map(|i| vec![2 * i, 2 * i + 1]).collect(),
        comms: names.to_vec(),
        label_sets: names.iter().map(|name| vec![(names[0].clone(), name.clone())]).collect(),
        samples: (0..names.len() as u32)
            .map(|i| Sample {
                time_ns: u64::from(i),
                pid: Tgid(1),
                tid: Tid(1),
                comm: i,
                stack: i,
                weight: 1,
                state: ThreadState::OnCpu,
                labels: i + 1,
            })
            .collect(),
    };
    let mut file = Vec::new();
    raw::write(&recording, &mut file).unwrap();
    file
}
