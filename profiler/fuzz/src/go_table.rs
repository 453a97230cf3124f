//! Go tables of any bytes, read as each Go release would have written them, looked up at any PC:
//! a function or none, its name and path bounded, its inlined calls at most `MAX_INLINED` deep,
//! never a panic or a runaway; and tables made to order of the input's functions, in each layout,
//! find each of them by its PC, with its name and stack offset.

use profiler::stages::go::{
    GoTable, MAX_INLINED, MAX_STRING, Placement, Version, Work,
    fixture::{self, FixtureFunction, TABLE, TEXT},
};

/// Runs of value tables one input's lookups may decode: what a stack may cost the profiler.
const RUNS: usize = 1 << 18;

/// A release writing each layout (and Go 1.27, whose module data differs from 1.26's).
const RELEASES: [(Version, &str); 5] = [
    (Version::Go116, "go1.16.15"),
    (Version::Go118, "go1.19.8"),
    (Version::Go120, "go1.26.10"),
    (Version::Go120, "go1.27.3"),
    (Version::Go12, "go1.15.15"),
];

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    // A PC, the release, and whether the header says where the text starts; then the table.
    let Some((head, bytes)) = data.split_first_chunk::<10>() else { return };
    let pc = u64::from_le_bytes(head[..8].try_into().unwrap());
    let (version, release) = RELEASES[usize::from(head[8]) % RELEASES.len()];
    any_bytes(bytes, release, pc);
    made_to_order(bytes, version, release, head[9] & 1 == 0);
}

/// The bytes as a table, with the module data its own first words say.
fn any_bytes(bytes: &[u8], release: &str, pc: u64) {
    let words: Vec<u64> =
        bytes.as_chunks::<8>().0.iter().take(44).map(|word| u64::from_le_bytes(*word)).collect();
    let placement = Placement {
        table: 0..bytes.len(),
        address: TABLE,
        module_data: Some(words),
        release: Some(release.to_owned()),
        segments: vec![(TABLE..TABLE + bytes.len() as u64, 0)],
        tls_bytes: None,
    };
    let Ok(table) = GoTable::new(bytes, placement) else { return };
    let mut work = Work::new(RUNS);
    let text = table.text().unwrap_or(TEXT..TEXT + 1);
    let inside = text.start.wrapping_add(pc % (text.end.wrapping_sub(text.start)).max(1));
    for svma in [pc, inside] {
        let Some(function) = table.function(svma) else { continue };
        assert!(function.entry <= svma);
        assert!(table.name(function, &mut work).is_none_or(|name| name.len() < MAX_STRING));
        let _ = table.sp_offset(function, svma, &mut work);
        let _ = table.writes_sp(function);
        if let Some((file, _)) = table.source(function, svma, &mut work) {
            assert!(file.len() < MAX_STRING);
        }
        assert!(table.located(function, svma, &mut work).len() <= MAX_INLINED + 1);
    }
}

/// Up to 16 functions, one per 4 bytes: its size, stack offset and line.
fn made_to_order(bytes: &[u8], version: Version, release: &str, text_start_in_header: bool) {
    let functions: Vec<FixtureFunction> = bytes
        .as_chunks::<4>()
        .0
        .iter()
        .take(16)
        .enumerate()
        .map(|(i, chunk)| {
            let size = 1 + u64::from(chunk[0]);
            FixtureFunction {
                name: format!("main.f{i}"),
                size,
                sp: vec![(size, i32::from(chunk[1]))],
                lines: vec![(size, 1 + i32::from(u16::from_le_bytes([chunk[2], chunk[3]])))],
                ..Default::default()
            }
        })
        .collect();
    let (bytes, placement) =
        fixture::table(version, release, text_start_in_header, &functions, &["/app/main.go"]);
    let table = GoTable::new(bytes, placement).expect("a table made to order is read");
    let mut entry = TEXT;
    for (i, made) in functions.iter().enumerate() {
        for svma in [entry, entry + made.size - 1] {
            let function = table.function(svma).expect("each function is found");
            assert_eq!(function.entry, entry);
            assert_eq!(table.name(function, &mut Work::new(RUNS)), Some(made.name.as_bytes()));
            assert!(table.is_named(function, made.name.as_bytes()));
            let work = &mut Work::new(RUNS);
            assert_eq!(table.sp_offset(function, svma, work), Some(u64::from(made.sp[0].1 as u32)), "f{i}");
            assert_eq!(
                table.source(function, svma, work).map(|(_, line)| line as i32),
                Some(made.lines[0].1)
            );
        }
        entry += made.size;
    }
    assert_eq!(table.function(entry), None, "past the last function");
}
