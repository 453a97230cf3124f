//! The source lines of a code object's instructions, from its line table in each of CPython's
//! three encodings (docs/cpython-layouts.md §3.2), decoded once into [`Lines`]: where each line
//! starts, which is what naming needs, in less room than the bytes that encode it. The table is
//! the target's: every step is bounded by its length, a malformed entry ends the lines there,
//! and lines are added up in `i64` so that no delta overflows; a line outside `u32` is no line.
use super::layout::LineTable;

/// The lines of a code object's instructions: runs of instructions on one line (or on none),
/// by the offset they start at, in the format's unit (bytes for [`LineTable::Lnotab`] and
/// [`LineTable::Pep626`], code units for [`LineTable::Pep657`]). Lines are kept from the code
/// object's first line, which the table is written from: code objects that share a table (it
/// is an immutable `bytes` object) share its lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lines {
    /// (start, line - first line), starts increasing; [`NONE`] for instructions with no line.
    /// The last run goes on past the table (3.8 and 3.9 leave an instruction past it on the
    /// last line; the later formats end with a run of no line).
    runs: Box<[(u32, i32)]>,
}

/// The line of instructions that have none.
const NONE: i32 = i32::MIN;

impl Lines {
    /// Decodes `table`, in `format`.
    pub fn decode(format: LineTable, table: &[u8]) -> Self {
        let mut runs = Runs::default();
        match format {
            LineTable::Lnotab => lnotab(table, &mut runs),
            LineTable::Pep626 => pep626(table, &mut runs),
            LineTable::Pep657 => pep657(table, &mut runs),
        }
        Self { runs: runs.0.into_boxed_slice() }
    }

    /// The line of the instruction at `offset` of a code object starting on `first_line`. A
    /// negative offset is a frame that has not started its first instruction: the first line.
    /// `None` when the table says the instruction has no line, does not reach `offset`, or is
    /// malformed there, or the line is outside `u32`.
    pub fn line(&self, first_line: u32, offset: i64) -> Option<u32> {
        if offset < 0 {
            return Some(first_line);
        }
        let offset = u32::try_from(offset).unwrap_or(u32::MAX);
        let run = self.runs.partition_point(|&(start, _)| start <= offset).checked_sub(1)?;
        let delta = self.runs[run].1;
        (delta != NONE).then(|| u32::try_from(i64::from(first_line) + i64::from(delta)).ok()).flatten()
    }

    /// About the bytes it holds.
    pub fn size(&self) -> usize {
        std::mem::size_of::<Self>() + 8 * self.runs.len()
    }
}

/// Runs being decoded.
#[derive(Default)]
struct Runs(Vec<(u32, i32)>);

impl Runs {
    /// Instructions from `start` on are `line` lines from the first (`None`: none), until the
    /// next run. A start past `u32` ends the lines; a line further than `i32` from the first is
    /// none (a table that moves that far is garbage).
    fn push(&mut self, start: i64, line: Option<i64>) -> Option<()> {
        let start = u32::try_from(start).ok()?;
        let line =
            line.and_then(|line| i32::try_from(line).ok()).filter(|&line| line != NONE).unwrap_or(NONE);
        match self.0.last_mut() {
            Some(last) if last.1 == line => {}
            Some(last) if last.0 == start => last.1 = line,
            _ => self.0.push((start, line)),
        }
        Some(())
    }
}

/// 3.8, 3.9: (address increment, signed line increment) pairs; the line is the one reached when
/// the next address would pass the instruction's offset. An offset past the table is on its
/// last line, as the interpreter has it.
fn lnotab(table: &[u8], runs: &mut Runs) {
    let mut line = 0i64;
    let mut address = 0i64;
    if runs.push(0, Some(line)).is_none() {
        return;
    }
    for pair in table.as_chunks::<2>().0 {
        address += i64::from(pair[0]);
        line += i64::from(pair[1] as i8);
        if runs.push(address, Some(line)).is_none() {
            return;
        }
    }
}

/// The 3.10 line delta of instructions with no line.
const NO_LINE: i8 = -128;

/// 3.10 (PEP 626): (length, signed line delta) pairs, each a range of instructions; a delta of
/// [`NO_LINE`] leaves the running line alone and gives its range none.
fn pep626(table: &[u8], runs: &mut Runs) {
    let mut line = 0i64;
    let mut start = 0i64;
    for pair in table.as_chunks::<2>().0 {
        let end = start + i64::from(pair[0]);
        let delta = pair[1] as i8;
        let has_line = delta != NO_LINE;
        if has_line {
            line += i64::from(delta);
        }
        if end > start && runs.push(start, has_line.then_some(line)).is_none() {
            return;
        }
        start = end;
    }
    runs.push(start, None);
}

/// 3.11+ (PEP 657): entries of one to eight code units, each a kind code and what it needs.
fn pep657(table: &[u8], runs: &mut Runs) {
    let mut entries = Pep657Entries { bytes: table, line: 0 };
    let mut start = 0i64;
    while !entries.bytes.is_empty() {
        let Some((units, line)) = entries.next_entry() else { break };
        if runs.push(start, line).is_none() {
            return;
        }
        start += units;
    }
    runs.push(start, None);
}

/// A walk through a PEP 657 table, keeping the running line.
struct Pep657Entries<'a> {
    /// What is left of the table.
    bytes: &'a [u8],
    line: i64,
}

/// A varint holds at most 6 groups of 6 bits: CPython writes 32-bit values.
const MAX_VARINT_BYTES: u32 = 6;

impl Pep657Entries<'_> {
    /// The next entry's code units and line (`None` inside: no location); `None` when the table
    /// ends inside the entry or has no entry start here.
    fn next_entry(&mut self) -> Option<(i64, Option<i64>)> {
        let first = self.byte()?;
        if first & 0x80 == 0 {
            return None;
        }
        let units = i64::from(first & 0x07) + 1;
        let line = match (first >> 3) & 0x0f {
            // Short form: one byte of columns.
            0..=9 => {
                self.skip(1)?;
                Some(self.line)
            }
            // One-line forms: the line moves by 0, 1 or 2; start and end columns follow.
            code @ 10..=12 => {
                self.skip(2)?;
                self.line += i64::from(code - 10);
                Some(self.line)
            }
            // No columns: a line delta only.
            13 => {
                self.line += self.signed_varint()?;
                Some(self.line)
            }
            // Long form: a line delta, then end line delta, column and end column.
            14 => {
                self.line += self.signed_varint()?;
                for _ in 0..3 {
                    self.varint()?;
                }
                Some(self.line)
            }
            _ => None,
        };
        Some((units, line))
    }

    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        Some(first)
    }

    fn skip(&mut self, count: usize) -> Option<()> {
        self.bytes = self.bytes.get(count..)?;
        Some(())
    }

    /// Little-endian groups of 6 bits, 0x40 saying another group follows.
    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for group in 0..MAX_VARINT_BYTES {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x3f) << (6 * group);
            if byte & 0x40 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// A varint whose low bit is the sign: odd values are negative.
    fn signed_varint(&mut self) -> Option<i64> {
        let value = self.varint()?;
        // At most 36 bits: the magnitude fits an i64.
        let magnitude = (value >> 1) as i64;
        Some(if value & 1 == 1 { -magnitude } else { magnitude })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::path::Path;

    use super::*;

    /// The line of the instruction at `offset` of a code object starting on `first_line`, from
    /// its `table` in `format`.
    fn line(format: LineTable, table: &[u8], first_line: u32, offset: i64) -> Option<u32> {
        Lines::decode(format, table).line(first_line, offset)
    }

    /// Bytes from hexadecimal digits, whatever separates them.
    pub(in crate::runtimes::python) fn hex(text: &str) -> Vec<u8> {
        let digits: String = text.chars().filter(char::is_ascii_hexdigit).collect();
        (0..digits.len()).step_by(2).map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap()).collect()
    }

    /// Lines of `offsets` under `format`.
    fn lines(format: LineTable, table: &str, offsets: impl IntoIterator<Item = i64>) -> Vec<Option<u32>> {
        let table = hex(table);
        offsets.into_iter().map(|offset| line(format, &table, 1, offset)).collect()
    }

    #[test]
    fn the_worked_example_in_3_9() {
        // `dis`: offsets 0–6 line 2, 8–10 line 3, 12–14 line 4, 16–20 line 5.
        let found = lines(LineTable::Lnotab, "00 01 08 01 04 01 04 01", (0..=20).step_by(2));
        let expected = [2, 2, 2, 2, 3, 3, 4, 4, 5, 5, 5].map(Some);
        assert_eq!(found, expected);
    }

    #[test]
    fn the_worked_example_in_3_10() {
        // Ranges [0,8) line 2, [8,12) line 3, [12,16) line 4, [16,22) line 5; nothing after.
        let found = lines(LineTable::Pep626, "08 01 04 01 04 01 06 01", (0..=22).step_by(2));
        let mut expected = [2, 2, 2, 2, 3, 3, 4, 4, 5, 5, 5].map(Some).to_vec();
        expected.push(None);
        assert_eq!(found, expected);
    }

    #[test]
    fn the_worked_example_in_3_12() {
        let table = "80 00 d8 08 09 88 41 89 05 80 41 d9 07 08 d8 0f 10 88 08 d8 0c 0d 88 32 80 49";
        let found = lines(LineTable::Pep657, table, 0..=13);
        let mut expected = [1, 2, 2, 2, 2, 2, 3, 3, 4, 4, 5, 5, 5].map(Some).to_vec();
        expected.push(None);
        assert_eq!(found, expected);
    }

    #[test]
    fn a_frame_before_its_first_instruction_is_on_the_first_line() {
        for format in [LineTable::Lnotab, LineTable::Pep626, LineTable::Pep657] {
            assert_eq!(line(format, &[], 7, -1), Some(7));
            assert_eq!(line(format, &[0xff; 9], 7, i64::MIN), Some(7));
        }
    }

    #[test]
    fn the_3_10_no_line_entry_and_zero_length_ranges() {
        // [0,2) line 2; a zero-length range moving to line 4; [2,6) no line; [6,8) line 3.
        let found = lines(LineTable::Pep626, "02 01 00 02 04 80 02 ff", (0..8).step_by(2));
        assert_eq!(found, [Some(2), None, None, Some(3)]);
    }

    #[test]
    fn the_3_11_kinds_without_columns() {
        // Kind 13 with delta +3 (varint 6), kind 14 with −2 (varint 5) and three varints, the
        // second of two bytes, then kind 15 (no location, line unchanged), then kind 10.
        let table = "e8 06 | f1 05 00 41 01 02 | f8 | d0 00 00";
        assert_eq!(lines(LineTable::Pep657, table, 0..6), [Some(4), Some(2), Some(2), None, Some(2), None]);
    }

    #[test]
    fn malformed_tables_give_no_line_without_panicking() {
        let cases = [
            // An entry cut short, after the offset and before it.
            (LineTable::Pep657, "80"),
            (LineTable::Pep657, "f0 41"),
            // A varint that never ends, then one that runs too long.
            (LineTable::Pep657, "e8 7f 7f"),
            (LineTable::Pep657, "e8 7f 7f 7f 7f 7f 7f 7f 01"),
            // A byte that does not start an entry.
            (LineTable::Pep657, "05 00"),
            // An odd byte left over.
            (LineTable::Pep626, "08"),
        ];
        for (format, table) in cases {
            assert_eq!(lines(format, table, [0]), [None], "{table}");
        }
        assert_eq!(lines(LineTable::Lnotab, "08", [0, 100]), [Some(1), Some(1)]);
    }

    #[test]
    fn lines_outside_u32_are_none() {
        // 3.12: a delta of −2 (varint 5) from line 1; then +2^34 (varint 2^35, 6 groups).
        assert_eq!(lines(LineTable::Pep657, "e8 05", [0]), [None]);
        assert_eq!(lines(LineTable::Pep657, "e8 40 40 40 40 40 20", [0]), [None]);
        // 3.9: 127 per pair, far enough to pass u32::MAX from a first line near it.
        let table = [0x00, 0x7f].repeat(4);
        assert_eq!(line(LineTable::Lnotab, &table, u32::MAX - 300, 0), None);
        assert_eq!(line(LineTable::Lnotab, &[0x00, 0x80], 0, 0), None);
    }

    /// The lines of a fixture's `[line or null, count]` runs, one per offset.
    pub(in crate::runtimes::python) fn expand_runs(runs: &serde_json::Value) -> Vec<Option<u32>> {
        let runs = runs.as_array().unwrap();
        let runs = runs.iter().map(|run| (run[0].as_u64().map(|line| line as u32), run[1].as_u64().unwrap()));
        runs.flat_map(|(line, count)| std::iter::repeat_n(line, count as usize)).collect()
    }

    /// A fixture of gen_line_tables.py: tables the interpreter built, and its line for every
    /// instruction offset.
    fn check_fixture(name: &str, format: LineTable) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/python").join(name);
        let fixture: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let step = fixture["offset_step"].as_i64().unwrap();
        let functions = fixture["functions"].as_array().unwrap();
        assert!(functions.len() >= 5, "{name}");
        for function in functions {
            let table = hex(function["table"].as_str().unwrap());
            let first_line = function["first_line"].as_u64().unwrap() as u32;
            for (index, expected) in expand_runs(&function["lines"]).into_iter().enumerate() {
                let offset = index as i64 * step;
                let found = line(format, &table, first_line, offset);
                assert_eq!(found, expected, "{name}: {} at {offset}", function["name"]);
            }
        }
    }

    #[test]
    fn every_offset_of_tables_built_by_3_9() {
        check_fixture("line-tables-3.9.json", LineTable::Lnotab);
    }

    #[test]
    fn every_offset_of_tables_built_by_3_10() {
        check_fixture("line-tables-3.10.json", LineTable::Pep626);
    }

    #[test]
    fn every_offset_of_tables_built_by_3_12() {
        check_fixture("line-tables-3.12.json", LineTable::Pep657);
    }
}
