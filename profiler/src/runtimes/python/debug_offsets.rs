//! CPython 3.13 and later describe their own layout at the start of `_PyRuntime`
//! (`_Py_DebugOffsets`, written for debuggers and out-of-process profilers). The image carries it
//! in its initialized data, so it is read from the file, and it is the source of every offset it
//! states: the version's table ([`Layout`]) is the check. A field the image places elsewhere than
//! the table (a patch release, a distribution's patched build) is followed where the reads can
//! follow it, and the build is refused, naming the field, where they cannot; so is a build of
//! another version, or a free-threaded one.
use profiler_common::runtimes::python::PythonOffsets;

use super::layout::{Instruction, Layout, Version};

/// `cookie`: the first 8 bytes of `_Py_DebugOffsets`.
const COOKIE: &[u8; 8] = b"xdebugpy";

/// Where `version` (`PY_VERSION_HEX`) and `free_threaded` sit in `_Py_DebugOffsets`.
pub(super) const VERSION: usize = 8;
pub(super) const FREE_THREADED: usize = 16;

/// The fields of `_Py_DebugOffsets` read here, by their path in the struct, and where each sits
/// in 3.13's struct and in 3.14's (which grew: `interpreter_state` gained two fields,
/// `interpreter_frame` two, `code_object` one); a test checks 3.13's against the debug
/// information of the installed 3.13, and one checks both against the images.
pub(super) const FIELDS: [(&str, [usize; 2]); 15] = [
    ("runtime_state.interpreters_head", [40, 40]),
    ("interpreter_state.threads_head", [72, 72]),
    ("thread_state.next", [168, 192]),
    ("thread_state.current_frame", [184, 208]),
    ("thread_state.thread_id", [192, 216]),
    ("interpreter_frame.previous", [232, 256]),
    ("interpreter_frame.executable", [240, 264]),
    ("interpreter_frame.instr_ptr", [248, 272]),
    ("interpreter_frame.owner", [264, 288]),
    ("code_object.filename", [280, 320]),
    ("code_object.name", [288, 328]),
    ("code_object.qualname", [296, 336]),
    ("code_object.linetable", [304, 344]),
    ("code_object.firstlineno", [312, 352]),
    ("code_object.co_code_adaptive", [344, 384]),
];
/// The bytes of `_Py_DebugOffsets` read: up to the last field above, in the newest version.
pub(super) const BYTES: usize = 392;

/// Where the fields of [`FIELDS`] sit in `version`'s `_Py_DebugOffsets` (3.13 and 3.14).
pub(super) fn positions(version: Version) -> Option<impl Iterator<Item = (&'static str, usize)>> {
    let column = match version.0 {
        13 => 0,
        14 => 1,
        _ => return None,
    };
    Some(FIELDS.iter().map(move |&(path, at)| (path, at[column])))
}

/// Where userspace reads a code object's fields: at most this far in (its header is read whole).
const MAX_CODE_FIELD: u64 = 1024;
/// A `_PyRuntimeState` or `PyInterpreterState` field the kernel reads a word of, in place.
const MAX_STATE_FIELD: u64 = 1 << 20;

/// Why an image's own offsets refuse it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Disagreement {
    /// The image is not the version its table was chosen for.
    Version(u64),
    FreeThreaded,
    /// A field the image places where the reads cannot follow: its path, and where.
    Moved(&'static str, u64),
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Version(hex) => write!(f, "its _Py_DebugOffsets state version {hex:#x}"),
            Self::FreeThreaded => write!(f, "free-threaded"),
            Self::Moved(path, _) => write!(f, "{path} moved"),
        }
    }
}

/// The release `_Py_DebugOffsets` at the start of `runtime` states (`3.14.10`), if it has them.
pub(super) fn release(runtime: &[u8]) -> Option<String> {
    if runtime.get(..COOKIE.len()) != Some(COOKIE) {
        return None;
    }
    let hex = word(runtime, VERSION)?;
    Some(format!("{}.{}.{}", hex >> 24, (hex >> 16) & 0xff, (hex >> 8) & 0xff))
}

/// The layout of the image whose bytes of `_PyRuntime` are `runtime`: `table`, with every field
/// `_Py_DebugOffsets` states where it says. Bytes that do not start with the cookie carry none:
/// the table as it is.
pub(super) fn adopt(table: &Layout, runtime: &[u8]) -> Result<Layout, Disagreement> {
    if runtime.get(..COOKIE.len()) != Some(COOKIE) {
        return Ok(*table);
    }
    let version = word(runtime, VERSION).unwrap_or(u64::MAX);
    let positions = positions(table.version);
    let Some(positions) =
        positions.filter(|_| version >> 24 == 3 && (version >> 16) & 0xff == u64::from(table.version.0))
    else {
        return Err(Disagreement::Version(version));
    };
    if word(runtime, FREE_THREADED) != Some(0) {
        return Err(Disagreement::FreeThreaded);
    }
    let mut layout = *table;
    for (path, position) in positions {
        let image = word(runtime, position).unwrap_or(u64::MAX);
        if image != stated(table, path) && !follow(&mut layout, path, image) {
            return Err(Disagreement::Moved(path, image));
        }
    }
    Ok(layout)
}

fn word(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// What `layout` says of the field at `path` of `_Py_DebugOffsets`.
fn stated(layout: &Layout, path: &str) -> u64 {
    let k = &layout.kernel;
    let code_adaptive = match layout.instruction {
        Instruction::Pointer { code_adaptive } => code_adaptive,
        Instruction::LastiBytes | Instruction::LastiUnits => u32::MAX,
    };
    let offset = match path {
        // `interpreters.main` follows `interpreters.head`, a pointer.
        "runtime_state.interpreters_head" => k.runtime_main_interpreter - 8,
        "interpreter_state.threads_head" => k.interpreter_threads,
        "thread_state.next" => k.thread_next,
        "thread_state.current_frame" => k.thread_frame,
        "thread_state.thread_id" => k.thread_id,
        "interpreter_frame.previous" => k.frame_back,
        "interpreter_frame.executable" => k.frame_code,
        "interpreter_frame.instr_ptr" => k.frame_instr,
        "interpreter_frame.owner" => k.frame_owner,
        "code_object.filename" => layout.code.filename,
        "code_object.name" => layout.code.name,
        "code_object.qualname" => layout.code.qualname.unwrap_or(u32::MAX),
        "code_object.linetable" => layout.code.line_table,
        "code_object.firstlineno" => layout.code.first_line,
        "code_object.co_code_adaptive" => code_adaptive,
        _ => unreachable!("a field of FIELDS without a counterpart: {path}"),
    };
    u64::from(offset)
}

/// Puts the field at `path` at `offset` in `layout`, if the reads can follow it there: the
/// kernel's reads of a thread state, a frame and a code object are of a bounded size.
fn follow(layout: &mut Layout, path: &str, offset: u64) -> bool {
    let (limit, size) = match path {
        "runtime_state.interpreters_head" | "interpreter_state.threads_head" => (MAX_STATE_FIELD, 8),
        "thread_state.next" | "thread_state.current_frame" | "thread_state.thread_id" => {
            (u64::from(PythonOffsets::THREAD_BYTES), 8)
        }
        "interpreter_frame.owner" => (u64::from(PythonOffsets::MAX_FRAME_BYTES), 1),
        path if path.starts_with("interpreter_frame.") => (u64::from(PythonOffsets::MAX_FRAME_BYTES), 8),
        "code_object.firstlineno" => (u64::from(PythonOffsets::CODE_BYTES), 4),
        _ => (MAX_CODE_FIELD, 8),
    };
    let Some(offset) = offset.checked_add(size).filter(|&end| end <= limit).map(|_| offset as u32) else {
        return false;
    };
    let k = &mut layout.kernel;
    match path {
        "runtime_state.interpreters_head" => k.runtime_main_interpreter = offset + 8,
        "interpreter_state.threads_head" => k.interpreter_threads = offset,
        "thread_state.next" => k.thread_next = offset,
        "thread_state.current_frame" => k.thread_frame = offset,
        "thread_state.thread_id" => k.thread_id = offset,
        "interpreter_frame.previous" => k.frame_back = offset,
        "interpreter_frame.executable" => k.frame_code = offset,
        "interpreter_frame.instr_ptr" => k.frame_instr = offset,
        "interpreter_frame.owner" => k.frame_owner = offset,
        "code_object.filename" => layout.code.filename = offset,
        "code_object.name" => layout.code.name = offset,
        "code_object.qualname" => layout.code.qualname = Some(offset),
        "code_object.linetable" => layout.code.line_table = offset,
        "code_object.firstlineno" => {
            layout.code.first_line = offset;
            k.code_first_line = offset;
        }
        "code_object.co_code_adaptive" => layout.instruction = Instruction::Pointer { code_adaptive: offset },
        _ => unreachable!("a field of FIELDS without a counterpart: {path}"),
    }
    // The frame is read up to the end of its last field used.
    k.frame_bytes = [k.frame_back + 8, k.frame_code + 8, k.frame_instr + 8, k.frame_owner + 1]
        .into_iter()
        .max()
        .unwrap_or(PythonOffsets::MAX_FRAME_BYTES);
    true
}

#[cfg(test)]
mod tests {
    use super::super::layout::{self, Version};
    use super::*;

    /// `_Py_DebugOffsets` as the table would write them.
    fn agreeing(layout: &Layout) -> Vec<u8> {
        let mut bytes = vec![0; BYTES];
        bytes[..8].copy_from_slice(COOKIE);
        let hex = 0x0300_0af0_u64 | (u64::from(layout.version.0) << 16);
        bytes[VERSION..VERSION + 8].copy_from_slice(&hex.to_le_bytes());
        for (path, position) in positions(layout.version).unwrap() {
            bytes[position..position + 8].copy_from_slice(&stated(layout, path).to_le_bytes());
        }
        bytes
    }

    fn put(bytes: &mut [u8], version: Version, path: &str, offset: u64) {
        let (_, position) = positions(version).unwrap().find(|&(p, _)| p == path).unwrap();
        bytes[position..position + 8].copy_from_slice(&offset.to_le_bytes());
    }

    #[test]
    fn the_table_agrees_with_itself() {
        for minor in [13, 14] {
            let layout = layout::layout(Version(minor)).unwrap();
            assert_eq!(adopt(layout, &agreeing(layout)), Ok(*layout));
            assert_eq!(release(&agreeing(layout)).unwrap(), format!("3.{minor}.10"));
        }
    }

    #[test]
    fn a_moved_field_is_followed() {
        let table = layout::layout(Version(14)).unwrap();
        // A patch release that put 8 bytes before `instr_ptr` and `owner`.
        let mut bytes = agreeing(table);
        put(&mut bytes, Version(14), "interpreter_frame.instr_ptr", 64);
        put(&mut bytes, Version(14), "interpreter_frame.owner", 82);
        put(&mut bytes, Version(14), "thread_state.thread_id", 160);
        put(&mut bytes, Version(14), "code_object.qualname", 136);
        let adopted = adopt(table, &bytes).unwrap();
        assert_eq!((adopted.kernel.frame_instr, adopted.kernel.frame_owner), (64, 82));
        assert_eq!(adopted.kernel.frame_bytes, 83, "read up to the moved owner");
        assert_eq!(adopted.kernel.thread_id, 160);
        assert_eq!(adopted.code.qualname, Some(136));
        let unmoved = |l: &Layout| (l.kernel.frame_back, l.kernel.frame_code, l.code.name, l.string);
        assert_eq!(unmoved(&adopted), unmoved(table));
    }

    #[test]
    fn a_field_moved_beyond_the_reads_is_refused_by_name() {
        let table = layout::layout(Version(14)).unwrap();
        for (path, offset) in [
            ("interpreter_frame.owner", u64::from(PythonOffsets::MAX_FRAME_BYTES)),
            ("interpreter_frame.previous", 124),
            ("thread_state.current_frame", u64::from(PythonOffsets::THREAD_BYTES) - 4),
            ("code_object.firstlineno", u64::from(PythonOffsets::CODE_BYTES)),
            ("code_object.name", u64::MAX),
        ] {
            let mut bytes = agreeing(table);
            put(&mut bytes, Version(14), path, offset);
            assert_eq!(adopt(table, &bytes), Err(Disagreement::Moved(path, offset)), "{path}");
            assert_eq!(Disagreement::Moved(path, offset).to_string(), format!("{path} moved"));
        }
    }

    #[test]
    fn another_version_or_a_free_threaded_build_is_refused() {
        let layout = layout::layout(Version(13)).unwrap();
        let mut bytes = agreeing(layout);
        bytes[VERSION + 2] = 14;
        assert!(matches!(adopt(layout, &bytes), Err(Disagreement::Version(_))));
        let mut bytes = agreeing(layout);
        bytes[FREE_THREADED] = 1;
        assert_eq!(adopt(layout, &bytes), Err(Disagreement::FreeThreaded));
    }

    #[test]
    fn short_or_cookieless_bytes() {
        let layout = layout::layout(Version(13)).unwrap();
        assert_eq!(adopt(layout, &[0; BYTES]), Ok(*layout));
        assert_eq!(release(&[0; BYTES]), None);
        assert!(adopt(layout, &agreeing(layout)[..100]).is_err());
    }
}
