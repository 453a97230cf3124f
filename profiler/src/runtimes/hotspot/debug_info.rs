//! What HotSpot keeps to map compiled code and bytecode back to methods and lines, decoded from
//! bytes read out of the target: an nmethod's PcDescs and scopes (the chain of methods inlined
//! at a pc, innermost first, each with its bytecode index), and a method's line number table.
//! Both are streams of UNSIGNED5 numbers; every read is bounded by the bytes given.

/// Most methods inlined into one another at one pc that are taken.
pub(crate) const MAX_SCOPES: usize = 64;
/// `InvocationEntryBci`: bcis are written one above, so that -1 (method entry) is 0.
const INVOCATION_ENTRY_BCI: i64 = -1;

/// A reader of UNSIGNED5 numbers: 1 to 5 bytes, little-endian in base 64 above the first, a
/// byte below 192 ending the number; `base` (0 before JDK 20, 1 from it, when byte 0 stopped
/// being used) is subtracted from every byte.
pub(crate) struct Unsigned5<'a> {
    bytes: &'a [u8],
    at: usize,
    base: u8,
}

impl<'a> Unsigned5<'a> {
    pub(crate) fn new(bytes: &'a [u8], at: usize, base: u8) -> Self {
        Self { bytes, at, base }
    }

    pub(crate) fn read(&mut self) -> Option<u32> {
        let mut value: u64 = 0;
        for i in 0..5 {
            let raw = *self.bytes.get(self.at)?;
            self.at += 1;
            value += u64::from(raw.checked_sub(self.base)?) << (6 * i);
            if raw < 192 {
                break;
            }
        }
        u32::try_from(value).ok()
    }

    pub(crate) fn read_signed(&mut self) -> Option<i32> {
        let value = self.read()?;
        Some(((value >> 1) as i32) ^ -((value & 1) as i32))
    }
}

/// One PcDesc: a pc (from the code's start) and where its scope is in the scopes data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PcDesc {
    pub pc_offset: i32,
    pub scope_offset: i32,
}

/// The PcDescs in `bytes` (16 bytes each: the pc offset, then the scope's).
pub(crate) fn pc_descs(bytes: &[u8]) -> Vec<PcDesc> {
    bytes
        .as_chunks::<16>()
        .0
        .iter()
        .map(|desc| PcDesc {
            pc_offset: i32::from_le_bytes(desc[0..4].try_into().unwrap_or_default()),
            scope_offset: i32::from_le_bytes(desc[4..8].try_into().unwrap_or_default()),
        })
        .collect()
}

/// The PcDesc of `pc_offset`: the one at it for a return address (`exact`, where every call
/// has its own), else the first at or after it (HotSpot's own guess for a pc between
/// safepoints, the next place the compiled code says where it is).
pub(crate) fn pc_desc(descs: &[PcDesc], pc_offset: i32, exact: bool) -> Option<PcDesc> {
    let first_after = descs.partition_point(|desc| desc.pc_offset < pc_offset);
    let desc = *descs.get(first_after)?;
    (!exact || desc.pc_offset == pc_offset).then_some(desc)
}

/// A method at a bytecode index: one scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scope {
    /// An index into the nmethod's metadata (1-based; 0 is no method).
    pub method_index: u32,
    pub bci: i32,
}

/// The chain of scopes at `offset` in `scopes`, innermost first: each names its sender's scope,
/// at a lower offset, until 0 (the nmethod's own method). A chain that does not go down, or is
/// longer than [`MAX_SCOPES`], ends there.
pub(crate) fn scopes(scopes: &[u8], mut offset: u32, base: u8) -> Vec<Scope> {
    let mut chain = Vec::new();
    while offset != 0 && chain.len() < MAX_SCOPES {
        let mut stream = Unsigned5::new(scopes, offset as usize, base);
        let (Some(sender), Some(method_index), Some(bci)) = (stream.read(), stream.read(), stream.read())
        else {
            break;
        };
        let bci = i64::from(bci) + INVOCATION_ENTRY_BCI;
        chain.push(Scope { method_index, bci: i32::try_from(bci).unwrap_or(-1) });
        if sender >= offset {
            break;
        }
        offset = sender;
    }
    chain
}

/// A method's line number table: (bci, line) pairs in the order written, and whether `bytes`
/// held its end marker (the table has no length: one cut short by the bytes read is not).
pub(crate) fn line_table(bytes: &[u8], base: u8) -> (Vec<(u32, u32)>, bool) {
    let mut table = Vec::new();
    let (mut bci, mut line) = (0i64, 0i64);
    let mut stream = Unsigned5::new(bytes, 0, base);
    while let Some(&byte) = bytes.get(stream.at) {
        stream.at += 1;
        match byte {
            0 => return (table, true),
            0xff => {
                let (Some(bci_delta), Some(line_delta)) = (stream.read_signed(), stream.read_signed()) else {
                    break;
                };
                bci += i64::from(bci_delta);
                line += i64::from(line_delta);
            }
            _ => {
                bci += i64::from(byte >> 3);
                line += i64::from(byte & 7);
            }
        }
        if let (Ok(bci), Ok(line)) = (u32::try_from(bci), u32::try_from(line)) {
            table.push((bci, line));
        }
    }
    (table, false)
}

/// The line of `bci`, as HotSpot finds it: that of the first entry at it, else of the last of
/// the entries closest below it (the table is not sorted).
pub(crate) fn line_of(table: &[(u32, u32)], bci: i32) -> Option<u32> {
    let bci = u32::try_from(bci).unwrap_or(0);
    if let Some(&(_, line)) = table.iter().find(|(start, _)| *start == bci) {
        return Some(line);
    }
    let below = table.iter().filter(|(start, _)| *start < bci);
    below
        .fold(None, |best: Option<(u32, u32)>, &(start, line)| match best {
            Some((closest, _)) if start < closest => best,
            _ => Some((start, line)),
        })
        .map(|(_, line)| line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `value` as UNSIGNED5 with `base`.
    fn unsigned5(mut value: u32, base: u8, out: &mut Vec<u8>) {
        let low = 192 - u32::from(base);
        for _ in 0..4 {
            if value < low {
                break;
            }
            value -= low;
            out.push((low + value % 64) as u8 + base);
            value /= 64;
        }
        out.push(value as u8 + base);
    }

    #[test]
    fn unsigned5_round_trips_in_both_bases() {
        for base in [0, 1] {
            for value in [0, 1, 191, 192, 255, 4095, 12_345, 1 << 20, 1 << 28] {
                let mut bytes = Vec::new();
                unsigned5(value, base, &mut bytes);
                assert_eq!(Unsigned5::new(&bytes, 0, base).read(), Some(value), "{value} in base {base}");
            }
        }
        assert_eq!(Unsigned5::new(&[0], 0, 1).read(), None, "no byte is 0 in base 1");
        assert_eq!(Unsigned5::new(&[200], 0, 0).read(), None, "cut short");
    }

    #[test]
    fn scope_chains_run_out_to_the_compiled_method() {
        // Offsets 0 (the null scope), then the outer method at 1, the inlined one after it.
        let mut bytes = vec![0];
        let outer = bytes.len() as u32;
        for value in [0, 1, 7 + 1] {
            unsigned5(value, 1, &mut bytes);
        }
        let inner = bytes.len() as u32;
        for value in [outer, 2, 3 + 1] {
            unsigned5(value, 1, &mut bytes);
        }
        assert_eq!(
            scopes(&bytes, inner, 1),
            [Scope { method_index: 2, bci: 3 }, Scope { method_index: 1, bci: 7 }]
        );
        // A sender at its own offset or beyond ends the chain.
        let mut looping = vec![0];
        for value in [1, 1, 1] {
            unsigned5(value, 0, &mut looping);
        }
        assert_eq!(scopes(&looping, 1, 0).len(), 1);
    }

    #[test]
    fn pc_descs_exact_for_return_addresses_first_after_otherwise() {
        let descs =
            [(-1, 0), (16, 5), (40, 9)].map(|(pc_offset, scope_offset)| PcDesc { pc_offset, scope_offset });
        assert_eq!(pc_desc(&descs, 40, true).map(|d| d.scope_offset), Some(9));
        assert_eq!(pc_desc(&descs, 39, true), None);
        assert_eq!(pc_desc(&descs, 20, false).map(|d| d.scope_offset), Some(9));
        assert_eq!(pc_desc(&descs, 41, false), None);
        let mut bytes = Vec::new();
        for (pc, scope) in [(-1i32, 0i32), (16, 5)] {
            bytes.extend(pc.to_le_bytes());
            bytes.extend(scope.to_le_bytes());
            bytes.extend([0; 8]);
        }
        assert_eq!(pc_descs(&bytes), descs[..2]);
    }

    #[test]
    fn line_tables_short_and_long_entries() {
        // (bci 0, line 10) long form, (bci 5, line 11) short, (bci 9, line 13) short, end.
        let mut bytes = vec![0xff];
        unsigned5(0, 0, &mut bytes); // bci + 0 (signed 0)
        unsigned5(20, 0, &mut bytes); // line + 10 (signed 10 is 20)
        bytes.push((5 << 3) | 1);
        bytes.push((4 << 3) | 2);
        bytes.extend([0, 0x7f]);
        let (table, ended) = line_table(&bytes, 0);
        assert!(ended);
        assert_eq!(table, [(0, 10), (5, 11), (9, 13)]);
        assert_eq!(line_of(&table, 7), Some(11));
        assert_eq!(line_of(&table, 9), Some(13));
        assert_eq!(line_of(&[], 3), None);
        // Cut short: the entries read, not ended.
        assert_eq!(line_table(&[0x29], 0), (vec![(5, 1)], false));
        assert_eq!(line_table(&[0x29, 0x11], 0), (vec![(5, 1), (7, 2)], false));
        assert_eq!(line_table(&[0xff, 200], 0), (vec![], false), "a long entry cut short");
        // Several entries at one bci: the first for it, the last of them for a bci above.
        let repeated = [(0, 1), (4, 7), (4, 8)];
        assert_eq!(line_of(&repeated, 4), Some(7));
        assert_eq!(line_of(&repeated, 5), Some(8));
    }
}
