//! Go tables made to order, in each layout, for the tests and the `go_table` fuzz target: a
//! table is laid out as Go's linker lays one out (header, names, files, value tables, function
//! table, records, then the functions' data with their inline trees, as Go 1.26 does), with the
//! functions given one after another from the text's start, and the table at [`TABLE`].
use super::table::{Placement, Version};

/// Where a fixture table is (an SVMA), and where its text starts.
pub const TABLE: u64 = 0x50_0000;
pub const TEXT: u64 = 0x40_1000;

/// A function of a fixture table.
#[derive(Clone, Debug, Default)]
pub struct FixtureFunction {
    pub name: String,
    /// Bytes of code.
    pub size: u64,
    /// Its stack offset, in runs: (end of the run as an offset from its entry, value).
    pub sp: Vec<(u64, i32)>,
    /// Its lines, in runs as `sp`.
    pub lines: Vec<(u64, i32)>,
    /// Its file, an index into the table's files.
    pub file: i32,
    /// Its flags (`SPWRITE` is `1 << 1`).
    pub flag: u8,
    /// The calls inlined into it (name, and the offset from its entry of an instruction of the
    /// caller at the call), and which of them each PC is in, in runs as `sp` (-1: none). Go
    /// 1.2's layout (written as Go 1.12 to 1.15 do), and 1.18's and later.
    pub inlined: Vec<(String, u32)>,
    pub inlined_at: Vec<(u64, i32)>,
}

/// A table of `version`'s layout of `functions` and `files`, in a file of its own bytes mapped at
/// [`TABLE`], built by Go `release`; the header says where the text starts unless
/// `text_start_in_header` is false (as Go 1.26's), when the module data does.
pub fn table(
    version: Version,
    release: &str,
    text_start_in_header: bool,
    functions: &[FixtureFunction],
    files: &[&str],
) -> (Vec<u8>, Placement) {
    let header_size = match version {
        Version::Go12 => return go12_table(release, functions, files),
        Version::Go116 => 64,
        Version::Go118 | Version::Go120 => 72,
    };
    let mut names = Vec::new();
    let name_offsets: Vec<u32> = functions.iter().map(|f| append_string(&mut names, &f.name)).collect();
    let inlined_names: Vec<Vec<u32>> = functions
        .iter()
        .map(|f| f.inlined.iter().map(|(name, _)| append_string(&mut names, name)).collect())
        .collect();
    let mut file_bytes = Vec::new();
    let cu_files: Vec<u8> =
        files.iter().flat_map(|file| append_string(&mut file_bytes, file).to_le_bytes()).collect();
    // Offset 0 of the value tables is no table.
    let mut values = vec![0];
    let tables: Vec<[u32; 4]> = functions.iter().map(|f| append_value_tables(&mut values, f, 0)).collect();
    let names_at = header_size;
    let cu_at = names_at + names.len();
    let files_at = cu_at + cu_files.len();
    let values_at = files_at + file_bytes.len();
    let function_table_at = values_at + values.len();
    let entry_size = if version == Version::Go116 { 8 } else { 4 };

    let mut out = Vec::new();
    let magic: u32 = match version {
        Version::Go12 => 0xffff_fffb,
        Version::Go116 => 0xffff_fffa,
        Version::Go118 => 0xffff_fff0,
        Version::Go120 => 0xffff_fff1,
    };
    out.extend(magic.to_le_bytes());
    out.extend([0, 0, 1, 8]);
    let mut header = vec![functions.len() as u64, files.len() as u64];
    if version != Version::Go116 {
        header.push(if text_start_in_header { TEXT } else { 0 });
    }
    header.extend([names_at, cu_at, files_at, values_at, function_table_at].map(|at| at as u64));
    out.extend(header.iter().flat_map(|word| word.to_le_bytes()));
    out.extend(&names);
    out.extend(&cu_files);
    out.extend(&file_bytes);
    out.extend(&values);

    // Each function's offset from the text's start, and the end of the last.
    let entries: Vec<u64> = std::iter::once(0)
        .chain(functions.iter().scan(0, |end, f| {
            *end += f.size;
            Some(*end)
        }))
        .collect();
    let entry_bytes = |offset: u64| -> Vec<u8> {
        match version {
            Version::Go12 | Version::Go116 => (TEXT + offset).to_le_bytes().to_vec(),
            Version::Go118 | Version::Go120 => (offset as u32).to_le_bytes().to_vec(),
        }
    };
    // The records, each 8-aligned, and the inline trees in the functions' data after them.
    let inlined_size = if version == Version::Go120 { 16 } else { 20 };
    let mut records = Vec::new();
    let mut record_offsets = Vec::new();
    let mut trees = Vec::new();
    let pairs_size = functions.len() * 2 * entry_size + entry_size;
    for (i, f) in functions.iter().enumerate() {
        while !(pairs_size + records.len()).is_multiple_of(8) {
            records.push(0);
        }
        record_offsets.push(pairs_size + records.len());
        let [sp, file, lines, inlined_at] = tables[i];
        let tree = (!f.inlined.is_empty()).then(|| {
            let at = trees.len() as u32;
            for ((_, parent_pc), &name) in f.inlined.iter().zip(&inlined_names[i]) {
                let mut call = vec![0u8; inlined_size];
                let (name_at, parent_at) = if version == Version::Go120 { (4, 8) } else { (12, 16) };
                call[name_at..name_at + 4].copy_from_slice(&name.to_le_bytes());
                call[parent_at..parent_at + 4].copy_from_slice(&parent_pc.to_le_bytes());
                trees.extend(call);
            }
            at
        });
        let (pcdata, funcdata): (&[u32], &[u32]) = match tree {
            Some(tree) => (&[0, 0, inlined_at], &[u32::MAX, u32::MAX, u32::MAX, tree]),
            None => (&[], &[]),
        };
        records.extend(entry_bytes(entries[i]));
        // Name, arguments, deferreturn, the three value tables, pcdata and the unit's files.
        let fields = [name_offsets[i], 0, 0, sp, file, lines, pcdata.len() as u32, 0];
        records.extend(fields.iter().flat_map(|field| field.to_le_bytes()));
        if version == Version::Go120 {
            records.extend(0u32.to_le_bytes());
        }
        // funcID, flag, padding, nfuncdata.
        records.extend([0, f.flag, 0, funcdata.len() as u8]);
        records.extend(pcdata.iter().chain(funcdata).flat_map(|word| word.to_le_bytes()));
    }
    for (i, &offset) in entries.iter().enumerate() {
        out.extend(entry_bytes(offset));
        if let Some(record) = record_offsets.get(i) {
            out.extend(&(*record as u64).to_le_bytes()[..entry_size]);
        }
    }
    out.extend(records);
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
    let functions_data = TABLE + out.len() as u64;
    out.extend(trees);

    let mut module_data = vec![0u64; 44];
    module_data[0] = TABLE;
    module_data[1] = TABLE + names_at as u64;
    module_data[20] = TEXT;
    module_data[if version == Version::Go118 { 38 } else { 40 }] = functions_data;
    let placement = placement(&out, Some(module_data), release);
    (out, placement)
}

/// A table in Go 1.2's layout, as Go 1.12 to 1.15 write it: the header and the function table
/// (whose records' offsets, as every other, are from the table's start), the offset of the table
/// of files, then names, files, value tables, inline trees and records. Files are numbered from
/// 1 (the table of files starts with their count).
fn go12_table(release: &str, functions: &[FixtureFunction], files: &[&str]) -> (Vec<u8>, Placement) {
    let function_table_size = functions.len() * 16 + 8;
    let mut out = Vec::new();
    out.extend(0xffff_fffb_u32.to_le_bytes());
    out.extend([0, 0, 1, 8]);
    out.extend((functions.len() as u64).to_le_bytes());
    // The function table and the files' offset, filled in once the records are placed.
    out.resize(16 + function_table_size + 4, 0);
    let name_offsets: Vec<u32> = functions.iter().map(|f| append_string(&mut out, &f.name)).collect();
    let inlined_names: Vec<Vec<u32>> = functions
        .iter()
        .map(|f| f.inlined.iter().map(|(name, _)| append_string(&mut out, name)).collect())
        .collect();
    let file_offsets: Vec<u32> = files.iter().map(|file| append_string(&mut out, file)).collect();
    let files_at = out.len() as u32;
    out.extend((files.len() as u32 + 1).to_le_bytes());
    out.extend(file_offsets.iter().flat_map(|offset| offset.to_le_bytes()));
    let tables: Vec<[u32; 4]> = functions.iter().map(|f| append_value_tables(&mut out, f, 1)).collect();
    let trees: Vec<Option<u64>> = functions
        .iter()
        .zip(&inlined_names)
        .map(|(f, names)| {
            (!f.inlined.is_empty()).then(|| {
                let at = TABLE + out.len() as u64;
                for ((_, parent_pc), name) in f.inlined.iter().zip(names) {
                    let mut call = [0u8; 20];
                    call[12..16].copy_from_slice(&name.to_le_bytes());
                    call[16..20].copy_from_slice(&parent_pc.to_le_bytes());
                    out.extend(call);
                }
                at
            })
        })
        .collect();
    let mut entry = TEXT;
    for (i, f) in functions.iter().enumerate() {
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        let pair = 16 + 16 * i;
        out[pair..pair + 8].copy_from_slice(&entry.to_le_bytes());
        let record = out.len() as u64;
        out[pair + 8..pair + 16].copy_from_slice(&record.to_le_bytes());
        let (pcdata, funcdata): (&[u32], &[u64]) = match trees[i] {
            Some(tree) => (&[0, 0, tables[i][3]], &[0, 0, 0, 0, tree]),
            None => (&[], &[]),
        };
        out.extend(entry.to_le_bytes());
        // Name, arguments, deferreturn, the three value tables, pcdata.
        let [sp, file, lines, _] = tables[i];
        let fields = [name_offsets[i], 0, 0, sp, file, lines, pcdata.len() as u32];
        out.extend(fields.iter().flat_map(|field| field.to_le_bytes()));
        // funcID, padding, nfuncdata.
        out.extend([0, 0, 0, funcdata.len() as u8]);
        out.extend(pcdata.iter().flat_map(|word| word.to_le_bytes()));
        if !funcdata.is_empty() && !out.len().is_multiple_of(8) {
            out.extend([0; 4]);
        }
        out.extend(funcdata.iter().flat_map(|word| word.to_le_bytes()));
        entry += f.size;
    }
    let end = 16 + 16 * functions.len();
    out[end..end + 8].copy_from_slice(&entry.to_le_bytes());
    out[end + 8..end + 12].copy_from_slice(&files_at.to_le_bytes());
    let placement = placement(&out, None, release);
    (out, placement)
}

/// Where a fixture table of `bytes` is: a file of its own bytes, mapped at [`TABLE`].
fn placement(bytes: &[u8], module_data: Option<Vec<u64>>, release: &str) -> Placement {
    Placement {
        table: 0..bytes.len(),
        address: TABLE,
        module_data,
        release: Some(release.to_owned()),
        segments: vec![(TABLE..TABLE + bytes.len() as u64, 0)],
        tls_bytes: None,
    }
}

/// Appends a NUL-terminated string; where it starts.
fn append_string(bytes: &mut Vec<u8>, string: &str) -> u32 {
    let at = bytes.len() as u32;
    bytes.extend(string.as_bytes());
    bytes.push(0);
    at
}

/// Appends a function's value tables: its stack offsets, its file (its index plus `first_file`,
/// the number the table's files start at), its lines and, if calls are inlined into it, where;
/// where each starts (0: no table).
fn append_value_tables(bytes: &mut Vec<u8>, f: &FixtureFunction, first_file: i32) -> [u32; 4] {
    let inlined_at = match f.inlined.is_empty() {
        true => 0,
        false => append_values(bytes, &f.inlined_at),
    };
    [
        append_values(bytes, &f.sp),
        append_values(bytes, &[(f.size, f.file + first_file)]),
        append_values(bytes, &f.lines),
        inlined_at,
    ]
}

/// Appends a value table of `runs` (end of each as an offset from the entry, value); where it
/// starts.
fn append_values(bytes: &mut Vec<u8>, runs: &[(u64, i32)]) -> u32 {
    let at = bytes.len() as u32;
    let (mut value, mut pc) = (-1i32, 0u64);
    for &(end, next) in runs {
        let delta = next.wrapping_sub(value);
        let zigzag = ((delta << 1) ^ (delta >> 31)) as u32;
        append_uvarint(bytes, u64::from(zigzag));
        append_uvarint(bytes, end - pc);
        (value, pc) = (next, end);
    }
    bytes.push(0);
    at
}

fn append_uvarint(bytes: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        bytes.push(value as u8 | 0x80);
        value >>= 7;
    }
    bytes.push(value as u8);
}
