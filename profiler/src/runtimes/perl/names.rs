//! What names a Perl frame, read from the target's memory by the addresses the kernel's walk
//! recorded: a sub's name and package (`CV` → its `GV` or name → its stash's name), a
//! statement's file and line (`COP`), the file a `require` loads (an `SV`'s string). Every
//! layout is the same in 5.36 and 5.42 (docs/perl-layouts.md §4). Everything read is the
//! target's: types are checked before pointers are followed, lengths bounded.
use anyhow::{Result, ensure};

/// Names longer than this, in bytes, are cut, ending with `…`.
pub(super) const MAX_NAME_BYTES: u64 = 1024;
/// Paths longer than this are cut too (`PATH_MAX`).
pub(super) const MAX_PATH_BYTES: u64 = 4096;

/// What a C string is read by: a page's end is at a multiple of it.
const STRING_PIECE: u64 = 256;

/// An SV's head: its body (`sv_any`), flags (u32, type in the low byte), and `sv_u`.
pub(super) const SV_ANY: u64 = 0;
pub(super) const SV_FLAGS: u64 = 12;
pub(super) const SV_U: u64 = 16;
/// `SvTYPE`s read: a string, a glob, a stash, a sub, a format.
pub(super) const SVT_PV: u8 = 3;
const SVT_PVMG: u8 = 7;
pub(super) const SVT_PVGV: u8 = 9;
pub(super) const SVT_PVHV: u8 = 12;
pub(super) const SVT_PVCV: u8 = 13;
const SVT_PVFM: u8 = 14;
/// `SVf_OOK`: a hash with its aux struct (a stash's name is there).
pub(super) const SVF_OOK: u32 = 0x0200_0000;
/// `SVf_POK`: the scalar holds a string.
pub(super) const SVF_POK: u32 = 0x0400;
/// `XPVCV`: `xcv_stash`, `xcv_gv_u`, `xcv_flags` (u32), and the flags read.
pub(super) const CV_STASH: u64 = 32;
pub(super) const CV_GV: u64 = 56;
pub(super) const CV_FLAGS: u64 = 92;
pub(super) const CVF_NAMED: u32 = 0x8000;
pub(super) const CVF_LEXICAL: u32 = 0x1_0000;
/// `XPVGV`: its name (`HEK *`) and stash.
pub(super) const GV_NAME: u64 = 32;
pub(super) const GV_STASH: u64 = 40;
/// `XPVHV` with aux: the name (a `HEK *`, or an array of them) and how many names it has.
pub(super) const HV_NAME: u64 = 32;
pub(super) const HV_NAME_COUNT: u64 = 60;
/// `HEK`: its length (i32) and key.
pub(super) const HEK_LENGTH: u64 = 4;
pub(super) const HEK_KEY: u64 = 8;
/// `XPV`'s string length (`xpv_cur`).
pub(super) const PV_LENGTH: u64 = 16;
/// `COP`: its line (u32) and file (a C string).
pub(super) const COP_LINE: u64 = 0x24;
pub(super) const COP_FILE: u64 = 0x30;

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
    use super::{super::fixture::*, *};

    fn named(fake: &Fake, cv: u64, cop: u64, sv: u64) -> NamedFrame {
        name_frame(&mut fake.reader(), cv, cop, sv)
    }

    /// The word made at `at`.
    fn word_at(fake: &Fake, at: u64) -> u64 {
        let mut bytes = [0u8; 8];
        assert!(fake.reader()(at, &mut bytes));
        u64::from_le_bytes(bytes)
    }

    #[test]
    fn a_sub_is_named_by_its_glob_in_its_package() {
        let mut fake = Fake::new();
        let cv = fake.sub("Outer::Worker", "alpha");
        assert_eq!(named(&fake, cv, 0, 0).sub.as_deref(), Some("Outer::Worker::alpha"));
    }

    #[test]
    fn a_sub_named_by_itself_is_in_its_package_unless_lexical() {
        let mut fake = Fake::new();
        let (lexical, named_in_main) =
            (fake.named_sub(None, "lexsub"), fake.named_sub(Some("main"), "lexsub"));
        assert_eq!(named(&fake, lexical, 0, 0).sub.as_deref(), Some("lexsub"));
        assert_eq!(named(&fake, named_in_main, 0, 0).sub.as_deref(), Some("main::lexsub"));
    }

    #[test]
    fn what_is_not_a_sub_a_glob_or_a_stash_is_refused() {
        let mut fake = Fake::new();
        let cv = fake.sub("main", "alpha");
        let glob = word_at(&fake, word_at(&fake, cv + SV_ANY) + CV_GV);
        fake.write_u32(glob + SV_FLAGS, u32::from(SVT_PVHV));
        assert_eq!(named(&fake, cv, 0, 0).sub, None, "a glob that is a hash");
        fake.write_u32(cv + SV_FLAGS, u32::from(SVT_PV));
        assert_eq!(named(&fake, cv, 0, 0).sub, None, "a string");
        let string = fake.string("alpha");
        assert_eq!(named(&fake, string, 0, 0).sub, None, "a scalar");
    }

    #[test]
    fn names_are_cut_and_negative_lengths_refused() {
        let mut fake = Fake::new();
        let cv = fake.sub("main", &"x".repeat(2000));
        let name = named(&fake, cv, 0, 0).sub.unwrap();
        assert!(name.ends_with('…') && name.chars().count() <= MAX_NAME_CHARS + "main::".len(), "{name}");
        let cv = fake.named_sub(None, "gone");
        let hek = word_at(&fake, word_at(&fake, cv + SV_ANY) + CV_GV);
        fake.write_u32(hek + HEK_LENGTH, u32::MAX);
        assert_eq!(named(&fake, cv, 0, 0).sub, None);
    }

    #[test]
    fn a_statement_has_its_file_and_line_and_a_require_its_file() {
        let mut fake = Fake::new();
        // A path longer than a piece of a read, so that it is read on.
        let file = format!("/srv/app/{}/Outer/Worker.pm", "lib".repeat(100));
        let (cop, sv) = (fake.cop(&file, 42), fake.string("Foo/Bar.pm"));
        let frame = named(&fake, 0, cop, sv);
        assert_eq!(frame.statement, Some((file, 42)));
        assert_eq!(frame.string.as_deref(), Some("Foo/Bar.pm"));
    }

    /// The seeds of the `perl_names` fuzz target (`profiler/fuzz/seeds/perl_names`): frames made
    /// here (a sub named through its glob, a lexical sub, a `require`), with their memory in one
    /// piece. `PROFILER_WRITE_SEEDS=1` writes them anew.
    #[test]
    fn the_perl_names_seeds_are_frames_made_here() {
        let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/perl_names");
        let write = std::env::var("PROFILER_WRITE_SEEDS").is_ok_and(|value| value == "1");
        let mut fake = Fake::new();
        let (alpha, lexsub) = (fake.sub("Outer::Worker", "alpha"), fake.named_sub(None, "lexsub"));
        let (cop, sv) = (fake.cop("/srv/app/lib/Outer/Worker.pm", 12), fake.string("Outer/Worker.pm"));
        let memory = fake.flat_memory();
        for (kind, cv, sub) in [("sub", alpha, "Outer::Worker::alpha"), ("lexical", lexsub, "lexsub")] {
            let bytes = Input { base: BASE, cv, cop, sv, memory: &memory }.to_bytes();
            // The seed, read back, names the frame.
            let input = Input::parse(&bytes).unwrap();
            let frame = named(&fake, input.cv, input.cop, input.sv);
            assert_eq!(frame.sub.as_deref(), Some(sub), "{kind}");
            assert_eq!(frame.statement, Some(("/srv/app/lib/Outer/Worker.pm".into(), 12)));
            assert_eq!(frame.string.as_deref(), Some("Outer/Worker.pm"));
            let path = seeds.join(kind);
            if write {
                std::fs::create_dir_all(&seeds).unwrap();
                std::fs::write(&path, &bytes).unwrap();
            }
            let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                committed == bytes,
                "{} is not made here: PROFILER_WRITE_SEEDS=1 writes it",
                path.display()
            );
        }
    }
}
