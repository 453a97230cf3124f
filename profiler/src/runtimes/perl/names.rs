//! What names a Perl frame, read from the target's memory by the addresses the kernel's walk
//! recorded: a sub's name and package (`CV` → its `GV` or name → its stash's name), a
//! statement's file and line (`COP`), the file a `require` loads (an `SV`'s string). Every
//! layout is the same in 5.36 and 5.42 (docs/perl-layouts.md §4). Everything read is the
//! target's: types are checked before pointers are followed, lengths bounded.
use anyhow::{Result, ensure};

/// Names longer than this, in bytes, are cut, ending with `…`.
const MAX_NAME_BYTES: u64 = 1024;
/// Paths longer than this are cut too (`PATH_MAX`).
const MAX_PATH_BYTES: u64 = 4096;

/// What a C string is read by: a page's end is at a multiple of it.
const STRING_PIECE: u64 = 256;

/// An SV's head: its body (`sv_any`), flags (u32, type in the low byte), and `sv_u`.
const SV_ANY: u64 = 0;
const SV_FLAGS: u64 = 12;
const SV_U: u64 = 16;
/// `SvTYPE`s read: a string, a glob, a stash, a sub, a format.
const SVT_PV: u8 = 3;
const SVT_PVMG: u8 = 7;
const SVT_PVGV: u8 = 9;
const SVT_PVHV: u8 = 12;
const SVT_PVCV: u8 = 13;
const SVT_PVFM: u8 = 14;
/// `SVf_OOK`: a hash with its aux struct (a stash's name is there).
const SVF_OOK: u32 = 0x0200_0000;
/// `SVf_POK`: the scalar holds a string.
const SVF_POK: u32 = 0x0400;
/// `XPVCV`: `xcv_stash`, `xcv_gv_u`, `xcv_flags` (u32), and the flags read.
const CV_STASH: u64 = 32;
const CV_GV: u64 = 56;
const CV_FLAGS: u64 = 92;
const CVF_NAMED: u32 = 0x8000;
const CVF_LEXICAL: u32 = 0x1_0000;
/// `XPVGV`: its name (`HEK *`) and stash.
const GV_NAME: u64 = 32;
const GV_STASH: u64 = 40;
/// `XPVHV` with aux: the name (a `HEK *`, or an array of them) and how many names it has.
const HV_NAME: u64 = 32;
const HV_NAME_COUNT: u64 = 60;
/// `HEK`: its length (i32) and key.
const HEK_LENGTH: u64 = 4;
const HEK_KEY: u64 = 8;
/// `XPV`'s string length (`xpv_cur`).
const PV_LENGTH: u64 = 16;
/// `COP`: its line (u32) and file (a C string).
const COP_LINE: u64 = 0x24;
const COP_FILE: u64 = 0x30;

/// Reads target memory: fills the buffer from the address, or fails.
pub(super) type Read<'a> = dyn FnMut(u64, &mut [u8]) -> Result<()> + 'a;

/// The name of the sub or format `cv` (`Outer::Worker::alpha`, `main::__ANON__`, a lexical
/// sub's own name), as Perl's `caller` gives it.
pub(super) fn sub_name(read: &mut Read<'_>, cv: u64) -> Result<String> {
    let kind = sv_type(read, cv)?.0;
    ensure!(kind == SVT_PVCV || kind == SVT_PVFM, "{cv:#x} is no sub (type {kind})");
    let body = word(read, cv, SV_ANY)?;
    let flags = u32_at(read, body, CV_FLAGS)?;
    let name = word(read, body, CV_GV)?;
    let (name, package) = if flags & CVF_NAMED != 0 {
        let package = if flags & CVF_LEXICAL != 0 { None } else { Some(word(read, body, CV_STASH)?) };
        (hek(read, name)?, package)
    } else {
        let kind = sv_type(read, name)?.0;
        ensure!(kind == SVT_PVGV, "the glob of sub {cv:#x} is of type {kind}");
        let glob = word(read, name, SV_ANY)?;
        let name = word(read, glob, GV_NAME)?;
        (hek(read, name)?, Some(word(read, glob, GV_STASH)?))
    };
    match package {
        Some(stash) if stash != 0 => Ok(format!("{}::{name}", stash_name(read, stash)?)),
        _ => Ok(name),
    }
}

/// The file and line of the statement `cop`.
pub(super) fn statement(read: &mut Read<'_>, cop: u64) -> Result<(String, u32)> {
    let line = u32_at(read, cop, COP_LINE)?;
    let file = word(read, cop, COP_FILE)?;
    Ok((c_string(read, file, MAX_PATH_BYTES)?, line))
}

/// The string of the scalar `sv`: the file a `require` loads.
pub(super) fn string(read: &mut Read<'_>, sv: u64) -> Result<String> {
    let (kind, flags) = sv_type(read, sv)?;
    ensure!((SVT_PV..=SVT_PVMG).contains(&kind) && flags & SVF_POK != 0, "{sv:#x} holds no string");
    let body = word(read, sv, SV_ANY)?;
    let length = word(read, body, PV_LENGTH)?;
    let text = word(read, sv, SV_U)?;
    bytes(read, text, length, MAX_PATH_BYTES)
}

/// The name of the stash `stash` (`Outer::Worker`).
fn stash_name(read: &mut Read<'_>, stash: u64) -> Result<String> {
    let (kind, flags) = sv_type(read, stash)?;
    ensure!(kind == SVT_PVHV && flags & SVF_OOK != 0, "{stash:#x} is no named stash");
    let body = word(read, stash, SV_ANY)?;
    let names = word(read, body, HV_NAME)?;
    let count = u32_at(read, body, HV_NAME_COUNT)? as i32;
    // With several names (a stash renamed or aliased), the first is its name, or when that is
    // NULL (a negative count) the next is its effective one.
    let name = match count {
        0 => names,
        _ => match word(read, names, 0)? {
            0 if count < 0 => word(read, names, 8)?,
            first => first,
        },
    };
    hek(read, name)
}

/// The type (`SvTYPE`) and flags of the SV at `sv`.
fn sv_type(read: &mut Read<'_>, sv: u64) -> Result<(u8, u32)> {
    ensure!(sv != 0, "no SV");
    let flags = u32_at(read, sv, SV_FLAGS)?;
    Ok((flags as u8, flags))
}

/// The key of the hash entry key `hek`.
fn hek(read: &mut Read<'_>, hek: u64) -> Result<String> {
    ensure!(hek != 0, "no name");
    let length = u32_at(read, hek, HEK_LENGTH)? as i32;
    ensure!(length >= 0, "a name of {length} bytes");
    bytes(read, hek.wrapping_add(HEK_KEY), length as u64, MAX_NAME_BYTES)
}

/// The NUL-terminated string at `at`, cut past `max` bytes.
fn c_string(read: &mut Read<'_>, at: u64, max: u64) -> Result<String> {
    ensure!(at != 0, "no string");
    let mut text = Vec::new();
    while (text.len() as u64) < max {
        // Read by pieces that end at a page's end at the latest: the string may end just before
        // unmapped memory.
        let from = at.wrapping_add(text.len() as u64);
        let mut chunk = vec![0u8; (STRING_PIECE - from % STRING_PIECE) as usize];
        read(from, &mut chunk)?;
        match chunk.iter().position(|&b| b == 0) {
            Some(end) => {
                text.extend_from_slice(&chunk[..end]);
                return Ok(String::from_utf8_lossy(&text).into_owned());
            }
            None => text.extend_from_slice(&chunk),
        }
    }
    text.truncate(max as usize);
    Ok(cut(&text))
}

/// The `length` bytes at `at`, their invalid UTF-8 replaced, cut past `max`.
fn bytes(read: &mut Read<'_>, at: u64, length: u64, max: u64) -> Result<String> {
    let mut text = vec![0u8; length.min(max) as usize];
    read(at, &mut text)?;
    Ok(if length > max { cut(&text) } else { String::from_utf8_lossy(&text).into_owned() })
}

fn cut(text: &[u8]) -> String {
    format!("{}…", String::from_utf8_lossy(text))
}

/// The word at `offset` from `base`.
fn word(read: &mut Read<'_>, base: u64, offset: u64) -> Result<u64> {
    let mut bytes = [0u8; 8];
    read(base.wrapping_add(offset), &mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

fn u32_at(read: &mut Read<'_>, base: u64, offset: u64) -> Result<u32> {
    let mut bytes = [0u8; 4];
    read(base.wrapping_add(offset), &mut bytes)?;
    Ok(u32::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use anyhow::anyhow;

    use super::*;

    /// Target memory made of pieces at addresses.
    #[derive(Default)]
    struct Memory(BTreeMap<u64, Vec<u8>>);

    impl Memory {
        fn put(&mut self, at: u64, bytes: &[u8]) -> &mut Self {
            self.0.insert(at, bytes.to_vec());
            self
        }

        fn word(&mut self, at: u64, value: u64) -> &mut Self {
            self.put(at, &value.to_le_bytes())
        }

        fn u32(&mut self, at: u64, value: u32) -> &mut Self {
            self.put(at, &value.to_le_bytes())
        }

        /// A HEK of `key` at `at`.
        fn hek(&mut self, at: u64, key: &str) -> &mut Self {
            self.u32(at + HEK_LENGTH, key.len() as u32);
            let mut bytes = key.as_bytes().to_vec();
            bytes.push(0);
            self.put(at + HEK_KEY, &bytes)
        }

        /// A stash named `name` at `at` (body at `at + 0x100`, its name's HEK at `at + 0x200`).
        fn stash(&mut self, at: u64, name: &str) -> &mut Self {
            self.u32(at + SV_FLAGS, u32::from(SVT_PVHV) | SVF_OOK).word(at + SV_ANY, at + 0x100);
            self.word(at + 0x100 + HV_NAME, at + 0x200).u32(at + 0x100 + HV_NAME_COUNT, 0);
            self.hek(at + 0x200, name)
        }

        fn read(&self) -> impl FnMut(u64, &mut [u8]) -> Result<()> + '_ {
            |addr, buf: &mut [u8]| {
                let (start, bytes) = self.0.range(..=addr).next_back().ok_or_else(|| anyhow!("unmapped"))?;
                let from = (addr - start) as usize;
                let piece = bytes.get(from..from + buf.len()).ok_or_else(|| anyhow!("unmapped {addr:#x}"))?;
                buf.copy_from_slice(piece);
                Ok(())
            }
        }
    }

    /// A sub at 0x1000 (body 0x1100) named through its glob at 0x2000 (body 0x2100, name
    /// 0x2200) in the stash at 0x3000.
    fn named_sub(memory: &mut Memory, name: &str, package: &str) {
        memory.u32(0x1000 + SV_FLAGS, u32::from(SVT_PVCV)).word(0x1000 + SV_ANY, 0x1100);
        memory.u32(0x1100 + CV_FLAGS, 0).word(0x1100 + CV_GV, 0x2000);
        memory.u32(0x2000 + SV_FLAGS, u32::from(SVT_PVGV)).word(0x2000 + SV_ANY, 0x2100);
        memory.word(0x2100 + GV_NAME, 0x2200).word(0x2100 + GV_STASH, 0x3000);
        memory.hek(0x2200, name).stash(0x3000, package);
    }

    #[test]
    fn a_sub_is_named_by_its_glob_in_its_package() {
        let mut memory = Memory::default();
        named_sub(&mut memory, "alpha", "Outer::Worker");
        assert_eq!(sub_name(&mut memory.read(), 0x1000).unwrap(), "Outer::Worker::alpha");
    }

    #[test]
    fn a_lexical_sub_is_named_by_its_own_name_alone() {
        let mut memory = Memory::default();
        memory.u32(0x1000 + SV_FLAGS, u32::from(SVT_PVCV)).word(0x1000 + SV_ANY, 0x1100);
        memory.u32(0x1100 + CV_FLAGS, CVF_NAMED | CVF_LEXICAL).word(0x1100 + CV_GV, 0x2200);
        memory.word(0x1100 + CV_STASH, 0x3000).hek(0x2200, "lexsub").stash(0x3000, "main");
        assert_eq!(sub_name(&mut memory.read(), 0x1000).unwrap(), "lexsub");
        memory.u32(0x1100 + CV_FLAGS, CVF_NAMED);
        assert_eq!(sub_name(&mut memory.read(), 0x1000).unwrap(), "main::lexsub");
    }

    #[test]
    fn what_is_not_a_sub_a_glob_or_a_stash_is_refused() {
        let mut memory = Memory::default();
        named_sub(&mut memory, "alpha", "main");
        memory.u32(0x2000 + SV_FLAGS, u32::from(SVT_PVHV));
        assert!(sub_name(&mut memory.read(), 0x1000).is_err(), "a glob that is a hash");
        named_sub(&mut memory, "alpha", "main");
        memory.u32(0x3000 + SV_FLAGS, u32::from(SVT_PVHV));
        assert!(sub_name(&mut memory.read(), 0x1000).is_err(), "a stash without a name");
        memory.u32(0x1000 + SV_FLAGS, u32::from(SVT_PV));
        assert!(sub_name(&mut memory.read(), 0x1000).is_err(), "a string");
    }

    #[test]
    fn names_are_cut_and_negative_lengths_refused() {
        let mut memory = Memory::default();
        named_sub(&mut memory, &"x".repeat(2000), "main");
        let name = sub_name(&mut memory.read(), 0x1000).unwrap();
        assert!(name.ends_with('…') && name.len() < 1100, "{name}");
        memory.u32(0x2200 + HEK_LENGTH, u32::MAX);
        assert!(sub_name(&mut memory.read(), 0x1000).is_err());
    }

    #[test]
    fn a_statement_has_its_file_and_line() {
        let mut memory = Memory::default();
        memory.u32(0x4000 + COP_LINE, 42).word(0x4000 + COP_FILE, 0x50f0);
        // The file's name runs past a piece of a read: it is read on.
        let mut file = b"/srv/app/lib/Outer/Worker.pm".to_vec();
        file.resize(0x110, 0);
        memory.put(0x50f0, &file);
        assert_eq!(
            statement(&mut memory.read(), 0x4000).unwrap(),
            ("/srv/app/lib/Outer/Worker.pm".into(), 42)
        );
    }

    #[test]
    fn a_required_file_is_its_scalar_s_string() {
        let mut memory = Memory::default();
        memory.u32(0x6000 + SV_FLAGS, u32::from(SVT_PV) | SVF_POK).word(0x6000 + SV_ANY, 0x6100);
        memory.word(0x6000 + SV_U, 0x6200).word(0x6100 + PV_LENGTH, 10).put(0x6200, b"Foo/Bar.pm\0");
        assert_eq!(string(&mut memory.read(), 0x6000).unwrap(), "Foo/Bar.pm");
    }
}
