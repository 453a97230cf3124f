//! JIT symbols from perf map files (`/tmp/perf-PID.map`: `START SIZE NAME` per line, hex), the
//! convention of V8/Node, the JVM agents, .NET, LuaJIT and others.
//!
//! A process's map is its own file, in its own root, named after its pid in its own pid
//! namespace. It is read as the target controls it: through the opener that keeps paths inside
//! the target's root and opens regular files only (a FIFO or a device is refused, never
//! opened), and only when the target's user owns it (or root does) and could read it itself, as
//! perf requires. It is read when a frame first lands in the process's anonymous memory, then
//! only for what was appended since, when a later frame lands outside every known entry (the
//! JIT emitted more code), at most once per [`REREAD_INTERVAL_NS`] and up to [`MAX_MAP_BYTES`].
//! A map may also appear late (the JVM's `-XX:+DumpPerfMapAtExit` writes it as the process
//! exits) or be written anew as another file (`jcmd PID Compiler.perfmap`): each read looks at
//! the path again, and reads a file found there that is not the one read so far from its start.
//! Runtimes may delete the file at exit: what was read is kept until the process is forgotten.
//!
//! A process's jitdump (`jit-PID.dump`, perf's binary format: V8's `--perf-prof`, the JVM's perf
//! agent) names its code the same way, into the same entries: it is found as perf finds it, by
//! the mapping the JIT makes of it for tools, opened through that mapping (the kernel's link to
//! the very file mapped, whatever its path), under the same rules of ownership, and read on as
//! it grows ([`jitdump`](super::jitdump)).
//!
//! The file is the target's to fill: entries are kept compactly (16 bytes each, names in one
//! buffer per process, no allocation per line), charged to the budget of what targets describe
//! about themselves ([`DESCRIBED`]), and a process's map stops growing at [`MAX_ENTRIES`]
//! entries or [`MAX_NAME_BYTES`] of names, or when that budget has no room, which is said once.
//! When the budget was short, the maps of processes none of whose frames were named in the last
//! epoch are let go (read again from their start if needed).
use std::{
    cell::Cell,
    fs::File,
    os::fd::AsFd as _,
    os::unix::fs::{FileExt as _, MetadataExt as _},
    path::PathBuf,
};

use rustc_hash::FxHashMap;

use super::{
    Warnings,
    jitdump::{Event, JitDump},
};
use crate::{
    address_space::Identity,
    model::Tgid,
    untrusted::{Charge, DESCRIBED, mounts::Answerer, open as target_open},
};

/// How often a process's perf map may be read again.
const REREAD_INTERVAL_NS: u64 = 100_000_000;
/// Bytes of one process's perf map read at most, in all.
const MAX_MAP_BYTES: u64 = 256 << 20;
/// Bytes read at most at once.
const CHUNK_BYTES: u64 = 8 << 20;
/// Entries and bytes of names kept per process: far beyond what JITs write (a large JVM or Node
/// service maps a few hundred thousand), well within a memory budget (40 MiB in all).
const MAX_ENTRIES: usize = 1 << 20;
const MAX_NAME_BYTES: usize = 24 << 20;
/// A name's bytes kept at most.
const MAX_NAME_LEN: usize = 4096;
/// A line's bytes kept at most before its end comes: its start and size, and its name.
const MAX_LINE_BYTES: usize = MAX_NAME_LEN + 64;

/// One line of the map: where the code is, and where its name is in [`PerfMap::names`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    start: u64,
    /// Code sizes beyond 4 GiB are cut there.
    size: u32,
    name: u32,
}

/// One process's perf map, as read so far.
#[derive(Debug, Default)]
pub struct PerfMap {
    /// Sorted by start.
    entries: Vec<Entry>,
    /// Every name, each as its length (2 bytes) and then its bytes, lossily UTF-8.
    names: Vec<u8>,
    /// The file read so far (device, inode), and how far: the file found at the map's path is
    /// read on from there while it is the same one. Nothing is held open between reads, so that
    /// no number of processes multiplies the profiler's descriptors.
    file: Option<(u64, u64)>,
    read_bytes: u64,
    /// The end of the last read, up to its last line break, not parsed yet.
    partial: Vec<u8>,
    read_at_ns: Option<u64>,
    /// Its refusal was said (once: a map refused is looked at again at every read).
    refusal_said: bool,
    /// Lines left out once the map was full, and whether for want of room in the budget.
    left_out: u64,
    short: bool,
    /// What its entries and names hold of the budget.
    charge: Option<Charge>,
    /// The epoch of the budget in which it was last looked up.
    used: Cell<u64>,
    /// The process's jitdump, once found, and whether its refusal was said.
    dump: Option<DumpFile>,
    dump_refusal_said: bool,
}

/// A jitdump being read: which file (device, inode), how far, and what its records so far left
/// pending.
#[derive(Debug)]
struct DumpFile {
    file: Option<(u64, u64)>,
    read_bytes: u64,
    parser: JitDump,
}

impl PerfMap {
    fn find(&self, addr: u64) -> Option<&Entry> {
        let index = self.entries.partition_point(|e| e.start <= addr);
        let entry = self.entries.get(index.checked_sub(1)?)?;
        (addr - entry.start < u64::from(entry.size)).then_some(entry)
    }

    /// The JIT symbol at `addr`, if the map names one.
    pub fn name(&self, addr: u64) -> Option<&str> {
        self.used.set(DESCRIBED.epoch());
        Some(self.name_at(self.find(addr)?.name as usize))
    }

    /// Takes the next bytes of the file: its complete lines are parsed, the rest waits for what
    /// follows.
    pub fn append(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let complete = self.partial.iter().rposition(|&b| b == b'\n').map_or(0, |at| at + 1);
        let known = self.entries.len();
        let lines = std::mem::take(&mut self.partial);
        for line in lines[..complete].split(|&b| b == b'\n') {
            if let Some((start, size, name)) = parse_line(line) {
                self.push(start, size, &String::from_utf8_lossy(name));
            }
        }
        // A line not finished yet is kept up to what naming reads of it (the rest of a longer
        // one would only be cut from its name): no line without an end grows the map.
        self.partial = lines[complete..lines.len().min(complete + MAX_LINE_BYTES)].to_vec();
        if self.entries.len() > known {
            keep_latest_by_start(&mut self.entries);
        }
    }

    fn push(&mut self, start: u64, size: u64, name: &str) {
        let name = cut(name, MAX_NAME_LEN);
        if self.entries.len() >= MAX_ENTRIES || self.names.len() + 2 + name.len() > MAX_NAME_BYTES {
            self.left_out += 1;
            return;
        }
        let bytes = (std::mem::size_of::<Entry>() + 2 + name.len()) as u64;
        let charged = match &mut self.charge {
            Some(charge) => charge.grow(bytes),
            None => DESCRIBED.charge(bytes).map(|charge| self.charge = Some(charge)).is_some(),
        };
        if !charged {
            (self.left_out, self.short) = (self.left_out + 1, true);
            return;
        }
        let at = self.names.len() as u32;
        self.names.extend_from_slice(&(name.len() as u16).to_le_bytes());
        self.names.extend_from_slice(name.as_bytes());
        self.entries.push(Entry { start, size: size.min(u64::from(u32::MAX)) as u32, name: at });
    }

    /// Reads on from `file`, found at the map's path: the file read so far, or one written in
    /// its place, read from its start (everything, too, if it shrank: it was written anew).
    fn read_from(&mut self, file: &File) {
        if self.file != identity(file) {
            self.start_over();
            self.file = identity(file);
        }
        let Some(size) = file.metadata().ok().map(|m| m.len()) else { return };
        if size < self.read_bytes {
            self.start_over();
        }
        let Some(chunk) = chunk_at(file, size, self.read_bytes) else { return };
        self.read_bytes += chunk.len() as u64;
        self.append(&chunk);
    }

    fn start_over(&mut self) {
        (self.read_bytes, self.entries, self.names, self.left_out) = (0, Vec::new(), Vec::new(), 0);
        (self.short, self.charge) = (false, None);
        self.partial.clear();
        // Its entries are gone with the map's: it is read again from its start.
        if let Some(dump) = &mut self.dump {
            (dump.read_bytes, dump.parser) = (0, JitDump::default());
        }
    }

    /// Reads on from `file`, found as the process's jitdump: what was appended since the last
    /// read of the same file (all of it again, if it shrank: it was written anew), or another
    /// one from its start, within the map's bounds.
    fn read_dump_from(&mut self, file: &File) {
        if self.dump.as_ref().map(|dump| dump.file) != Some(identity(file)) {
            self.dump = Some(DumpFile { file: identity(file), read_bytes: 0, parser: JitDump::default() });
        }
        let Some(dump) = &mut self.dump else { return };
        let Some(size) = file.metadata().ok().map(|m| m.len()) else { return };
        if size < dump.read_bytes {
            (dump.read_bytes, dump.parser) = (0, JitDump::default());
        }
        let Some(chunk) = chunk_at(file, size, dump.read_bytes) else { return };
        dump.read_bytes += chunk.len() as u64;
        let mut parser = std::mem::take(&mut dump.parser);
        let known = self.entries.len();
        let mut moves = Vec::new();
        parser.append(&chunk, &mut |event| match event {
            Event::Load { start, size, name } => self.push(start, size, name),
            Event::Move { old, new, size } => moves.push((old, new, size)),
        });
        if let Some(dump) = &mut self.dump {
            dump.parser = parser;
        }
        if self.entries.len() > known {
            keep_latest_by_start(&mut self.entries);
        }
        // Moved code keeps its name: looked up once the loads before it are in place.
        let moved: Vec<(u64, u64, String)> = moves
            .into_iter()
            .filter_map(|(old, new, size)| {
                let entry = self.find(old).filter(|entry| entry.start == old)?;
                Some((new, size, self.name_at(entry.name as usize).to_owned()))
            })
            .collect();
        if !moved.is_empty() {
            for (new, size, name) in moved {
                self.push(new, size, &name);
            }
            keep_latest_by_start(&mut self.entries);
        }
    }

    fn name_at(&self, at: usize) -> &str {
        let len = u16::from_le_bytes([self.names[at], self.names[at + 1]]) as usize;
        // Stored from a `&str`, cut at a character boundary.
        std::str::from_utf8(&self.names[at + 2..at + 2 + len]).unwrap_or_default()
    }
}

/// Adds `line` to `refused` unless `said` says it was already.
fn say_once(said: &mut bool, refused: &mut Warnings, line: impl FnOnce() -> String) {
    if !std::mem::replace(said, true) {
        refused.push(line);
    }
}

/// A file's identity: another file at the same path (written anew) has another.
fn identity(file: &File) -> Option<(u64, u64)> {
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

/// The bytes of `file` (of `size` bytes) from `from` on: at most [`CHUNK_BYTES`], and none past
/// [`MAX_MAP_BYTES`].
fn chunk_at(file: &File, size: u64, from: u64) -> Option<Vec<u8>> {
    let wanted = size.min(MAX_MAP_BYTES).saturating_sub(from).min(CHUNK_BYTES);
    let mut chunk = vec![0; wanted as usize];
    let read = file.read_at(&mut chunk, from).ok()?;
    chunk.truncate(read);
    Some(chunk)
}

#[derive(Debug, Default)]
pub struct PerfMaps {
    by_tgid: FxHashMap<Tgid, PerfMap>,
    /// Why maps were refused, one line per process.
    refused: Warnings,
    /// The last epoch of the budget in which the maps were relieved.
    relieved: u64,
}

impl PerfMaps {
    /// Notes that a frame of process `tgid` (known as `identity`) ran at `addr` in anonymous
    /// memory, at `now_ns`: reads its perf map when the address is new to it.
    pub fn observe(&mut self, tgid: Tgid, identity: &Identity, addr: u64, now_ns: u64) {
        self.relieve();
        let map = self.by_tgid.entry(tgid).or_default();
        map.used.set(DESCRIBED.epoch());
        let stale = map.read_at_ns.is_none_or(|at| now_ns.saturating_sub(at) >= REREAD_INTERVAL_NS);
        if map.find(addr).is_none() && stale {
            self.read_again(tgid, identity, now_ns);
        }
    }

    /// Reads the map of process `tgid` (known as `identity`) again at `now_ns`, however
    /// recently it was read: also at the end of a recording or window, and as the process is
    /// forgotten, for the frames no map named yet.
    pub fn read_again(&mut self, tgid: Tgid, identity: &Identity, now_ns: u64) {
        let Self { by_tgid, refused, .. } = self;
        let map = by_tgid.entry(tgid).or_default();
        // A full map is not read on: what follows would be left out anyway (but for want of
        // room in the budget, which may come back).
        if map.left_out > 0 && !map.short {
            return;
        }
        match open(identity) {
            Ok(Some(file)) => map.read_from(&file),
            // Gone since it was read (what was read is kept), or not there yet.
            Ok(None) => {}
            Err(why) => say_once(&mut map.refusal_said, refused, || {
                format!("the perf map of PID {tgid} was not read: {why}")
            }),
        }
        match open_dump(tgid, identity) {
            Ok(Some(file)) => map.read_dump_from(&file),
            Ok(None) => {}
            Err(why) => say_once(&mut map.dump_refusal_said, refused, || {
                format!("the jitdump of PID {tgid} was not read: {why}")
            }),
        }
        map.read_at_ns = Some(now_ns);
        if let Some(why) = map.dump.as_ref().and_then(|dump| dump.parser.refused()) {
            say_once(&mut map.dump_refusal_said, refused, || {
                format!("the jitdump of PID {tgid} was read no further: {why}")
            });
        }
        if map.left_out > 0 {
            refused.push(|| match map.short {
                true => format!(
                    "the perf map of PID {tgid} was read only in part: the memory for what targets describe was spent"
                ),
                false => format!(
                    "the perf map of PID {tgid} holds more than {MAX_ENTRIES} entries or {} MiB of names: the rest was left out",
                    MAX_NAME_BYTES >> 20
                ),
            });
        }
    }

    /// The JIT symbol at `addr` in process `tgid`, if its perf map names one.
    pub fn name(&self, tgid: Tgid, addr: u64) -> Option<&str> {
        self.by_tgid.get(&tgid)?.name(addr)
    }

    /// Forgets the map of a process gone.
    pub fn forget(&mut self, tgid: Tgid) {
        self.by_tgid.remove(&tgid);
    }

    /// Once per epoch: if the budget was short since, lets go of the maps not looked up in the
    /// last epoch.
    fn relieve(&mut self) {
        let now = DESCRIBED.epoch();
        if self.relieved == now {
            return;
        }
        if DESCRIBED.short_in() >= self.relieved {
            self.by_tgid.retain(|_, map| map.used.get() + 1 >= now);
        }
        self.relieved = now;
    }

    /// Why maps were refused, one line per process.
    pub fn into_refused(self) -> Warnings {
        self.refused
    }
}

/// The perf map of a process, if it has one that is its own: `None` when there is none, an error
/// saying why when there is one that is refused. The process's own map is a regular file (not a
/// link: another user could plant one at the predictable path before the process starts, and
/// point it anywhere) owned by the process's effective user and writable by nobody else.
fn open(identity: &Identity) -> Result<Option<File>, String> {
    let path = PathBuf::from(format!("/tmp/perf-{}.map", identity.ns_pid));
    let file = match identity.root.open_unlinked(&path, &identity.asked()) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(format!("{}: {err}", path.display())),
    };
    owned_by_the_process(file, identity, &path).map(Some)
}

/// The jitdump of process `tgid`, if it maps one: opened through its mapping, and taken under
/// the perf map's rules (owned by the process's user, writable by nobody else).
fn open_dump(tgid: Tgid, identity: &Identity) -> Result<Option<File>, String> {
    let Some(mapping) = &identity.jitdump else { return Ok(None) };
    let handle = match target_open::mapped_handle(tgid, identity.user, mapping.at()) {
        Ok(handle) => handle,
        // Unmapped since (the process exited): what was read is kept.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err.to_string()),
    };
    if identity.answerer(handle.as_fd()) != Some(Answerer::Kernel) {
        return Err("its file system is not the kernel's (FUSE, a user's overlay, or network)".into());
    }
    let file = target_open::reopen(handle).map_err(|err| err.to_string())?;
    owned_by_the_process(file, identity, &target_open::map_files_path(tgid, mapping.start, mapping.end))
        .map(Some)
}

/// `file` (at `path`), if it is a regular file owned by the process's user and writable by
/// nobody else.
fn owned_by_the_process(file: File, identity: &Identity, path: &std::path::Path) -> Result<File, String> {
    let metadata = file.metadata().map_err(|err| err.to_string())?;
    if !metadata.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    let (owner, mode) = (metadata.uid(), metadata.mode() & 0o7777);
    if identity.uid != Some(owner) {
        let user = identity.uid.map_or("unknown".to_owned(), |uid| format!("uid {uid}"));
        return Err(format!(
            "{} is owned by uid {owner}, not by the process's user ({user})",
            path.display()
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!("{} is writable by other users (mode {mode:o})", path.display()));
    }
    Ok(file)
}

/// A line's start, size and name (`START SIZE NAME`, hex numbers), if it is one with code.
fn parse_line(line: &[u8]) -> Option<(u64, u64, &[u8])> {
    let hex = |field: &[u8]| {
        let field = field.strip_prefix(b"0x").unwrap_or(field);
        u64::from_str_radix(std::str::from_utf8(field).ok()?, 16).ok()
    };
    let mut fields = line.splitn(3, |&b| b == b' ');
    let start = hex(fields.next()?)?;
    let size = hex(fields.next()?)?;
    let name = fields.next()?.trim_ascii();
    (size > 0 && !name.is_empty()).then_some((start, size, name))
}

/// `name` cut to at most `max` bytes, at a character boundary.
fn cut(name: &str, max: usize) -> &str {
    let mut end = name.len().min(max);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// Entries by start; later lines win for the same start (code regenerated in place).
fn keep_latest_by_start(entries: &mut Vec<Entry>) {
    entries.reverse();
    entries.sort_by_key(|e| e.start);
    entries.dedup_by_key(|e| e.start);
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn a_jitdump_names_code_beside_the_perf_map_and_is_read_on_as_it_grows() {
        use crate::symbolize::jitdump::tests::{code_load, header};
        let path = std::env::temp_dir().join(format!("jit-test-{}.dump", std::process::id()));
        let mut file = File::create(&path).unwrap();
        file.write_all(&header()).unwrap();
        file.write_all(&code_load(0x5000, 0x20, "JS:*alpha a.js:1")).unwrap();
        let mut map = PerfMap::default();
        map.append(b"7f0000001000 40 from the map\n");
        let read = |map: &mut PerfMap| map.read_dump_from(&File::open(&path).unwrap());
        read(&mut map);
        assert_eq!(map.name(0x5010), Some("JS:*alpha a.js:1"));
        assert_eq!(map.name(0x7f0000001000), Some("from the map"));
        // Half a record, then the rest: named once whole.
        let record = code_load(0x6000, 0x20, "JS:~beta a.js:5");
        file.write_all(&record[..30]).unwrap();
        read(&mut map);
        assert_eq!(map.name(0x6000), None);
        file.write_all(&record[30..]).unwrap();
        read(&mut map);
        assert_eq!(map.name(0x6000), Some("JS:~beta a.js:5"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_line_that_never_ends_is_kept_to_what_naming_reads() {
        let mut map = PerfMap::default();
        map.append(b"1000 10 ");
        for _ in 0..256 {
            map.append(&[b'n'; 4096]);
            assert!(map.partial.len() <= MAX_LINE_BYTES);
        }
        map.append(b"\n2000 10 next\n");
        assert_eq!(map.name(0x1000).map(str::len), Some(MAX_NAME_LEN), "named, its name cut");
        assert_eq!(map.name(0x2000), Some("next"));
    }

    #[test]
    fn parses_perf_map_lines() {
        let text = "7f0000001000 40 LazyCompile:*foo bar.js:1\n0x7f0000002000 0x10 stub\ngarbage\n7f0000003000 0 empty\n";
        let mut map = PerfMap::default();
        map.append(text.as_bytes());
        assert_eq!(map.entries.len(), 2);
        assert_eq!(map.name(0x7f0000001020), Some("LazyCompile:*foo bar.js:1"));
        assert_eq!(map.name(0x7f0000001040), None);
        assert_eq!(map.name(0x7f000000200f), Some("stub"));
        assert_eq!(map.name(0x10), None);
        map.append(b"7f0000002000 10 stub again\n");
        assert_eq!(map.name(0x7f0000002000), Some("stub again"), "the later line wins");
    }

    #[test]
    fn a_map_of_millions_of_lines_stops_at_its_bounds() {
        let mut map = PerfMap::default();
        let lines: String =
            (0..MAX_ENTRIES as u64 + 10).map(|i| format!("{:x} 1 f{i}\n", 0x1000 + i)).collect();
        map.append(lines.as_bytes());
        assert_eq!(map.entries.len(), MAX_ENTRIES);
        assert_eq!(map.left_out, 10);
        assert_eq!(map.name(0x1000 + 5), Some("f5"));
        // 16 bytes an entry, the names packed: no allocation per line.
        assert_eq!(std::mem::size_of::<Entry>(), 16);
        assert!(map.names.len() < MAX_ENTRIES * 12);
        let mut map = PerfMap::default();
        let long = format!("1000 10 {}\n", "é".repeat(MAX_NAME_LEN));
        map.append(long.as_bytes());
        assert_eq!(map.name(0x1000).map(str::len), Some(MAX_NAME_LEN), "cut at a character boundary");
        let many_long: String = (0..MAX_NAME_BYTES / MAX_NAME_LEN + 10)
            .map(|i| format!("{:x} 1 {}\n", 0x10_0000 + i, "n".repeat(MAX_NAME_LEN)))
            .collect();
        map.append(many_long.as_bytes());
        assert!(map.names.len() <= MAX_NAME_BYTES && map.left_out > 0);
    }

    fn own_identity(ns_pid: u32) -> Identity {
        Identity { uid: Some(rustix::process::geteuid().as_raw()), ns_pid, ..Identity::own() }
    }

    #[test]
    fn reads_what_was_appended_and_keeps_it() {
        // A pid of our own making, so that no other test's map is there.
        let pid = Tgid(3_000_000 + std::process::id() % 1_000_000);
        let path = format!("/tmp/perf-{pid}.map");
        std::fs::write(&path, "1000 100 jitted\n2000 10 half").unwrap();
        let mut maps = PerfMaps::default();
        let identity = own_identity(pid.0);
        maps.observe(pid, &identity, 0x1010, 1);
        assert_eq!(maps.name(pid, 0x1010), Some("jitted"));
        assert_eq!(maps.name(pid, 0x2000), None, "a line not finished yet");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"-line\n3000 10 more\n")
            .unwrap();
        maps.observe(pid, &identity, 0x3000, 2);
        assert_eq!(maps.name(pid, 0x3000), None, "not read again before the interval");
        maps.observe(pid, &identity, 0x3000, 1 + REREAD_INTERVAL_NS);
        assert_eq!((maps.name(pid, 0x2000), maps.name(pid, 0x3000)), (Some("half-line"), Some("more")));
        std::fs::remove_file(&path).unwrap();
        maps.observe(pid, &identity, 0x5000, 1 + 2 * REREAD_INTERVAL_NS);
        assert_eq!(maps.name(pid, 0x1010), Some("jitted"), "kept after the file is gone");
        maps.forget(pid);
        assert_eq!(maps.name(pid, 0x1010), None);
        assert_eq!(maps.refused.count(), 0);
    }

    /// A map that appears after the first frames (written at exit), and one written anew as
    /// another file (`jcmd PID Compiler.perfmap`), are read when read again.
    #[test]
    fn maps_written_late_or_anew_are_read_again() {
        let pid = Tgid(4_000_000 + std::process::id() % 1_000_000);
        let path = format!("/tmp/perf-{pid}.map");
        let _ = std::fs::remove_file(&path);
        let mut maps = PerfMaps::default();
        let identity = own_identity(pid.0);
        maps.observe(pid, &identity, 0x1010, 1);
        assert_eq!(maps.name(pid, 0x1010), None, "no map yet");
        std::fs::write(&path, "1000 100 at_exit\n").unwrap();
        maps.read_again(pid, &identity, 2);
        assert_eq!(maps.name(pid, 0x1010), Some("at_exit"), "read again however recently");
        let written_anew = format!("{path}.new");
        std::fs::write(&written_anew, "1000 100 recompiled\n2000 10 new\n").unwrap();
        std::fs::rename(&written_anew, &path).unwrap();
        maps.read_again(pid, &identity, 3);
        assert_eq!((maps.name(pid, 0x1010), maps.name(pid, 0x2000)), (Some("recompiled"), Some("new")));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(maps.refused.count(), 0);
    }

    #[test]
    fn refuses_maps_the_process_could_not_read() {
        let pid = Tgid(3_500_000 + std::process::id() % 1_000_000);
        let path = format!("/tmp/perf-{pid}.map");
        std::fs::write(&path, "1000 100 secret\n").unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let mut maps = PerfMaps::default();
        // A process of another user than the file's owner (us, or root), who cannot read it.
        let another_user = rustix::process::geteuid().as_raw().wrapping_add(1).max(1);
        let identity = Identity { uid: Some(another_user), ns_pid: pid.0, ..Identity::own() };
        maps.observe(pid, &identity, 0x1010, 1);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(maps.name(pid, 0x1010), None);
        assert_eq!(maps.refused.count(), 1, "{:?}", maps.refused);
    }
}
